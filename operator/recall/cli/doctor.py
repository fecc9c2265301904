"""`recall doctor`: checks an install the way the chart sets it up, and says how to fix it.

One line per check (`ok`, `FAIL` with the fix, or `skip` with why); exit code 1 when any
failed. The checks, in order (`recall.cli.checks`, `crd_check`, `store_check`):

- `crds`: both CRDs exist, are Established, serve this CLI's API version, carry its release
  (else: which is newer, and what to upgrade) and have exactly the fields of its models;
- `operator`: a ready operator pod leads: the one replica without leader election, else the
  holder of the leader Lease, seen renewing;
- `store`: the results store answers the operator's identity; with the workers' credentials,
  that identity writes and reads under `scratch/` and is refused elsewhere;
- `workers`: registrations are seen renewing, for the chart's engine, and none says its engine
  and model failed to load (`recall.dev/engine-state`; one still loading passes with a note);
- `engines`: no job failed on its engine or model in the last hour;
- `apf`: the chart's FlowSchemas and PriorityLevelConfigurations exist and belong together;
- `access`: the current user may submit, cancel and read Batches and jobs in the namespace,
  and read transcripts through the operator's pod.

A check whose reads the API server refuses or does not answer fails with that reason; the
others still run. `helm test` runs the doctor as the chart's test ServiceAccount, bound to
`edit` in the namespace (the chart's roles aggregate to it). Not guaranteed: a pass says the
install worked when the doctor ran, not that it keeps working.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from recall.base.clock import SYSTEM
from recall.cli.checks import (
    FAIL,
    SKIP,
    Check,
    Install,
    check_access,
    check_apf,
    check_engines,
    check_operator,
    check_workers,
    env_of,
    fail,
    fullname,
)
from recall.cli.common import KubeconfigOpt
from recall.cli.crd_check import check_crds
from recall.cli.store_check import check_store

if TYPE_CHECKING:
    from recall.kube.install import InstallReader

API_DOWN = "check the kubeconfig and that the API server answers (kubectl get --raw /readyz)"
NOT_ALLOWED = "run it as a user who may read the release (helm test uses the chart's test account)"


def run_checks(
    reader: InstallReader,
    install: Install,
    *,
    store_url: str,
    operator_credentials: Path | None,
    worker_credentials: Path | None,
    apf: bool,
    wait: float,
) -> Iterator[Check]:
    """Every check in order (see the module doc)."""
    from recall.kube import ApiError, Forbidden

    def guarded(name: str, run: Callable[[], Check]) -> Check:
        try:
            return run()
        except Forbidden as e:
            return fail(name, f"not allowed to read what it needs: {e.message}", NOT_ALLOWED)
        except ApiError as e:
            return fail(name, f"the API server did not answer: {e.message}", API_DOWN)

    yield guarded("crds", lambda: check_crds(reader))
    yield guarded("operator", lambda: check_operator(reader, install, wait))
    if not store_url:  # the operator's, as the chart set it (else the store check says so)
        with contextlib.suppress(ApiError):
            operator = reader.deployment(install.namespace, install.operator)
            store_url = env_of(operator).get("RECALL_STORE_URL", "")
    yield check_store(store_url, operator_credentials, worker_credentials)
    yield guarded("workers", lambda: check_workers(reader, install, wait))
    now = SYSTEM.now()
    yield guarded("engines", lambda: check_engines(reader, install, now))
    if apf:
        yield guarded("apf", lambda: check_apf(reader, install))
    else:
        yield Check("apf", SKIP, "not checked (--no-apf: the release installs no FlowSchemas)")
    yield guarded("access", lambda: check_access(reader, install))


def doctor(
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="The release's namespace (default: the context's)."),
    ] = None,
    release: Annotated[str, typer.Option(help="The Helm release's name.")] = "recall",
    fullname_override: Annotated[
        str | None, typer.Option("--fullname", help="The chart's fullnameOverride, if set.")
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            envvar="RECALL_STORE_URL", help="The results store (default: the operator's)."
        ),
    ] = None,
    operator_credentials: Annotated[
        Path | None,
        typer.Option(
            envvar="RECALL_STORE_CREDENTIALS_DIR",
            help="The operator's store credential files (default: the environment's).",
        ),
    ] = None,
    worker_credentials: Annotated[
        Path | None,
        typer.Option(help="The workers' store credential files: checks they reach scratch/ only."),
    ] = None,
    apf: Annotated[
        bool, typer.Option("--apf/--no-apf", help="Check the API Priority and Fairness objects.")
    ] = True,
    wait: Annotated[float, typer.Option(help="Longest wait for a Lease to renew, seconds.")] = 20.0,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Check an install: CRDs, operator, results store, workers, engines, API fairness, access.
    One line per check, with the fix of each that fails; exit 1 when one fails."""
    from recall.kube.client import current_namespace, load_api_client
    from recall.kube.install import InstallReader

    api = load_api_client(kubeconfig)
    install = Install(
        namespace or current_namespace(kubeconfig), fullname(release, fullname_override)
    )
    checks = run_checks(
        InstallReader(api),
        install,
        store_url=store or "",
        operator_credentials=operator_credentials,
        worker_credentials=worker_credentials,
        apf=apf,
        wait=wait,
    )
    failed = False
    for check in checks:
        typer.echo(check.line())
        failed = failed or check.status == FAIL
    raise typer.Exit(1 if failed else 0)
