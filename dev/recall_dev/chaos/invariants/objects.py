"""Invariant 8 against the bucket's listing, and invariant 10 loosely. Pure.

What the bucket may hold once the run is over (`expected`), by the jobs and Batches that exist:
- an accepted result's transcript (`status.result.transcript`) and the output formats the
  worker rendered beside it (`out.<format>` in the same directory): *required*, but the
  outputs only when the job asks for formats;
- of a job not ended (Queued or Leased): the cutting and the chunk records its checkpoint
  names (`status.progress.parts`), *required*; and while it is Leased, anything in its current
  attempt's directory (its holder writes before the renewal that names it);
- of a published job (`status.published`): its entry in its Batch's results index, if that
  Batch exists with the UID in the key, and its outputs at `spec.output` in the run's
  bucket, *required*;
- the probe objects (the workers' `scratch/.probe`, written after a refusal of the store,
  and the operators' `index/.probe`), kept apart: they are no work of any job.
Anything else is left over (`Objects.left`), and a required object not in the listing was
deleted although something references it (`Objects.missing`).

Checks: 8, every required object exists; and, once the drain finished and the operators had
time to collect (`History.settled`), nothing is left over (which objects are, by attempt).
6 for the second record of a job (DESIGN §4b): by then every Succeeded job is published.
4, a published copy (index entry, output) holds the bytes of what it copies. 10, loosely: no
ConfigMap holds the work (the namespace holds only the run's probe, the cluster's CA and the
operator's usage record of counts per day), and every job stays under `JOB_BYTES` as the API
server serves it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from recall.operator import usage
from recall.operator.results.publish import PROBE_KEY as OPERATOR_PROBE
from recall.resources import Phase, TranscriptionJob
from recall.transcripts import attempt_dir, chunk_key, output_url, parse_scratch
from recall.transcripts.layout import CUTTING, OUTPUT, TRANSCRIPT
from recall.worker.probes import PROBE_KEY as WORKER_PROBE
from recall_dev.chaos.bucket import URL
from recall_dev.chaos.history import History
from recall_dev.chaos.invariants.verdict import Verdict

JOB_BYTES = 4096
# ConfigMaps the namespace may hold: the cluster's CA, the run's own write probe
KNOWN_CONFIG_MAPS = {"kube-root-ca.crt", "chaos-probe"}
# The operator's usage record: counts per UTC day (about 70 bytes a day), the ids of its last
# writes (16 of 12 characters) and a mark of each job counted (9 bytes; `recall.operator.usage`:
# at most `MAX_MARKS` a day, two days kept), never the work; a run spans at most two days.
USAGE_BYTES = 1024
USAGE_BYTES_PER_JOB = 12
SHOWN = 12  # keys shown per violation
PROBES = (WORKER_PROBE, OPERATOR_PROBE)

Obj = dict[str, Any]


@dataclass
class Objects:
    """The bucket's keys against what the jobs and Batches reference."""

    required: dict[str, str] = field(default_factory=dict)  # key -> which job needs it
    open_dirs: dict[str, str] = field(default_factory=dict)  # directory -> its Leased job
    result_dirs: dict[str, str] = field(default_factory=dict)  # directory -> its job
    transcripts: set[str] = field(default_factory=set)  # accepted results' (checked in results)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (key, whose)
    left: list[str] = field(default_factory=list)
    probes: list[str] = field(default_factory=list)


def output_keys(job: Obj) -> dict[str, str]:
    """A published job's output keys in the run's bucket -> the format, by `spec.output`."""
    spec = job.get("spec") or {}
    published = (job.get("status") or {}).get("published") or {}
    if not spec.get("output") or not published.get("formats"):
        return {}
    model = TranscriptionJob.model_validate(
        {
            "metadata": {"name": job["name"], "namespace": job.get("namespace") or ""},
            "spec": spec,
        }
    )
    assert model.spec.output is not None
    out = {}
    for fmt in published["formats"]:
        url = output_url(model.spec.output, fmt, model)
        if url.startswith(URL):
            out[url[len(URL) :]] = fmt
    return out


def _job(expect: Objects, job: Obj, batch_uids: dict[str, str]) -> None:
    """What `job` references, into `expect`."""
    name, status = job["name"], job.get("status") or {}
    ns, uid = job.get("namespace") or "", job.get("uid") or ""
    phase = status.get("phase") or Phase.QUEUED
    result = (status.get("result") or {}).get("transcript")
    if result:
        expect.required[result] = name
        expect.transcripts.add(result)
        directory = result[: -len(TRANSCRIPT)]
        expect.result_dirs[directory] = name
        for fmt in ((job.get("spec") or {}).get("output") or {}).get("formats") or []:
            expect.required[f"{directory}{OUTPUT}.{fmt}"] = name
    if phase in (Phase.QUEUED, Phase.LEASED):
        for part in (status.get("progress") or {}).get("parts") or []:
            directory = attempt_dir(ns, name, uid, int(part["attempt"]), part["token"])
            expect.required[directory + CUTTING] = name
            for i in range(int(part["first"]), int(part["end"])):
                expect.required[chunk_key(directory, i)] = name
        lease = status.get("lease")
        if phase == Phase.LEASED and lease:
            attempts = int(status.get("attempts") or 0)
            expect.open_dirs[attempt_dir(ns, name, uid, attempts, lease["token"])] = name
    published = status.get("published") or {}
    index = published.get("index")
    if index:
        parts = str(index).split("/")
        batch = (job.get("spec") or {}).get("batchRef")
        if len(parts) == 5 and batch_uids.get(batch or "") == parts[3]:
            expect.required[index] = name
    for key in output_keys(job):
        expect.required[key] = name


