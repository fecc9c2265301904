"""`helm upgrade` from the previous release to this one while a Batch runs, then `helm rollback`,
on kind (`make e2e-kind`, the last module: it takes the CRDs over).

The previous release is built from its commit (CHANGELOG.md names it) by recall_dev.release:
its chart packaged and its image `recall:<its version>` built from that commit's tree, in a
temporary directory, never in the checkout. This release is the checkout's chart and image.
Release `recall` in namespace `recall` (the name the pod tests' release had: the CRDs it kept
are this release's to adopt), the simulated engine, two operators, three workers, the store on
its claim on the control-plane node.

1. The previous release installs (its store first, then its operator and workers: that
   release's operator could hang on a store that started with it, the bug this one fixes).
2. A Batch runs; `helm upgrade` to this chart: the operators, the workers and the store roll
   (the store's pod is replaced on its volume), the CRDs are upgraded by the chart's templates.
   Every job finishes, none lost or duplicated; the CRDs are this release's: their version
   label, and the schema the API server serves has exactly this release's fields, among them
   those the previous release lacks (`spec.checkpointSeconds` and others).
3. Another Batch runs; `helm rollback` to the previous release: everything rolls back, the CRDs
   too, because the chart ships them as templates (Helm's crds/ directory would be installed
   once and never changed): the API server serves exactly the previous release's schema again,
   without this release's fields, as docs/releases.md says (within v1alpha1 only additive
   changes, so the older schema still reads every object); every job of both Batches is
   Succeeded once.

The figures (tests/e2e/pods/drills.py): a 20 s lease; "back after" from the helm command's
return until every job in flight when it began made progress.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from recall.kube.client import KubeClient as Kube
from recall_dev.crds import load_crds, schema_fields
from recall_dev.release import Release
from tests.e2e.pods.conftest import (
    CHART,
    NAMESPACE,
    PodCluster,
    ensure_crds,
    release_values,
    simulated_release,
    uninstall,
)
from tests.e2e.pods.drills import Ledger, batch_manifest, figures
from tests.e2e.pods.fleet import sampling
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

RELEASE = "recall"
VALUES = simulated_release(operators=2, workers=3, grace_seconds=20)
JOBS = 6
LEASE = 20
CRD_NAMES = ("transcriptionjobs.recall.dev", "batches.recall.dev")
# A field this release's CRDs have and the previous release's lack (checked below, with all
# the others the schemas differ by).
NEW_FIELD = ("transcriptionjobs.recall.dev", "v1alpha1.spec.checkpointSeconds")


def previous_commit() -> tuple[str, str]:
    """(version, commit) of the release before this one, from CHANGELOG.md."""
    from recall_dev.release import changelog_entries

    entries = changelog_entries()
    assert len(entries) >= 2, f"CHANGELOG.md names no previous release: {entries}"
    version, commit = entries[1]
    assert commit, f"CHANGELOG.md's entry {version} names no commit"
    return version, commit


@dataclass
class Upgrade:
    cluster: PodCluster
    kube: Kube
    previous: Release
    values: Path
    ledger: Ledger

    def helm(self, *args: str) -> None:
        self.cluster.run("helm", *args, "--namespace", NAMESPACE, "--wait", "--timeout", "6m")

    def apply(self, name: str) -> None:
        # Valid for both releases' CRDs: checkpointSeconds is newer than the previous one.
        batch = batch_manifest(
            name, NAMESPACE, JOBS, chunks=10, seconds=2.0, lease=LEASE, checkpoint=None
        )
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(batch))

    def in_flight(self, name: str, at_least: int = 2) -> None:
        wait_for(
            lambda: sum(
                1 for s in self.ledger.last(name).values() if s.phase == "Leased" and s.chunks
            ) >= at_least,
            timeout=180, interval=0.2, message=f"{name} in flight",
        )  # fmt: skip

    def done(self, name: str) -> None:
        def complete() -> bool:
            b = self.kube.get_batch(NAMESPACE, name)
            return b is not None and b.status.complete

        wait_for(complete, timeout=600, interval=1, message=f"Batch {name} complete")

    def crd_versions(self) -> dict[str, str]:
        found = {}
        for name in CRD_NAMES:
            crd = json.loads(self.cluster.kubectl("get", "crd", name, "-o", "json"))
            found[name] = (crd["metadata"].get("labels") or {}).get("app.kubernetes.io/version", "")
        return found

    def served_fields(self) -> dict[str, set[str]]:
        """Per CRD: the fields of the schema the API server serves now."""
        return {
            name: schema_fields(json.loads(self.cluster.kubectl("get", "crd", name, "-o", "json")))
            for name in CRD_NAMES
        }

    def previous_fields(self) -> dict[str, set[str]]:
        """Per CRD: the fields of the previous release's schema (its recall-crds file)."""
        docs = yaml.safe_load_all(self.previous.crds.read_text())
        found = {d["metadata"]["name"]: schema_fields(d) for d in docs if d}
        return {name: found[name] for name in CRD_NAMES}


def current_fields() -> dict[str, set[str]]:
    """Per CRD: the fields of this release's schema (crds/, which the chart's copy is)."""
    found = {d["metadata"]["name"]: schema_fields(d) for d in load_crds()}
    return {name: found[name] for name in CRD_NAMES}


