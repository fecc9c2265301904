"""The pure parts of `recall doctor`'s checks: what a CRD says against this CLI, and the fixes."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from recall import __version__
from recall.bucket import StoreAccessDenied, StoreBucketMissing
from recall.cli.checks import ENGINE_REASONS, Check, Install, check_workers, fullname
from recall.cli.crd_check import RELEASE_LABEL, crd_problem, release_key, release_problem
from recall.cli.store_check import _store_fix
from recall.protocol.workers import FAILED, LOADED, LOADING, EngineState, registration
from recall.resources import VERSION, RawObject, TranscriptionJob

ROOT = Path(__file__).resolve().parents[3]


def installed_crd(**labels: str) -> dict[str, Any]:
    """The TranscriptionJob CRD as the API server shows it once Established."""
    crd: dict[str, Any] = yaml.safe_load(
        (ROOT / "crds/transcriptionjobs.recall.dev.yaml").read_text()
    )
    crd["metadata"]["labels"].update(labels)
    crd["status"] = {"conditions": [{"type": "Established", "status": "True"}]}
    return crd


def test_release_key__orders_releases_by_their_numbers() -> None:
    assert release_key("0.2.0") < release_key("0.10.0") < release_key("v1.0.0-rc.1")
    assert release_key("0.2.0+build.7") == (0, 2, 0)


def test_crd_problem__none_for_the_crds_of_this_release() -> None:
    crd = installed_crd()
    assert crd["metadata"]["labels"][RELEASE_LABEL] == __version__  # the release keeps them so
    assert crd_problem(crd, TranscriptionJob, VERSION, __version__) is None


def test_crd_problem__crds_of_an_older_release__upgrade_the_chart() -> None:
    problem = crd_problem(installed_crd(), TranscriptionJob, VERSION, "9.0.0")
    assert problem == (
        f"is of release {__version__}, this CLI of 9.0.0: the CRDs are older",
        "upgrade the chart and its CRDs to 9.0.0 (helm upgrade; kubectl apply -f crds/ where "
        "crds.install=false)",
    )


def test_crd_problem__crds_of_a_newer_release__upgrade_the_cli() -> None:
    crd = installed_crd(**{RELEASE_LABEL: "9.1.0"})
    detail, fix = crd_problem(crd, TranscriptionJob, VERSION, __version__) or ("", "")
    assert detail == f"is of release 9.1.0, this CLI of {__version__}: the CLI is older"
    assert fix.startswith("upgrade the recall CLI to 9.1.0")


def test_crd_problem__the_release_is_judged_before_the_fields() -> None:
    crd = installed_crd(**{RELEASE_LABEL: "9.1.0"})
    del crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "language"
    ]
    detail, _ = crd_problem(crd, TranscriptionJob, VERSION, __version__) or ("", "")
    assert "the CLI is older" in detail


def test_crd_problem__without_a_release_label_the_fields_decide() -> None:
    crd = installed_crd()
    del crd["metadata"]["labels"][RELEASE_LABEL]
    assert crd_problem(crd, TranscriptionJob, VERSION, "9.0.0") is None
    older = copy.deepcopy(crd)
    del older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["language"]
    detail, _ = crd_problem(older, TranscriptionJob, VERSION, "9.0.0") or ("", "")
    assert detail.startswith("lacks .spec.language")


def test_crd_problem__not_established_comes_first() -> None:
    crd = installed_crd(**{RELEASE_LABEL: "9.1.0"})
    crd["status"]["conditions"] = [
        {"type": "Established", "status": "False", "message": "not all names are accepted"}
    ]
    problem = crd_problem(crd, TranscriptionJob, VERSION, __version__)
    assert problem == (
        "is not Established (not all names are accepted)",
        "kubectl describe crd transcriptionjobs.recall.dev",
    )


def test_release_problem__same_numbers_other_text() -> None:
    assert release_problem("0.2.0", "0.2.0") is None
    assert release_problem("0.2.0-rc.1", "0.2.0") == (
        "is of release 0.2.0-rc.1, this CLI of 0.2.0",
        "use the CLI and the chart of one release",
    )


@pytest.mark.parametrize(
    ("whose", "said"),
    [("operator's", "the operator's identity"), ("workers'", "the workers' identity")],
)
def test_store_fix__names_whose_identity_needs_its_policy(whose: str, said: str) -> None:
    fix = _store_fix(StoreAccessDenied("no"), whose)
    assert fix.startswith(f"give {said} its bucket policy")
    assert _store_fix(StoreBucketMissing("no"), whose).startswith("create the bucket")


class Fleet:
    """What `check_workers` reads: no Deployment, and registrations renewed at every read."""

    def __init__(self, *states: EngineState | None) -> None:
        self.states = states
        self.reads = 0

    def deployment(self, namespace: str, name: str) -> None:
        return None

    def leases(self, namespace: str, selector: str) -> list[RawObject]:
        self.reads += 1
        now = dt.datetime(2025, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=self.reads)
        return [
            registration("ns", f"w{i}", "whisper", duration=15, now=now, engine_state=state)
            for i, state in enumerate(self.states, 1)
        ]


def workers_line(*states: EngineState | None) -> Check:
    return check_workers(Fleet(*states), Install("ns", "recall"), wait=5)  # type: ignore[arg-type]


DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_check_workers__loaded_models_shown_with_short_digests() -> None:
    check = workers_line(EngineState(LOADED, f"tiny.en@{DIGEST}"), EngineState(LOADING))
    assert check.status == "ok"
    assert check.detail == (
        "2 live of 2 registered (2 whisper), loaded tiny.en@sha256:0123456789ab; "
        "1 not loaded yet (still loading, or of an older release)"
    )
    assert workers_line(None).status == "ok"  # a worker of an older release says nothing


def test_check_workers__a_worker_whose_model_failed_fails_with_its_reason_and_fix() -> None:
    error = "ModelNotFound: model directory /models/large does not exist"
    check = workers_line(EngineState(LOADED, f"tiny.en@{DIGEST}"), EngineState(FAILED, error=error))
    assert check.status == "FAIL"
    assert check.detail == (
        "1 of 2 live workers could not load their engine and model; w2 (whisper): " + error
    )
    assert check.fix == ENGINE_REASONS["ModelNotFound"]
    other = workers_line(EngineState(FAILED, error="EngineError: RuntimeError: boom"))
    assert other.fix == "kubectl -n ns logs w1"


def test_check_workers__a_worker_that_cannot_write_its_model_cache_fails_with_the_fix() -> None:
    """The registration a worker writes while its model cache is unwritable (its engine state
    `failed`, the model it loaded kept) fails the workers line with the chart's fix."""
    error = (
        "ModelCacheUnwritable: the model cache /var/cache/recall/models cannot be written by "
        "this worker (uid 10001, gid 10001): Permission denied"
    )
    check = workers_line(EngineState(FAILED, f"tiny.en@{DIGEST}", error))
    assert check.status == "FAIL" and error in check.detail
    assert check.fix == ENGINE_REASONS["ModelCacheUnwritable"]
    assert "hostPathInit" in check.fix


@pytest.mark.parametrize(
    ("release", "override", "expected"),
    [
        ("rc", None, "rc-recall"),
        ("my-recall", None, "my-recall"),
        ("rc", "o" * 52, "o" * 52),  # the schema's longest override
        ("r" * 53, None, "r" * 52),  # helm's longest release name
        ("r" * 45, None, "r" * 45 + "-recall"),  # 52: fits, unchanged
        ("rc", "o" * 50 + "--x", "o" * 50 + "-"),  # trimSuffix "-" cuts one "-"
    ],
)
def test_fullname__cut_as_the_chart_cuts_it(
    release: str, override: str | None, expected: str
) -> None:
    """The chart's `recall.fullname` (`trunc 52 | trimSuffix "-"`)."""
    assert fullname(release, override) == expected
