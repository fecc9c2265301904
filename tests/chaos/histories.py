"""Hand-made histories for the tests of the chaos checks: one job's versions as the recorder
would have seen them (`Job`), and `clean()`, a run without a violation to start from: w1 claims
j and is killed, the operator reclaims, w2 claims and completes, its transcript in the bucket,
and the operator publishes it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from recall_dev.chaos.history import (
    Fault,
    Final,
    History,
    JobHistory,
    LogEvent,
    ProcessEnd,
    Version,
)
from recall_dev.chaos.invariants import Verdict

T0 = 1_000_000.0
T1 = "a" * 32
T2 = "b" * 32
NS = "chaos"
UID = "uid-j"
SPEC: dict[str, Any] = {
    "leaseDurationSeconds": 2,
    "maxAttempts": 3,
    "maxReleases": 10,
    "engine": {"name": "simulated", "simulate": {"chunks": 2}},
}


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat().replace("+00:00", "Z")


def lease(token: str, holder: str, renewed: float) -> dict[str, Any]:
    return {
        "holder": holder,
        "token": token,
        "acquireTime": iso(T0),
        "renewTime": iso(renewed),
        "durationSeconds": 2,
    }


class Job:
    """Builds one job's versions, as the recorder would have seen them."""

    def __init__(self, name: str = "j") -> None:
        self.name = name
        self.versions: list[Version] = []
        self.status: dict[str, Any] = {"phase": "Queued"}
        self.rv = 100
        self.see(T0)

    def see(self, t: float, **changes: Any) -> Job:
        status = {**self.status, **changes}
        self.status = {k: v for k, v in status.items() if v is not None}
        self.rv += 1
        self.versions.append(Version(t, self.rv, 0, False, SPEC, dict(self.status)))
        return self

    def claim(self, t: float, token: str, holder: str) -> Job:
        return self.see(
            t,
            phase="Leased",
            lease=lease(token, holder, t),
            fence=f"{token}/1",
            attempts=self.status.get("attempts", 0) + 1,
        )

    def renew(self, t: float, n: int) -> Job:
        held = self.status["lease"]
        token = held["token"]
        return self.see(t, lease={**held, "renewTime": iso(t)}, fence=f"{token}/{n}")

    def complete(self, t: float, n: int) -> Job:
        held = self.status["lease"]
        result = {
            "transcript": key(self.name, self.status["attempts"], held["token"]),
            "token": held["token"],
            "attempt": self.status["attempts"],
            "worker": held["holder"],
        }
        return self.see(
            t, phase="Succeeded", lease=None, fence=f"{held['token']}/{n}", result=result
        )

    def reclaim(self, t: float) -> Job:
        token = self.status["lease"]["token"]
        return self.see(
            t,
            phase="Queued",
            lease=None,
            fence=f"{token}/reclaim-{self.status['attempts']}",
            expiredLeases=self.status.get("expiredLeases", 0) + 1,
            lastError={"reason": "LeaseExpired", "time": iso(t)},
        )

    def history(self) -> JobHistory:
        return JobHistory(self.name, list(self.versions))

    def final(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": NS,
            "uid": UID,
            "spec": SPEC,
            "status": dict(self.status),
            "labels": {},
        }


def key(job: str, attempt: int, token: str, name: str = "transcript.json") -> str:
    """A key of `job`'s attempt directory in the bucket."""
    return f"scratch/{NS}/{job}/{UID}/a{attempt}-{token}/{name}"


def transcript(name: str, chunks: list[int], attempt: int = 2, token: str = T2) -> dict[str, Any]:
    """A transcript as `final.read_final` reads it back from the bucket."""
    segments = [{"start": i * 30.0, "text": f"{name} chunk {i} the quick"} for i in chunks]
    return {"job": name, "uid": UID, "attempt": attempt, "token": token, "segments": segments}


def event(t: float, process: str, name: str, **fields: Any) -> LogEvent:
    return LogEvent(t, process, name, {"event": name, **fields})


def clean() -> tuple[Job, History]:
    """w1 claims j, is killed; the operator reclaims; w2 claims and completes."""
    job = Job()
    job.claim(T0 + 1, T1, "w1").renew(T0 + 1.5, 2)
    job.reclaim(T0 + 4.0)
    job.claim(T0 + 4.2, T2, "w2").renew(T0 + 4.5, 2).complete(T0 + 5, 3)
    job.see(T0 + 5.5, published={"time": iso(T0 + 5.5), "formats": []})
    history = History(
        jobs={"j": job.history()},
        relists=[],
        logs=[
            event(T0 + 1, "w1", "claimed", job="j", attempt=1, token=T1[:8]),
            event(T0 + 4.2, "w2", "claimed", job="j", attempt=2, token=T2[:8]),
            event(T0 + 5, "w2", "completed", job="j", attempt=2, token=T2[:8]),
        ],
        self_faults=[],
        engine=[
            {"job": "j", "attempt": 1, "chunk": 0},
            {"job": "j", "attempt": 2, "chunk": 1},
        ],
        faults=[
            Fault(
                T0 + 1.6,
                "worker-kill",
                "w1",
                {"leases": [{"job": "j", "token": T1, "duration": 2}]},
            )
        ],
        leaders=[],
        processes=[ProcessEnd("w1", "worker", T0, None, T0 + 1.6, "killed", -9, "")],
        final=Final(
            jobs={"j": job.final()},
            batches=[],
            transcripts={key("j", 2, T2): transcript("j", [0, 1])},
            objects=[key("j", 2, T2)],
            config_maps={"kube-root-ca.crt": 1000},
            job_bytes={"j": 1500},
            read_at=T0 + 20,
        ),
        expected={"j": "normal"},
        started=T0,
        faults_ended=T0 + 10,
        drained=T0 + 11,
        tick=0.5,
    )
    return job, history


def invariants(verdict: Verdict) -> set[int]:
    return {v.invariant for v in verdict.violations}


def refinal(h: History, job: Job) -> None:
    h.jobs = {job.name: job.history()}
    h.final.jobs = {job.name: job.final()}
