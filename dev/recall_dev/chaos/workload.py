"""What a chaos run submits and how hard it shakes: profiles, and the seeded workload.

Pure: `plan_workload(profile, rng)` returns the waves of Batches and single TranscriptionJobs
to create, each with the simulated engine's behaviour (chunks, delay per chunk, a blocking
call, a retriable failure on the first attempt, a poison job that fails every attempt, a
permanent failure), and for some an output the operator publishes to (`OUTPUTS`, in the run's
bucket, formats at random). The same seed gives the same workload and the same fault schedule; what
the processes do with it depends on the operating system's scheduling.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from recall.operator.reconcile.fanout import job_name
from recall.resources import API_VERSION

# Kinds of single jobs and how the simulated engine treats them.
NORMAL = "normal"
RETRY_ONCE = "retry-once"  # a retriable failure on the first attempt, then success
POISON = "poison"  # a retriable failure on every attempt: ends Failed, attempts spent
PERMANENT = "permanent"  # a permanent failure: ends Failed at once
BLOCKING = "blocking"  # one blocking engine call longer than the heartbeat interval
KINDS: dict[str, float] = {NORMAL: 0.72, RETRY_ONCE: 0.12, POISON: 0.04, PERMANENT: 0.04}
KINDS[BLOCKING] = 1.0 - sum(KINDS.values())

KIND_LABEL = "chaos.recall.dev/kind"
# Where published outputs go, in the run's bucket (recall_dev.chaos.bucket.BUCKET), and the
# share of single jobs and of Batches that ask for outputs.
PUBLISHED = "published"
OUTPUTS = {
    "TranscriptionJob": f"s3://chaos/{PUBLISHED}/{{job}}",
    "Batch": f"s3://chaos/{PUBLISHED}/{{batch}}/{{key}}.{{format}}",
}
OUTPUT_SHARE = 0.3
FORMATS = ("json", "srt", "vtt", "txt")


@dataclass(frozen=True)
class Profile:
    """How long and how hard one run goes."""

    name: str
    duration: float  # seconds of faults
    # after the faults, seconds for every job to end: a ceiling, spent only by a slow run (a
    # loaded machine, a stuck job), which then ends "drain timed out"
    drain_timeout: float
    workers: int
    batches: int
    batch_items: tuple[int, int]
    singles: int
    waves: int  # submissions, spread over the first 3/4 of the fault phase
    fault_interval: float  # mean seconds between two injected faults (exponential)
    etcd_restarts: int
    apiserver_restarts: int
    leases: tuple[int, ...] = (2, 3, 4)
    max_attempts: int = 8
    tick_seconds: float = 0.5
    # Added to the kill -> Queued bound of lease + 2 ticks: the short profile is `make test`'s,
    # which runs it alone after its other tests, but on whatever 2-core CI machine runs it
    # (beside the 3,000-item Batch, reclaims were seen 2 s late). A reclaim left to the full
    # reconcile (30 s) still fails the bound; `make chaos` runs without slack.
    reclaim_slack: float = 0.0
    reconcile_interval: float = 30.0  # the operator's full reconcile; items converge within it
    # leader election of the two operators: short, so that takeovers happen within a run
    leader_lease: float = 6.0
    leader_renew_deadline: float = 4.0
    leader_retry_period: float = 1.0
    # the S3 server killed and restarted in place (SIGKILL or SIGTERM; writes stall ~15 s)
    store_restarts: int = 1
    sweep_seconds: float = 3.0  # the operators' full sweep of the results store
    # After the drain, the operators' collection gets this many sweeps (and a few seconds) to
    # remove what nothing references before the bucket is judged.
    settle_sweeps: float = 4.0

    @property
    def settle_timeout(self) -> float:
        return self.settle_sweeps * self.sweep_seconds + 5.0


PROFILES: dict[str, Profile] = {
    # about two minutes in all: the version `make test` runs
    "short": Profile(
        name="short",
        duration=70.0,
        drain_timeout=90.0,
        workers=8,
        batches=4,
        batch_items=(22, 30),
        singles=70,
        waves=6,
        fault_interval=1.5,
        etcd_restarts=1,
        apiserver_restarts=1,
        reclaim_slack=2.5,
    ),
    # a few minutes per seed: `make chaos`
    "long": Profile(
        name="long",
        duration=210.0,
        drain_timeout=150.0,
        workers=8,
        batches=8,
        batch_items=(35, 45),
        singles=200,
        waves=14,
        fault_interval=1.4,
        etcd_restarts=3,
        apiserver_restarts=3,
        store_restarts=2,
    ),
}


@dataclass(frozen=True)
class Submission:
    """One object to create: a Batch or a TranscriptionJob manifest, and the jobs it means."""

    kind: str  # "Batch" or "TranscriptionJob"
    name: str
    manifest: dict[str, Any]
    jobs: int


@dataclass
class Wave:
    at: float  # seconds after the start of the fault phase
    submissions: list[Submission] = field(default_factory=list)


def simulate_for(kind: str, rng: random.Random, lease: int) -> dict[str, Any]:
    """The simulated engine's behaviour for one job of `kind`."""
    chunks = rng.randint(2, 6)
    sim: dict[str, Any] = {
        "chunks": chunks,
        "chunkDelaySeconds": round(rng.uniform(0.1, 0.4), 2),
    }
    if kind == RETRY_ONCE:
        sim |= {"failure": "retriable", "failAttempts": 1, "failAtChunk": rng.randrange(chunks)}
    elif kind == POISON:
        sim |= {"failure": "retriable", "failAtChunk": rng.randrange(chunks)}
    elif kind == PERMANENT:
        sim |= {"failure": "permanent", "failAtChunk": rng.randrange(chunks)}
    elif kind == BLOCKING:
        sim["blockSeconds"] = round(rng.uniform(0.5, 1.2) * lease, 2)
    return sim