@pytest.fixture(scope="module")
def upgrade(
    cluster: PodCluster, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Upgrade]:
    from recall_dev import release

    tmp = tmp_path_factory.mktemp("upgrade")
    version, commit = previous_commit()
    previous = release.build(commit, tmp / "releases", checked=False)
    assert previous.version == version, f"{commit} is {previous.version}, not {version}"
    cluster.kind.load(previous.image)
    # The CRDs the pod tests' release kept (or new ones): this release adopts them.
    ensure_crds(cluster)
    for crd in CRD_NAMES:
        cluster.kubectl(
            "annotate", "--overwrite", "crd", crd, f"meta.helm.sh/release-name={RELEASE}",
            f"meta.helm.sh/release-namespace={NAMESPACE}",
        )  # fmt: skip
        cluster.kubectl("label", "--overwrite", "crd", crd, "app.kubernetes.io/managed-by=Helm")
    values = tmp / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    ledger = Ledger(kube, NAMESPACE)
    try:
        with sampling(ledger, "upgrade-ledger"):
            yield Upgrade(cluster, kube, previous, values, ledger)
    finally:
        uninstall(cluster, RELEASE, NAMESPACE)  # with the diagnostics of a failure


def test_upgrade_1__the_previous_release_installs(upgrade: Upgrade) -> None:
    args = [*release_values(upgrade.cluster), "--values", str(upgrade.values)]
    # Its store first: the previous operator probed the store once, at its start.
    upgrade.helm(
        "install", RELEASE, str(upgrade.previous.chart), "--create-namespace", *args,
        "--set", "operator.replicas=0", "--set", "worker.replicas=0",
    )  # fmt: skip
    upgrade.helm("upgrade", RELEASE, str(upgrade.previous.chart), *args)
    images = {
        c["image"]
        for component in ("operator", "worker")
        for p in upgrade.cluster.pods(component)
        for c in p["spec"]["containers"]
    }
    assert images == {f"recall:{upgrade.previous.version}"}
    assert upgrade.served_fields() == upgrade.previous_fields(), "not the previous CRDs"


def test_upgrade_2__helm_upgrade_while_a_batch_runs_loses_and_doubles_nothing(
    upgrade: Upgrade,
) -> None:
    import time

    upgrade.apply("before-upgrade")
    upgrade.in_flight("before-upgrade")
    fault = time.monotonic()
    upgrade.helm(
        "upgrade", RELEASE, str(CHART), *release_values(upgrade.cluster),
        "--values", str(upgrade.values), "--set", "crds.install=true",
    )  # fmt: skip
    ended = time.monotonic()
    upgrade.done("before-upgrade")
    found = figures(
        upgrade.ledger, "before-upgrade", "helm upgrade", fault, JOBS, lease=LEASE, ended_at=ended
    )
    found.write()
    assert (found.lost, found.duplicates) == (0, 0), found
    from recall_dev.release import version

    assert upgrade.crd_versions() == dict.fromkeys(CRD_NAMES, version())
    current, previous = current_fields(), upgrade.previous_fields()
    crd, field = NEW_FIELD
    assert field in current[crd] and field not in previous[crd], f"{field} is not new"
    assert upgrade.served_fields() == current, "the upgrade did not bring this release's schema"
    images = {
        c["image"]
        for component in ("operator", "worker")
        for p in upgrade.cluster.pods(component)
        if not p["metadata"].get("deletionTimestamp")
        for c in p["spec"]["containers"]
    }
    assert images == {f"recall:{version()}"}


def test_upgrade_3__helm_rollback_while_a_batch_runs_loses_and_doubles_nothing(
    upgrade: Upgrade,
) -> None:
    import time

    upgrade.apply("before-rollback")
    upgrade.in_flight("before-rollback")
    fault = time.monotonic()
    history = json.loads(upgrade.cluster.helm("history", RELEASE, "-o", "json"))
    previous = max(
        int(r["revision"]) for r in history if r["chart"] == f"recall-{upgrade.previous.version}"
    )
    upgrade.helm("rollback", RELEASE, str(previous))
    ended = time.monotonic()
    upgrade.done("before-rollback")
    found = figures(
        upgrade.ledger, "before-rollback", "helm rollback", fault, JOBS, lease=LEASE,
        ended_at=ended,
    )  # fmt: skip
    found.write()
    assert (found.lost, found.duplicates) == (0, 0), found
    # The chart's CRDs are templates: the rollback applies the previous release's, as
    # docs/releases.md says. They carry no version label, and their schema is served again,
    # without this release's fields.
    assert upgrade.crd_versions() == dict.fromkeys(CRD_NAMES, "")
    served = upgrade.served_fields()
    assert served == upgrade.previous_fields(), "the rollback did not bring the previous schema"
    crd, field = NEW_FIELD
    assert field not in served[crd]
    for batch in ("before-upgrade", "before-rollback"):
        jobs = [s for s in upgrade.ledger.last(batch).values()]
        assert len(jobs) == JOBS and all(s.phase == "Succeeded" for s in jobs), batch
