"""Validated settings of the worker and the operator, from `RECALL_*` environment variables.

Command-line options override the environment; both end up in these objects, which check
the relations between fields (for example that the heartbeat is well inside the lease).
"""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_worker_id() -> str:
    """The pod name in a cluster (downward API `POD_NAME`, else the hostname)."""
    return os.environ.get("POD_NAME") or socket.gethostname()


class ApiSettings(BaseSettings):
    """How both components talk to the API server."""

    model_config = SettingsConfigDict(env_prefix="RECALL_API_", extra="ignore")

    timeout: float = Field(15.0, gt=0, description="Timeout of one API request, seconds.")
    watch_seconds: int = Field(
        300, ge=10, description="How long one watch request lasts before it is renewed."
    )


SCHEMES = ("s3", "gs", "az", "file", "memory")


class StoreSettings(BaseSettings):
    """Where the work's bytes go: the object store both components use (DESIGN §4b).

    Credentials come from the standard variables of each store (`AWS_*`, `GOOGLE_*`,
    `AZURE_*`, read by the store client itself: static keys, IRSA-style web identity, the GKE
    metadata server, Azure workload identity), or from files in `credentials_dir` (a mounted
    Secret, re-read when it changes). Server-side encryption settings pass through the same way
    (`AWS_SERVER_SIDE_ENCRYPTION`, `AWS_SSE_KMS_KEY_ID`, ...).
    """

    model_config = SettingsConfigDict(env_prefix="RECALL_STORE_", extra="ignore")

    url: str = Field(
        "",
        description="The results store: s3://bucket/prefix, gs://bucket/prefix, "
        "az://container/prefix or file:///path (a mounted volume).",
    )
    credentials_dir: Path | None = Field(
        None,
        description="A directory of credential files named like the variables they replace "
        "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN): a mounted Secret, "
        "re-read within a minute of a change.",
    )
    timeout: float = Field(30.0, gt=0, description="Timeout of one store request, seconds.")
    connect_timeout: float = Field(5.0, gt=0, description="Timeout of one connection, seconds.")
    credentials_refresh_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="How long credentials read from credentials_dir are used before the files "
        "are read again (a rotated Secret is picked up within this).",
    )
    presign_seconds: int = Field(
        3600, ge=60, le=7 * 24 * 3600, description="How long a presigned URL is valid."
    )

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        v = v.strip()
        if v and v.split("://", 1)[0].lower() not in SCHEMES:
            raise ValueError(
                f"unsupported store URL {v!r}: use s3://, gs://, az:// or file:// (memory:// "
                "in tests)"
            )
        return v


class WorkerSettings(BaseSettings):
    """Settings of `recall worker`."""

    model_config = SettingsConfigDict(env_prefix="RECALL_WORKER_", extra="ignore")

    id: str = Field(
        default_factory=default_worker_id, description="Worker identity (lease holder)."
    )
    namespace: str | None = Field(None, description="Namespace to take jobs from; None = current.")
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
        5.0, gt=0, description="Backoff before the first retry of a failed job; doubles each time."
    )
    retry_cap_seconds: float = Field(300.0, gt=0, description="Longest backoff between retries.")
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
        default_factory=lambda: Path(tempfile.gettempdir()) / "recall-models",
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
        "cache could not be written, probe it this often before claiming again.",
    )

    @field_validator("namespace")
    @classmethod
    def _empty_is_none(cls, v: str | None) -> str | None:
        return v or None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.renew_deadline_fraction <= self.heartbeat_fraction * 1.5:
            raise ValueError(
                "renew_deadline_fraction must leave room for a retried heartbeat "
                "(> 1.5 × heartbeat_fraction)"
            )
        return self


class PoolScaling(BaseModel):
    """One worker pool the built-in autoscaler scales: its Deployment, engine and bounds."""

    model_config = ConfigDict(extra="forbid")

    pool: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    deployment: str
    engine: str = "whisper"
    min: int = Field(0, ge=0)
    max: int = Field(10, ge=1)
    slots: int = Field(1, ge=1, le=64)

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min > self.max:
            raise ValueError(f"pool {self.pool}: min must not exceed max")
        return self


