"""What the work costs etcd, read from etcd's own counters (`make bench`, section `etcd`).

- `recording(env, hours, layout)`: one job of `hours` of speech (a 30-second chunk at 150 words
  a minute, ~630 bytes of segments) taken through a real lease holder against the API server:
  claim, a renewal with the checkpoint after every chunk, the transcript, complete. With
  `layout="store"` the chunks and the transcript go to the results store (the runtime's
  `AttemptWriter`); with `layout="configmaps"` they go where the earlier layout put them
  (`bench.legacy`: a merge patch of a 256 KiB shard per chunk). For each: etcd's WAL bytes
  written, the growth of its database (`etcd_mvcc_db_total_size_in_bytes`), the API writes by
  kind (`apiserver_request_total`) and the results store's operations.
- `batch_of_hours(env, items, workers)`: a Batch of `items` jobs whose transcripts are the size
  of an hour of speech (~80 KB, one 600-second chunk at 1,400 words a minute) through simulated
  worker processes; then etcd compacted to the current revision, and its size in use against
  the ledger alone (the bytes of every job and the Batch as the API server returns them).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
import urllib.request
from collections import Counter
from typing import Any

from bench.harness import Env, RequestKey, list_batch, wait
from bench.legacy import ConfigMapTranscript
from recall.bucket import Bucket
from recall.media.types import Chunk, Cutting, Segment
from recall.resources import Phase, Progress, Result
from recall.transcripts import AttemptWriter
from recall.worker.holder import LeaseHolder

CHUNK_SECONDS = 30.0
SPEECH = (
    "the council met on tuesday evening to discuss a new budget for public transport and most "
    "members agreed that more buses should run at weekends while others asked about the cost"
)
WORDS = SPEECH.split(" ")
_METRIC = re.compile(r"^(?P<name>[a-z_]+)(\{[^}]*\})? (?P<value>\S+)$")
COUNTERS = (
    "etcd_disk_wal_write_bytes_total",
    "etcd_mvcc_db_total_size_in_bytes",
    "etcd_mvcc_db_total_size_in_use_in_bytes",
)


def etcd_metrics(env: Env) -> dict[str, float]:
    url = f"http://127.0.0.1:{env.cp.etcd_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _METRIC.match(line)
        if m and m["name"] in COUNTERS:
            out[m["name"]] = out.get(m["name"], 0.0) + float(m["value"])
    return out


def compact(env: Env) -> None:
    """Compact etcd to its current revision (the grpc-gateway of its client port), as the API
    server's periodic compaction would; then the size in use is the live data."""

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            f"http://127.0.0.1:{env.cp.etcd_port}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            answer: dict[str, Any] = json.loads(r.read())
            return answer

    revision = int(post("/v3/kv/range", {"key": "AA==", "limit": 1})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": revision, "physical": True})
    post("/v3/maintenance/defragment", {})


def _segments(index: int) -> list[Segment]:
    words = [WORDS[(index * 7 + i) % len(WORDS)] for i in range(75)]  # 150 words a minute
    start = index * CHUNK_SECONDS
    return [
        Segment(
            start=start + 10 * k,
            end=start + 10 * (k + 1),
            text=" ".join(words[25 * k : 25 * (k + 1)]),
        )
        for k in range(3)
    ]


class CountingBucket(Bucket):
    """The results store, counting the operations a job costs."""

    def __init__(self, inner: Bucket) -> None:
        super().__init__(inner.stores, inner.client, inner.location)
        self.ops: Counter[str] = Counter()

    def put(self, key: str, data: bytes, *, once: bool = True) -> None:
        self.ops["put"] += 1
        super().put(key, data, once=once)


def _writes(before: Counter[RequestKey], after: Counter[RequestKey]) -> dict[str, int]:
    out: dict[str, int] = {}
    for (verb, resource, sub), n in (after - before).items():
        if verb in ("POST", "PATCH", "PUT", "DELETE", "APPLY", "CREATE", "UPDATE"):
            out[f"{verb} {resource}{'/' + sub if sub else ''}"] = n
    return out


def recording(env: Env, hours: float, layout: str) -> dict[str, Any]:
    """One job of `hours` of speech through a lease holder; see the module doc."""
    ns = env.namespace()
    chunks = max(1, round(hours * 3600 / CHUNK_SECONDS))
    manifest = {
        "apiVersion": "recall.dev/v1alpha1",
        "kind": "TranscriptionJob",
        "metadata": {"name": "rec"},
        "spec": {"source": {"url": "file:///bench/rec.wav"}, "leaseDurationSeconds": 600},
    }
    env.store.create_job(ns, manifest)
    job = env.store.get_job(ns, "rec")
    assert job is not None
    bucket = CountingBucket(env.results)
    before, api_before = etcd_metrics(env), env.api_counts()
    started = time.monotonic()
    holder = LeaseHolder.claim(env.store, job, "bench", renew_deadline_fraction=0.9)
    assert isinstance(holder, LeaseHolder)
    words = 0
    if layout == "store":
        writer = AttemptWriter(bucket, holder.known, holder.attempt, holder.token)
        writer.begin(Cutting(CHUNK_SECONDS, 2.0, 16000, "bench"), None)
        for i in range(chunks):
            segments = _segments(i)
            words += sum(len(s.text.split()) for s in segments)
            chunk = Chunk(
                index=i, start=i * CHUNK_SECONDS, duration=CHUNK_SECONDS, first=i, end=i + 1
            )
            holder.renew(Progress.of(i + 1, chunks, writer.add(chunk, segments)))
        summary = writer.finish(chunks * CHUNK_SECONDS, "bench", [])
        holder.complete(Result(transcript=writer.transcript_key, words=summary.words))
    else:
        legacy = ConfigMapTranscript(env.store, ns, "rec")
        legacy.begin()
        for i in range(chunks):
            spoken = [(s.start, s.end, s.text) for s in _segments(i)]
            words += sum(len(text.split()) for _, _, text in spoken)
            legacy.add(i, spoken)
            holder.renew(Progress.of(i + 1, chunks))
        legacy.finish(chunks, words)
        key = f"scratch/{ns}/rec/{job.metadata.uid}/a1-{holder.token}/transcript.json"
        holder.complete(Result(transcript=key, words=words))
    seconds = time.monotonic() - started
    after, api_after = etcd_metrics(env), env.api_counts()
    done = env.store.get_job(ns, "rec")
    assert done is not None and done.status.phase is Phase.SUCCEEDED
    wal = after["etcd_disk_wal_write_bytes_total"] - before["etcd_disk_wal_write_bytes_total"]
    db = after["etcd_mvcc_db_total_size_in_bytes"] - before["etcd_mvcc_db_total_size_in_bytes"]
    writes = _writes(api_before, api_after)
    return {
        "layout": layout,
        "hours": hours,
        "chunks": chunks,
        "words": words,
        "seconds": round(seconds, 1),
        "etcd_wal_bytes": int(wal),
        "etcd_db_growth_bytes": int(db),
        "api_writes": sum(writes.values()),
        "api_writes_by_kind": writes,
        "store_puts": bucket.ops["put"],
        "job_bytes": len(json.dumps(done.to_api())),
    }


def recordings(env: Env) -> dict[str, Any]:
    """1 minute and 10 hours, in the earlier ConfigMap layout and in the results store."""
    return {
        f"{layout}_{label}": recording(env, hours, layout)
        for label, hours in (("1min", 1 / 60), ("10h", 10.0))
        for layout in ("configmaps", "store")
    }


def batch_of_hours(env: Env, items: int, workers: int) -> dict[str, Any]:
    """The Batch of hour-sized transcripts, and the same Batch with one-line transcripts (the
    ledger alone): etcd's growth of each, side by side."""
    return {
        "hours": batch(env, items, workers, words_per_minute=1400),
        "ledger": batch(env, items, workers, words_per_minute=None),
    }


def batch(env: Env, items: int, workers: int, *, words_per_minute: float | None) -> dict[str, Any]:
    """A Batch of `items` jobs, each one 600-second chunk spoken at `words_per_minute` (1,400:
    ~80 KB, an hour of speech; None: one short line); see the module doc."""
    ns = env.namespace()
    compact(env)
    before = etcd_metrics(env)
    op = f"operator-{ns}"
    env.operator(ns, name=op)
    speech = {"simulated_words_per_minute": str(words_per_minute)} if words_per_minute else {}
    names = env.workers(
        ns,
        workers,
        prefix=f"{ns}-w",
        idle_exit=3600,
        chunk_seconds="600",
        simulated_chunks="1",
        **speech,
    )
    created = time.time()
    list_batch(env, ns, "hours", items)
    wait(
        lambda: (b := env.store.get_batch(ns, "hours")) is not None and b.status.complete,
        4 * 3600,
        "the Batch of hours to complete",
        every=2.0,
    )
    seconds = time.time() - created
    env.stop([*names, op])
    jobs = env.jobs(ns)
    batch = env.store.get_batch(ns, "hours")
    assert batch is not None
    ledger = sum(len(json.dumps(j.to_api())) for j in jobs) + len(json.dumps(batch.to_api()))
    transcripts = [o.size for o in env.results.list(f"scratch/{ns}/") if o.key.endswith(".json")]
    compact(env)
    after = etcd_metrics(env)
    in_use = "etcd_mvcc_db_total_size_in_use_in_bytes"
    return {
        "items": items,
        "workers": workers,
        "seconds": round(seconds, 1),
        "transcript_bytes_mean": round(sum(transcripts) / max(1, len(transcripts))),
        "transcript_bytes_total": sum(transcripts),
        "etcd_in_use_growth_bytes": int(after[in_use] - before[in_use]),
        "etcd_wal_bytes": int(
            after["etcd_disk_wal_write_bytes_total"] - before["etcd_disk_wal_write_bytes_total"]
        ),
        "ledger_bytes": ledger,
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
