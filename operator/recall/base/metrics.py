"""Prometheus metrics of the worker and the operator, served by `serve(port)`.

`serve` answers every GET with the text exposition of the default registry, from
`recall.base.endpoint` (both address families, a request timeout), not from prometheus_client's
own server, which listens on one family and waits on a silent client forever.

Names follow the protocol's words (DESIGN §7). Counters only go up within a process; a
restart starts them at zero, as Prometheus expects.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from recall.base import endpoint

CLAIMS = Counter("recall_claims_total", "Jobs claimed by this worker.")
CLAIM_CONFLICTS = Counter(
    "recall_claim_conflicts_total", "Claims lost to another writer (409 on the claim)."
)
CONFLICTS = Counter(
    "recall_write_conflicts_total", "Fenced writes answered 409 by the API server.", ["action"]
)
FENCED_REJECTIONS = Counter(
    "recall_fenced_rejections_total",
    "Fenced writes refused after a conflict because the lease was no longer the writer's.",
    ["action", "reason"],
)
LEASES_LOST = Counter("recall_leases_lost_total", "Leases a worker lost while working.", ["reason"])
HEARTBEAT_LATENCY = Histogram(
    "recall_heartbeat_latency_seconds",
    "Time of one renew (heartbeat) write, including conflict retries.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
LEASE_WRITES = Counter(
    "recall_worker_lease_writes_total",
    "Fenced writes of lease holders that reached the API server, by action.",
    ["action"],
)
CHECKPOINTS = Counter(
    "recall_worker_checkpoints_total", "Renewals that carried new durable progress."
)
API_THROTTLED = Counter(
    "recall_api_throttled_total",
    "Requests the API server turned away with 429 (API Priority and Fairness), by verb.",
    ["verb"],
)
STAGE_WAIT = Histogram(
    "recall_worker_stage_wait_seconds",
    "Time a stage of the worker's pipeline waited for its input or for room downstream, by "
    "stage (decode, engine, store) and what it waited for.",
    ["stage", "waited_for"],
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
ENGINE_CHUNKS = Counter("recall_engine_chunks_total", "Chunks the engine transcribed.", ["engine"])
STORE_ERRORS = Counter(
    "recall_store_errors_total",
    "Results-store calls that failed, by reason (StorageUnavailable is retried).",
    ["reason"],
)
STORE_SECONDS = Histogram(
    "recall_store_request_seconds",
    "Time of one results-store request (put, get, head, delete, copy), failed ones too.",
    ["operation"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
STORE_OPERATIONS = Counter(
    "recall_store_operations_total",
    "Results-store operations of the operator (delete, copy, put, list).",
    ["operation"],
)
PUBLISHES = Counter(
    "recall_publishes_total", "Accepted results published by the operator, by outcome.", ["outcome"]
)
JOBS_FINISHED = Counter(
    "recall_worker_jobs_total", "Jobs this worker finished, by outcome.", ["outcome"]
)
WORKER_SLOTS = Gauge(
    "recall_worker_slots", "Leases this worker holds at once at most (RECALL_WORKER_SLOTS)."
)

RECLAIMS = Counter("recall_reclaims_total", "Expired leases reclaimed by the operator.")
RECLAIM_DELAY = Histogram(
    "recall_reclaim_delay_seconds",
    "Time from a lease's observed expiry to the job being requeued.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30),
)
HEALS = Counter("recall_heals_total", "Batch items the reconciler healed.", ["kind"])
JOBS = Gauge("recall_jobs", "TranscriptionJobs seen by the operator, by phase.", ["phase"])
# One series per Batch and item phase (Batches are few): exported by the leading replica only.
BATCH_ITEMS = Gauge(
    "recall_batch_items",
    "A Batch's items by phase (queued, transcribing, completed, failed, cancelled), as its "
    "status counts them; batch is <namespace>/<name>. Exported by the leading operator only.",
    ["batch", "phase"],
)
BATCH_SUSPENDED = Gauge(
    "recall_batch_suspended",
    "1 while a Batch is suspended (spec.suspend), else 0; batch is <namespace>/<name>.",
    ["batch"],
)
BATCH_WRITES = Counter("recall_batch_status_writes_total", "Batch status writes by the operator.")
AMBIGUOUS_WRITES = Counter(
    "recall_ambiguous_writes_total",
    "Fenced writes whose answer was lost (timeout, reset, 5xx); settled by reading back.",
    ["action"],
)
TICK_SECONDS = Histogram(
    "recall_operator_tick_seconds",
    "Time of one controller tick (reclaims, reconciles, projections).",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
OFFERS = Counter("recall_offers_total", "Queued jobs the operator offered to idle workers.")
OFFERS_WITHDRAWN = Counter(
    "recall_offers_withdrawn_total", "Offers taken back because no claim followed in time."
)
LEADER = Gauge("recall_operator_leader", "1 while this operator replica leads, else 0.")

# The built-in autoscaler of the worker Deployment (recall.operator.scaling.scaler).
WORKERS_DESIRED = Gauge(
    "recall_workers_desired",
    "Workers a pool wants: its outstanding jobs over its slots a worker, within min and max.",
    ["pool"],
)
WORKERS_CURRENT = Gauge(
    "recall_workers_current", "Workers a pool's Deployment asks for (spec.replicas).", ["pool"]
)
WORKERS_DRAINING = Gauge(
    "recall_workers_draining",
    "Workers of a pool asked to drain before a scale-down removes them.",
    ["pool"],
)
OUTSTANDING = Gauge(
    "recall_outstanding_jobs",
    "A worker pool's outstanding jobs: claimable Queued ones and Leased ones.",
    ["pool", "phase"],
)
SCALING_REASON = Gauge(
    "recall_scaling_reason",
    "1 for the reason of a pool's autoscaler's last decision.",
    ["pool", "reason"],
)
SCALINGS = Counter("recall_scalings_total", "Scale writes to the worker Deployment.", ["direction"])
DRAINS = Counter("recall_drains_total", "Drain requests to idle workers, by outcome.", ["outcome"])
NOTIFY_DELIVERIES = Counter(
    "recall_notify_deliveries_total",
    "Event deliveries to sinks by outcome (delivered, unavailable, refused, given_up).",
    ["outcome"],
)
NOTIFY_PENDING = Gauge("recall_notify_pending", "Events owed and not settled yet (the leader).")
# What each team used (docs/notify.md#usage-per-team): every attempt counts, failed and
# abandoned ones too; a file split into channels counts each channel's seconds. The jobs'
# namespace is `job_namespace`: a scrape's own `namespace` label is the operator's.
AUDIO_SECONDS = Counter(
    "recall_audio_seconds_total",
    "Seconds of audio transcribed (each channel of a split file counted), by namespace, pool "
    "and engine.",
    ["job_namespace", "pool", "engine"],
)
ENGINE_SECONDS = Counter(
    "recall_engine_seconds_total",
    "Seconds workers held jobs, from each claim to the job's end or the lease's last renewal "
    "seen (failed, released and reclaimed attempts included), by namespace, pool and engine.",
    ["job_namespace", "pool", "engine"],
)


def serve(port: int, addr: str | None = None) -> None:
    """Serve /metrics on `port` (`addr`; None: every address, both families where the host has
    IPv6: `endpoint.any_address`) from a daemon thread, prometheus_client's own server (the
    format the scraper asks for, gzip). Port 0 disables it."""
    if port:
        start_http_server(port, addr=endpoint.any_address() if addr is None else addr)
