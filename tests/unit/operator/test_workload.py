"""The outstanding work the autoscalers scale on (`scaling.workload`) and the endpoint
KEDA's metrics-api trigger reads (`recall.operator.scaling.keda`), served on loopback."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from recall.base.endpoint import make
from recall.operator.reconcile.cache import JobCache
from recall.operator.scaling.keda import route
from recall.operator.scaling.workload import Outstanding, Workload
from recall.resources import LABEL_SUSPENDED
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.helpers import get_json
from tests.unit.fakes import NS, claim, job_manifest


def jobs(store: MemoryApi, **engines: str | None) -> None:
    for name, engine in engines.items():
        spec: dict[str, Any] = {"engine": {"name": engine}} if engine else {"engine": None}
        store.create_job(NS, job_manifest(name, **spec))


@pytest.fixture
def fed() -> tuple[MemoryApi, FakeClock, JobCache, Workload]:
    store, clock = MemoryApi(), FakeClock()
    cache, workload = JobCache(clock), Workload()
    cache.listeners.append(workload.update)
    return store, clock, cache, workload


def relist(store: MemoryApi, cache: JobCache) -> None:
    cache.relisted(iter(store.list_jobs(NS).items))


def test_outstanding__claimable_queued_plus_leased_of_the_pools_engines(
    fed: tuple[MemoryApi, FakeClock, JobCache, Workload],
) -> None:
    store, clock, cache, workload = fed
    jobs(store, a="whisper", b="whisper", c=None, d="simulated", e="openai")
    claim(store, clock, "a", worker="w1")
    relist(store, cache)
    assert workload.of(NS, "whisper") == Outstanding(queued=2, leased=1)  # b, c; a
    assert workload.of(NS, "simulated") == Outstanding(queued=1, leased=0)  # only d
    assert workload.of(NS, "openai") == Outstanding(queued=2, leased=0)  # e, c
    assert workload.of("elsewhere", "whisper") == Outstanding()


def test_outstanding__not_suspended_not_in_backoff_not_ended(
    fed: tuple[MemoryApi, FakeClock, JobCache, Workload],
) -> None:
    store, clock, cache, workload = fed
    jobs(store, ok="whisper", held="whisper", waiting="whisper", more="whisper")
    store.patch_job_labels(NS, "held", {LABEL_SUSPENDED: "true"})
    h = claim(store, clock, "waiting", worker="w1")
    h.fail("Flaky", "x", permanent=False, backoff_base=30, backoff_cap=30)
    store.create_job(NS, job_manifest("once", maxAttempts=1))
    h = claim(store, clock, "once", worker="w2")
    h.fail("Flaky", "x", permanent=False, backoff_base=30, backoff_cap=30)
    relist(store, cache)
    assert workload.of(NS, "simulated") == Outstanding(queued=0, leased=0)
    assert workload.of(NS, "whisper") == Outstanding(queued=2, leased=0)  # ok, more
    # changes are followed incrementally: one claim moves a job from queued to leased
    claim(store, clock, "ok", worker="w3")
    job = store.get_job(NS, "ok")
    assert job is not None
    cache.changed("MODIFIED", job.model_dump(by_alias=True, mode="json", exclude_none=True))
    assert workload.of(NS, "whisper") == Outstanding(queued=1, leased=1)


@pytest.fixture
def endpoint(
    fed: tuple[MemoryApi, FakeClock, JobCache, Workload],
) -> Iterator[tuple[str, list[str]]]:
    """The endpoint on a loopback port, and the list whose first item makes it stale."""
    _, _, _, workload = fed
    stale: list[str] = []
    answers = route(workload, lambda: stale[0] if stale else None, namespace=NS, engine="simulated")
    server = make(answers, 0, "127.0.0.1")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", stale
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_endpoint__serves_the_outstanding_work_where_keda_looks_for_it(
    fed: tuple[MemoryApi, FakeClock, JobCache, Workload], endpoint: tuple[str, list[str]]
) -> None:
    store, clock, cache, _ = fed
    url, _ = endpoint
    jobs(store, a="simulated", b="simulated", c="whisper")
    claim(store, clock, "a", worker="w1")
    relist(store, cache)
    code, body = get_json(f"{url}/workload")
    assert code == 200
    # KEDA's metrics-api reads `valueLocation: outstanding` (a GJSON path): a number, one
    # slot per job (targetValue: the pool's slots per worker).
    assert body == {
        "namespace": NS,
        "engine": "simulated",
        "pool": "default",
        "queued": 1,
        "leased": 1,
        "outstanding": 2,
    }
    code, body = get_json(f"{url}/workload?namespace={NS}&engine=whisper")
    assert (code, body["outstanding"]) == (200, 1)
    code, _ = get_json(f"{url}/metrics")
    assert code == 404


def test_endpoint__a_view_not_current_answers_503_never_a_guess(
    endpoint: tuple[str, list[str]],
) -> None:
    url, stale = endpoint
    stale.append("the job informer is not current")
    code, body = get_json(f"{url}/workload")
    assert code == 503, "KEDA counts a failure and, after failureThreshold, its fallback holds"
    assert "not current" in body["error"]
    assert "outstanding" not in body
