"""`recall get` on the memory store: kubectl's tables (one set of column widths over every page,
NAMESPACE with -A), `-o name`, the objects as stored for yaml and json, a refused `-o`, and an
object the models cannot read named on stderr while the rest are listed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from recall.cli import listing
from recall.cli.commands import get
from recall.cli.common import CliError
from recall.kube.verbs import BATCHES, JOBS
from recall.resources import API_VERSION
from recall_dev.twin import FakeClock, MemoryApi
from tests.unit.fakes import NS, batch_manifest, job_manifest


class Echo:
    """What `recall get` printed, stdout and stderr apart."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.err: list[str] = []

    def __call__(self, text: str, err: bool = False) -> None:
        (self.err if err else self.out).append(text)


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> MemoryApi:
    clock = FakeClock()
    monkeypatch.setattr(listing, "SYSTEM", clock)  # ages read on the store's clock
    return MemoryApi(clock=clock)


def run(store: MemoryApi, kind: str, namespace: str | None = NS, **kw: Any) -> Echo:
    echo = Echo()
    options: dict[str, Any] = {"output": None, "batch": None, "phase": None, **kw}
    listing.get_command(store, kind, [], namespace, echo=echo, **options)
    return echo


def test_get__single_page_tables_are_kubectl_s(store: MemoryApi) -> None:
    for name in ("a", "talks-monday"):
        store.create_job(NS, job_manifest(name))
    store.create_batch(NS, batch_manifest("talks", ["a", "b"]))
    assert run(store, "jobs").out == [
        "NAME           PHASE    HOLDER   ATTEMPTS   PROGRESS   AGE\n"
        "a              Queued            0                     0s\n"
        "talks-monday   Queued            0                     0s"
    ]
    assert run(store, "batches").out == [
        "NAME    ITEMS   COMPLETED   FAILED   PROGRESS   ETA   AGE\n"
        "talks   2       0           0        0%         -     0s"
    ]


def test_get_jobs__every_page_shares_the_column_widths(store: MemoryApi) -> None:
    """Jobs are read 500 at a time; a longer name on the second page widens every row."""
    for i in range(500):
        store.create_job(NS, job_manifest(f"j{i:03}"))
    store.create_job(NS, job_manifest("z-a-much-longer-name"))
    echo = run(store, "jobs")
    assert len(echo.out) == 1
    header, *rows = echo.out[0].splitlines()
    assert len(rows) == 501
    column = header.index("PHASE")
    assert all(row[column:].startswith("Queued") for row in rows)


def test_get_jobs__every_namespace_has_a_namespace_column(store: MemoryApi) -> None:
    store.create_job("team-a", job_manifest("x"))
    store.create_job("team-b", job_manifest("y"))
    header, *rows = run(store, "jobs", namespace=None).out[0].splitlines()
    assert header.split()[:3] == ["NAME", "NAMESPACE", "PHASE"]
    assert [row.split()[:2] for row in rows] == [["x", "team-a"], ["y", "team-b"]]
    assert "NAMESPACE" not in run(store, "jobs", namespace="team-a").out[0]


def test_get__an_object_the_models_cannot_read_is_named_and_the_rest_listed(
    store: MemoryApi,
) -> None:
    store.create_batch(NS, batch_manifest("talks", ["a"]))
    store.create_job(NS, job_manifest("talks-a"))
    for resource, kind in ((BATCHES, "Batch"), (JOBS, "TranscriptionJob")):
        body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": "oops"}}
        store.verbs.create(resource, NS, body)  # stored before the CRD required a spec
    for kind, listed, named in [
        ("batches", "talks", "batch.recall.dev/oops"),
        ("jobs", "talks-a", "transcriptionjob.recall.dev/oops"),
    ]:
        echo = run(store, kind)
        assert [row.split()[0] for row in echo.out[0].splitlines()[1:]] == [listed]
        [warning] = echo.err
        assert warning.startswith(f"warning: {named} in namespace {NS} cannot be read (spec")
        assert "\n" not in warning
        shown = yaml.safe_load(run(store, kind, output="yaml").out[0])["items"]
        assert [o["metadata"]["name"] for o in shown] == sorted([listed, "oops"]), "as stored"


def test_get__output_name(store: MemoryApi) -> None:
    store.create_batch(NS, batch_manifest("talks", ["a"]))
    store.create_job(NS, job_manifest("talks-a"))
    assert run(store, "batches", output="name").out == ["batch.recall.dev/talks"]
    assert run(store, "jobs", output="name").out == ["transcriptionjob.recall.dev/talks-a"]


def test_get_batches__yaml_and_json_are_the_objects_as_stored(store: MemoryApi) -> None:
    manifest = batch_manifest("talks", ["a"])
    manifest["metadata"]["finalizers"] = ["recall.dev/keep"]
    store.create_batch(NS, manifest)
    stored = store.verbs.get(BATCHES, NS, "talks")
    assert stored is not None
    shown = yaml.safe_load(run(store, "batches", output="yaml").out[0])
    assert shown == {"apiVersion": "v1", "kind": "List", "items": [stored]}
    assert shown["items"][0]["metadata"]["finalizers"] == ["recall.dev/keep"]
    assert "itemsFrom" not in shown["items"][0]["spec"], "no defaults of the model added"


@pytest.mark.parametrize("output", ["bogus", "jsonpath={.items}", "custom-columns=N:.x"])
def test_get__an_output_format_without_a_printer_is_refused(store: MemoryApi, output: str) -> None:
    with pytest.raises(LookupError, match=f'output format "{output}", allowed formats are: '):
        run(store, "jobs", output=output)
    with pytest.raises(CliError, match="unable to match a printer"):
        get("jobs", output=output, kubeconfig=Path("/nonexistent"))  # refused before connecting
