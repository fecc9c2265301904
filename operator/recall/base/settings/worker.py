"""`recall worker`'s settings, `RECALL_WORKER_*` (see `recall.base.settings`)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Literal, Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from recall.base.settings.shared import EmptyIsNone, default_worker_id


def default_model_cache_dir() -> Path:
    """`recall-models` in the temporary directory (`TMPDIR`, else `/tmp`)."""
    return Path(tempfile.gettempdir()) / "recall-models"


class WorkerSettings(BaseSettings):
    """Settings of `recall worker`."""

    model_config = SettingsConfigDict(env_prefix="RECALL_WORKER_", extra="ignore")

    id: str = Field(
        default_factory=default_worker_id, description="Worker identity (lease holder)."
    )
    namespace: EmptyIsNone = Field(None, description="Namespace to take jobs from; None = current.")
    engine: Literal["whisper", "openai", "simulated"] = Field(
        "whisper", description="The engine this worker runs; it claims only jobs that accept it."
    )
    heartbeat_fraction: float = Field(
        1 / 3, gt=0, lt=0.5, description="Heartbeat interval as a share of the lease duration."
    )
    renew_deadline_fraction: float = Field(
        2 / 3,
        gt=0,
        lt=1,
        description="Stop working when no renewal succeeded for this share of the lease duration.",
    )
    grace_seconds: float = Field(
        10.0,
        ge=0,
        description="On SIGTERM, how long to let the current job finish before releasing it.",
    )
    pool: str = Field(
        "default",
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description="The pool this worker serves: it claims only jobs whose spec.pool names it "
        "(a job without one belongs to the pool named default).",
    )
    slots: int = Field(
        1,
        ge=1,
        le=64,
        description="Leases this worker process holds at once, each with its own token and "
        "heartbeat, sharing one engine (an accelerator serving several streams).",
    )
    batch_size: int = Field(
        1,
        ge=1,
        le=64,
        description="Chunks of a job the engine transcribes in one batched call (faster-whisper's "
        "batched pipeline on a GPU); 1 = one chunk at a time.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Where local Whisper runs: auto takes a CUDA device when one is visible; "
        "cuda refuses to start without one.",
    )
    compute_type: str = Field(
        "auto",
        description="CTranslate2 compute type of local Whisper: auto means int8 on a CPU and "
        "float16 on a GPU; or int8, int8_float16, float16, float32.",
    )
    checkpoint_seconds: float = Field(
        10.0,
        ge=1,
        le=3600,
        description="How often, at most, a renewal carries the checkpoint (the chunks whose "
        "objects are durable), unless the job sets checkpointSeconds: a resumed attempt redoes "
        "at most this much engine work, and a job makes one API write per interval, whatever "
        "its number of chunks.",
    )
    pick_window: int = Field(
        4, ge=1, description="Pick at random among this many jobs at the head of the queue."
    )
    relist_seconds: float = Field(
        300.0, gt=0, description="List the queue again at least this often, besides the watch."
    )
    dispatch: Literal["offers", "queue"] = Field(
        "offers",
        description="offers: claim what the operator offers (each worker reads only its own "
        "offers), serving itself when none comes; queue: watch every queued job and choose.",
    )
    self_serve_seconds: float = Field(
        10.0, gt=0, description="With offers: claim from the queue after this long without one."
    )
    registration_seconds: int = Field(
        15, ge=3, description="How long the worker's registration Lease lasts without renewal."
    )
    health_port: int = Field(
        0, ge=0, le=65535, description="Serve /healthz (the work loop is turning) here; 0 = off."
    )
    idle_exit_seconds: float | None = Field(
        None, gt=0, description="Exit after this long without work (benchmarks, demos)."
    )
    max_jobs: int | None = Field(
        None, ge=1, description="Exit after this many jobs, claimed by all slots together."
    )
    metrics_port: int = Field(0, ge=0, le=65535, description="Serve /metrics here; 0 = off.")
    retry_base_seconds: float = Field(
        5.0,
        gt=0,
        description="Backoff before the first retry of a failed job; doubles each time "
        "(at most retry_cap_seconds).",
    )
    retry_cap_seconds: float = Field(
        300.0, gt=0, description="Longest backoff between retries (at least retry_base_seconds)."
    )
    chunk_seconds: int = Field(30, ge=5, le=600, description="Default audio chunk length.")
    # simulated engine
    simulated_chunks: int = Field(3, ge=1, description="Chunks of a simulated job by default.")
    simulated_chunk_delay: float = Field(0.05, ge=0, description="Seconds per simulated chunk.")
    simulated_record: Path | None = Field(
        None, description="Append one JSON line per simulated chunk here (tests)."
    )
    simulated_words_per_minute: float | None = Field(
        None,
        gt=0,
        description="The simulated engine speaks at this rate (text the size of real speech); "
        "unset: one short segment per chunk.",
    )
    simulated_media: bool = Field(
        False,
        description="The simulated engine fetches, decodes and cuts the job's real source "
        "(tests of the audio path and of sources in buckets); otherwise it reads nothing.",
    )
    # whisper engine
    whisper_model: str | None = Field(
        None, description="Model name or path for faster-whisper; default: the bundled tiny.en."
    )
    whisper_threads: int = Field(0, ge=0, description="CPU threads for faster-whisper; 0 = all.")
    model_cache_dir: Path = Field(
        default_factory=default_model_cache_dir,
        description="Where models fetched from a store (s3://, gs://, az://) are kept, checked, "
        "and shared by the worker processes that mount it (the chart's cache volume).",
    )
    # OpenAI-compatible engine
    openai_base_url: str = Field("https://api.openai.com/v1", description="API base URL.")
    openai_model: str = Field("whisper-1", description="Model name sent to the API.")
    openai_api_key_env: str = Field("OPENAI_API_KEY", description="Variable holding the API key.")
    openai_api_key_file: Path | None = Field(
        None, description="File holding the API key (a mounted Secret)."
    )
    openai_timeout: float = Field(120.0, gt=0, description="Timeout of one API request, seconds.")
    openai_max_retries: int = Field(5, ge=0, description="Retries on 429 and 5xx.")
    # media
    media_max_bytes: int = Field(2 * 1024**3, gt=0, description="Largest source accepted.")
    media_max_seconds: float | None = Field(
        None,
        gt=0,
        description="Longest media accepted, seconds; None = any length (audio is decoded chunk "
        "by chunk, so this bounds the work of one job, not memory).",
    )
    http_timeout: float = Field(30.0, gt=0, description="Timeout of one source download read.")
    store_probe_seconds: float = Field(
        30.0,
        gt=0,
        description="After the results store refused (access, a missing bucket), or the model "
        "cache could not be written, probe it this often before claiming again; after the "
        "device failed a model's load, the first pause before claiming again (doubling).",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.renew_deadline_fraction <= self.heartbeat_fraction * 1.5:
            raise ValueError(
                "renew_deadline_fraction must leave room for a retried heartbeat "
                "(> 1.5 × heartbeat_fraction)"
            )
        if self.retry_base_seconds > self.retry_cap_seconds:
            # The retry backoff needs base <= cap; checked here, not at the first failed job.
            raise ValueError(
                "RECALL_WORKER_RETRY_BASE_SECONDS must not exceed "
                f"RECALL_WORKER_RETRY_CAP_SECONDS ({self.retry_base_seconds:g} > "
                f"{self.retry_cap_seconds:g})"
            )
        return self