class OperatorSettings(BaseSettings):
    """Settings of `recall operator`."""

    model_config = SettingsConfigDict(env_prefix="RECALL_OPERATOR_", extra="ignore")

    namespace: str | None = Field(None, description="Namespace to watch; None = all namespaces.")
    tick_seconds: float = Field(
        0.5,
        gt=0,
        le=10,
        description="How often the controller writes pending Batch projections (the coalescing "
        "window of Batch status writes) and checks leases at the latest, seconds.",
    )
    reconcile_interval: float = Field(
        30.0, gt=0, description="How often every Batch is reconciled with its jobs, seconds."
    )
    max_creates_per_tick: int = Field(
        200,
        ge=1,
        description="Jobs one tick creates for a Batch at most (a big fan-out "
        "continues on the next ticks).",
    )
    metrics_port: int = Field(0, ge=0, le=65535, description="Serve /metrics here; 0 = off.")
    discovery_seconds: float = Field(
        60.0,
        gt=0,
        description="How long the operator waits at start for the API server to serve the "
        "recall.dev resources (CRDs missing, or an API server still starting) before it exits "
        "with the reason (before the chart's liveness probe would restart it), seconds.",
    )
    sweep_seconds: float = Field(
        600.0,
        gt=0,
        description="How often the whole results store is compared with the jobs and Batches "
        "that exist (objects of deleted jobs, late writes of zombies), seconds.",
    )
    liveness_port: int = Field(
        0, ge=0, le=65535, description="Serve kopf's /healthz here; 0 = off."
    )
    health_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="Serve /readyz here (the job cache synced, the results store reachable); "
        "0 = off.",
    )
    dispatch: bool = Field(
        True, description="Offer claimable jobs to idle workers (they also serve themselves)."
    )
    offer_seconds: float = Field(
        5.0, gt=0, description="Withdraw an offer not claimed within this many seconds."
    )
    offer_ahead_seconds: float = Field(
        0.0,
        ge=0,
        description="Offer a worker its next job while it still holds one when its last job "
        "took less than this many seconds (and the one it holds too); 0 (the default) = only "
        "idle workers.",
    )
    leader_election: bool = Field(
        False, description="Elect one acting replica through a coordination.k8s.io Lease."
    )
    leader_election_name: str = Field("recall-operator", description="Name of that Lease.")
    leader_election_namespace: str | None = Field(
        None, description="Namespace of that Lease; None = the watched namespace, or default."
    )
    lease_duration: float = Field(
        15.0, gt=0, description="Seconds a silent leader keeps the Lease (the takeover time)."
    )
    renew_deadline: float = Field(
        10.0, gt=0, description="A leader that could not renew for this long steps down."
    )
    retry_period: float = Field(2.0, gt=0, description="How often the Lease is renewed or tried.")
    identity: str = Field(
        default_factory=lambda: f"{default_worker_id()}_{uuid.uuid4().hex[:8]}",
        description="This replica's name in the Lease (unique per process).",
    )
    # The built-in autoscaler of the worker Deployment (recall.operator.scaling.decide) and the
    # endpoint KEDA's metrics-api trigger reads (recall.operator.scaling.keda).
    autoscale_deployment: str | None = Field(
        None, description="The worker Deployment the operator scales; None = no autoscaling."
    )
    autoscale_namespace: str | None = Field(
        None,
        description="Namespace of that Deployment and of the jobs it serves; None = the "
        "watched namespace, or default.",
    )
    autoscale_engine: str = Field(
        "whisper", description="The engine of that Deployment's workers (its pool of jobs)."
    )
    autoscale_slots: int = Field(
        1, ge=1, le=64, description="Leases each of that Deployment's workers holds at once."
    )
    autoscale_pools: list[PoolScaling] = Field(
        default_factory=list,
        description='More worker pools to scale, as JSON: [{"pool": "gpu", '
        '"deployment": "recall-worker-gpu", "engine": "whisper", "min": 0, '
        '"max": 4, "slots": 4}]; the Deployment of autoscale_deployment is the pool '
        "named default.",
    )
    autoscale_min: int = Field(0, ge=0, description="Fewest workers (0: scale to zero).")
    autoscale_max: int = Field(10, ge=1, description="Most workers.")
    autoscale_cooldown_seconds: float = Field(
        300.0,
        ge=0,
        description="Scale down only after fewer workers were wanted for this long, seconds.",
    )
    autoscale_step: int = Field(
        2, ge=1, description="Workers one scale-down removes at most (each drained first)."
    )
    autoscale_interval: float = Field(
        2.0, gt=0, description="Seconds between two decisions of the autoscaler."
    )
    autoscale_mark_pods: bool = Field(
        True,
        description="Annotate worker pods: safe-to-evict false while busy, and the lowest "
        "pod-deletion-cost on drained ones.",
    )
    workload_port: int = Field(
        0, ge=0, le=65535, description="Serve the pool's outstanding work as JSON here (KEDA)."
    )

    @field_validator(
        "namespace", "leader_election_namespace", "autoscale_namespace", "autoscale_deployment"
    )
    @classmethod
    def _empty_is_none(cls, v: str | None) -> str | None:
        return v or None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.tick_seconds * 2 > self.reconcile_interval:
            raise ValueError("reconcile_interval must be at least two ticks (tick_seconds)")
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need retry_period < renew_deadline < lease_duration")
        if self.autoscale_min > self.autoscale_max:
            raise ValueError("autoscale_min must not exceed autoscale_max")
        pools = [p.pool for p in self.scaled_pools()]
        if len(pools) != len(set(pools)):
            raise ValueError(f"each pool is scaled once: {pools}")
        return self

    def scaled_pools(self) -> list[PoolScaling]:
        """Every pool the built-in autoscaler scales: autoscale_deployment (the default pool),
        then autoscale_pools."""
        first = []
        if self.autoscale_deployment is not None:
            first.append(
                PoolScaling(
                    pool="default",
                    deployment=self.autoscale_deployment,
                    engine=self.autoscale_engine,
                    min=self.autoscale_min,
                    max=self.autoscale_max,
                    slots=self.autoscale_slots,
                )
            )
        return first + list(self.autoscale_pools)