def single_job(name: str, kind: str, rng: random.Random, profile: Profile) -> dict[str, Any]:
    lease = rng.choice(profile.leases)
    return {
        "apiVersion": API_VERSION,
        "kind": "TranscriptionJob",
        "metadata": {"name": name, "labels": {KIND_LABEL: kind}},
        "spec": {
            "source": {"url": f"file:///media/{name}.wav"},
            "leaseDurationSeconds": lease,
            # a poison job should end in a few attempts, not in eight
            "maxAttempts": 3 if kind == POISON else profile.max_attempts,
            "priority": rng.randint(0, 2),
            "engine": {"name": "simulated", "simulate": simulate_for(kind, rng, lease)},
            **output_for("TranscriptionJob", rng),
        },
    }


def output_for(kind: str, rng: random.Random) -> dict[str, Any]:
    """`{"output": ...}` for a share of the jobs (or Batches) of `kind`, else `{}`."""
    if rng.random() >= OUTPUT_SHARE:
        return {}
    formats = sorted(rng.sample(FORMATS, rng.randint(1, 3)))
    return {"output": {"url": OUTPUTS[kind], "formats": formats}}


def batch(name: str, items: int, rng: random.Random, profile: Profile) -> dict[str, Any]:
    lease = rng.choice(profile.leases)
    kind = RETRY_ONCE if rng.random() < 0.3 else NORMAL
    sim = simulate_for(kind, rng, lease)
    sim["chunks"] = rng.randint(2, 5)
    if "failAtChunk" in sim:
        sim["failAtChunk"] = min(sim["failAtChunk"], sim["chunks"] - 1)
    return {
        "apiVersion": API_VERSION,
        "kind": "Batch",
        "metadata": {"name": name, "labels": {KIND_LABEL: kind}},
        "spec": {
            "items": [
                {"key": f"i{i:03d}", "source": {"url": f"file:///media/{name}-{i:03d}.wav"}}
                for i in range(items)
            ],
            "defaults": {
                "leaseDurationSeconds": lease,
                "maxAttempts": profile.max_attempts,
                "engine": {"name": "simulated", "simulate": sim},
                **output_for("Batch", rng),
            },
        },
    }


def plan_workload(profile: Profile, rng: random.Random) -> list[Wave]:
    """Batches and single jobs, spread over `profile.waves` waves in the first 3/4 of the run."""
    span = profile.duration * 0.75
    waves = [Wave(at=round(span * i / max(1, profile.waves - 1), 2)) for i in range(profile.waves)]
    kinds, weights = list(KINDS), list(KINDS.values())
    for n in range(profile.singles):
        kind = rng.choices(kinds, weights)[0]
        name = f"job-{n:03d}"
        waves[n % len(waves)].submissions.append(
            Submission("TranscriptionJob", name, single_job(name, kind, rng, profile), 1)
        )
    for n in range(profile.batches):
        items = rng.randint(*profile.batch_items)
        name = f"batch-{n}"
        wave = waves[(n * len(waves)) // max(1, profile.batches)]
        wave.submissions.append(Submission("Batch", name, batch(name, items, rng, profile), items))
    for wave in waves:
        rng.shuffle(wave.submissions)
    return waves


def expected_jobs(waves: list[Wave]) -> dict[str, str]:
    """Every job the waves submit (a Batch's items included) -> its kind."""
    expected: dict[str, str] = {}
    for wave in waves:
        for sub in wave.submissions:
            kind = sub.manifest["metadata"]["labels"][KIND_LABEL]
            if sub.kind == "Batch":
                for item in sub.manifest["spec"]["items"]:
                    expected[job_name(sub.name, item["key"])] = kind
            else:
                expected[sub.name] = kind
    return expected