def expected(jobs: dict[str, Obj], batches: list[Obj], keys: list[str]) -> Objects:
    """`keys` (the bucket's listing) against what `jobs` and `batches` reference."""
    expect = Objects()
    batch_uids = {b["metadata"]["name"]: b["metadata"].get("uid") or "" for b in batches}
    for job in jobs.values():
        _job(expect, job, batch_uids)
    listed = set(keys)
    expect.missing = sorted((k, who) for k, who in expect.required.items() if k not in listed)
    for key in sorted(listed):
        if key in expect.required:
            continue
        if key in PROBES:
            expect.probes.append(key)
            continue
        directory, _, base = key.rpartition("/")
        directory += "/"
        if directory in expect.open_dirs:
            continue
        if directory in expect.result_dirs and base.startswith(f"{OUTPUT}."):
            continue
        expect.left.append(key)
    return expect


def describe_left(keys: list[str]) -> list[str]:
    """Left-over keys grouped by attempt directory (or top-level prefix), with counts."""
    groups: defaultdict[str, list[str]] = defaultdict(list)
    for key in keys:
        parsed = parse_scratch(key)
        group = parsed.directory if parsed else key.rsplit("/", 1)[0] + "/"
        groups[group].append(key.rsplit("/", 1)[-1])
    return [
        f"{group} ({len(names)}): {', '.join(sorted(names)[:6])}"
        + (" ..." if len(names) > 6 else "")
        for group, names in sorted(groups.items())
    ]


def check_objects(h: History, verdict: Verdict) -> None:
    """8 (required objects exist; nothing left over once settled) and 4 on published copies."""
    found = expected(h.final.jobs, h.final.batches, h.final.objects)
    by_job: defaultdict[str, list[str]] = defaultdict(list)
    for key, who in found.missing:
        if key not in found.transcripts:  # a missing transcript is reported by `results`
            by_job[who].append(key)
    for who, keys in sorted(by_job.items()):
        verdict.add(8, who, f"{len(keys)} referenced object(s) not in the bucket", *keys[:SHOWN])
    drained = h.drained is not None
    if drained and found.left:
        waited = (
            f"{h.settle_timeout:.0f} s of collection after the drain"
            if h.settled is None
            else "the collection settled"
        )
        groups = describe_left(found.left)
        verdict.add(
            8,
            None,
            f"{len(found.left)} unreferenced object(s) left in the bucket after {waited}",
            *groups[:SHOWN],
            *([f"... and {len(groups) - SHOWN} more directories"] if len(groups) > SHOWN else []),
        )
    unpublished = sorted(
        n
        for n, j in h.final.jobs.items()
        if j["status"].get("phase") == "Succeeded" and not j["status"].get("published")
    )
    if drained and unpublished:
        verdict.add(
            6,
            None,
            f"{len(unpublished)} Succeeded job(s) never published (the publish record)",
            ", ".join(unpublished[:SHOWN]) + (" ..." if len(unpublished) > SHOWN else ""),
        )
    for key, state in sorted(h.final.copies.items()):
        if state == "differs":
            verdict.add(4, None, f"the published copy {key} is not the accepted result's")
    s = verdict.stats
    s["objects"] = len(h.final.objects)
    s["objects_left"] = len(found.left)
    s["objects_missing"] = len(found.missing)
    s["store_probes"] = found.probes


def check_ledger(h: History, verdict: Verdict) -> None:
    """10, loosely: no ConfigMap but the known ones; every job under `JOB_BYTES`."""
    record = USAGE_BYTES + USAGE_BYTES_PER_JOB * len(h.final.job_bytes)
    for name, size in sorted(h.final.config_maps.items()):
        if name in KNOWN_CONFIG_MAPS or (name == usage.CONFIG_MAP and size < record):
            continue
        verdict.add(10, None, f"ConfigMap {name} ({size} bytes of data) in the namespace")
    big = sorted(
        ((n, b) for n, b in h.final.job_bytes.items() if b >= JOB_BYTES), key=lambda x: -x[1]
    )
    for name, size in big[:SHOWN]:
        verdict.add(10, name, f"the job is {size} bytes as the API server serves it (>= 4 KiB)")
    verdict.stats["job_bytes_max"] = max(h.final.job_bytes.values(), default=0)
