"""The short kind test of `make test`: a kind cluster of its own, the pod tests' release on it.

The cluster (`recall-smoke`: a control plane and one worker node, both taking pods) comes from
tests/e2e/pods/conftest.py, so it is made exactly as `make e2e-kind` makes its own: the node
image built here, the chart's default images built and loaded, the media directory mounted,
everything removed at the end. The release, its values and its diagnostics are the pod tests'
fixtures, imported here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.pods.conftest import PodCluster, _failures, kind_cluster

# The pod tests' fixtures, re-exported (`x as x`) so pytest finds them here.
from tests.e2e.pods.conftest import api as api
from tests.e2e.pods.conftest import kube as kube
from tests.e2e.pods.conftest import release as release

CLUSTER = "recall-smoke"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """A failed kind test makes the release print its diagnostics, as a failed pod test does."""
    report = yield
    if getattr(report, "failed", False) and "e2e/kind" in item.nodeid:
        _failures.append(item.nodeid)
    return report


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodCluster]:
    yield from kind_cluster(tmp_path_factory.mktemp("kind", numbered=True), CLUSTER, workers=1)
