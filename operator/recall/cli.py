"""The `recall` command line.

Errors are printed as one line (`error: ...`) without a traceback, with kubectl's exit code
(1); `--debug` shows the traceback.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from recall import log

app = typer.Typer(
    name="recall",
    help="Kubernetes-native control plane for long transcription jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
dev_app = typer.Typer(help="A local control plane (etcd + kube-apiserver) for development.",
                      no_args_is_help=True)
app.add_typer(dev_app, name="dev")

DEFAULT_DEV_DIR = Path(".recall-dev")
_state: dict[str, Any] = {"debug": False}


class CliError(Exception):
    """A user-facing error: printed as one line, exit code `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


KubeconfigOpt = Annotated[
    Path | None, typer.Option("--kubeconfig", envvar="KUBECONFIG", help="Path to the kubeconfig file.")
]
NamespaceOpt = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Namespace (default: the context's).")
]


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    log_level: Annotated[str, typer.Option("--log-level", envvar="RECALL_LOG_LEVEL")] = "info",
) -> None:
    _state["debug"] = debug
    log.configure(level=log_level)


# --- dev ----------------------------------------------------------------------------------


@dev_app.command("up")
def dev_up(
    dir: Annotated[Path, typer.Option("--dir", help="Where state, logs and the kubeconfig go.")] = DEFAULT_DEV_DIR,
    crds: Annotated[bool, typer.Option("--crds/--no-crds", help="Install the recall CRDs.")] = True,
) -> None:
    """Start etcd and kube-apiserver on loopback ports; print the KUBECONFIG export line."""
    from recall import devcluster

    cp = devcluster.dev_up(dir.resolve(), progress=lambda m: typer.echo(f"  {m}", err=True))
    if crds:
        from recall.install import install_crds

        install_crds(str(cp.kubeconfig))
        typer.echo("  CRDs installed", err=True)
    typer.echo(f"export KUBECONFIG={cp.kubeconfig}")
    typer.echo(f"export PATH={cp.bin_dir}:$PATH")


@dev_app.command("down")
def dev_down(
    dir: Annotated[Path, typer.Option("--dir")] = DEFAULT_DEV_DIR,
) -> None:
    """Stop the local control plane and remove its directory."""
    from recall import devcluster

    if devcluster.dev_down(dir.resolve()):
        typer.echo("control plane stopped", err=True)
    else:
        typer.echo("no control plane was running", err=True)


@dev_app.command("status")
def dev_status(
    dir: Annotated[Path, typer.Option("--dir")] = DEFAULT_DEV_DIR,
) -> None:
    """Show whether the local control plane is up, and where."""
    from recall import devcluster

    try:
        status = devcluster.dev_status(dir.resolve())
    except devcluster.ControlPlaneError as e:
        raise CliError(str(e)) from e
    typer.echo(json.dumps(status, indent=2))
    if not status["ready"]:
        raise typer.Exit(1)


# --- worker -------------------------------------------------------------------------------


@app.command()
def worker(
    id: Annotated[str | None, typer.Option("--id", help="Worker identity (default: pod name / hostname).")] = None,
    namespace: NamespaceOpt = None,
    engine: Annotated[str | None, typer.Option(help="whisper, openai or simulated.")] = None,
    kubeconfig: KubeconfigOpt = None,
    metrics_port: Annotated[int | None, typer.Option(help="Serve /metrics on this port.")] = None,
    grace: Annotated[float | None, typer.Option(help="Seconds to finish the current job on SIGTERM.")] = None,
    idle_exit: Annotated[float | None, typer.Option(help="Exit after this many idle seconds.")] = None,
    max_jobs: Annotated[int | None, typer.Option(help="Exit after this many jobs.")] = None,
) -> None:
    """Rent transcription jobs one at a time under a lease and transcribe them."""
    from recall.engines import make_engine
    from recall.kube import Kube, current_namespace, load_api_client
    from recall.metrics import serve
    from recall.settings import WorkerSettings
    from recall.worker import Worker

    overrides = {
        k: v for k, v in {
            "id": id, "namespace": namespace, "engine": engine, "metrics_port": metrics_port,
            "grace_seconds": grace, "idle_exit_seconds": idle_exit, "max_jobs": max_jobs,
        }.items() if v is not None
    }
    settings = WorkerSettings(**overrides)
    kube = Kube(load_api_client(kubeconfig))
    ns = settings.namespace or current_namespace(kubeconfig)
    eng = make_engine(settings)
    serve(settings.metrics_port)
    w = Worker(kube, settings, eng, namespace=ns)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if w.stopping.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        w.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    raise typer.Exit(w.run())


@app.command("operator")
def operator_cmd(
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Watch one namespace (default: all).")] = None,
    kubeconfig: KubeconfigOpt = None,
    peering: Annotated[str | None, typer.Option(help="kopf peering name for HA (default: standalone).")] = None,
    priority: Annotated[int | None, typer.Option(help="Peering priority; the highest alive peer acts.")] = None,
    metrics_port: Annotated[int | None, typer.Option(help="Serve /metrics on this port.")] = None,
    liveness_port: Annotated[int | None, typer.Option(help="Serve kopf's /healthz on this port.")] = None,
) -> None:
    """Run the operator: fan-out, projection, reclaim of expired leases, reconciliation."""
    from recall.runner import run_operator
    from recall.settings import OperatorSettings

    overrides = {
        k: v for k, v in {
            "namespace": namespace, "peering": peering, "priority": priority,
            "metrics_port": metrics_port, "liveness_port": liveness_port,
        }.items() if v is not None
    }
    run_operator(OperatorSettings(**overrides), kubeconfig)


def main() -> None:
    """Console entry point: one-line errors, kubectl's exit codes."""
    try:
        app(standalone_mode=False)
    except CliError as e:
        _fail(str(e), e.code, e)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        _fail("aborted", 130, None)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - the last line of defence for a clean message
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(e.exit_code)
        _fail(_describe(e), 1, e)


def _describe(e: Exception) -> str:
    from kubernetes.client.exceptions import ApiException

    if isinstance(e, ApiException):
        from recall.kube import api_message

        return f"{api_message(e)} ({e.status})"
    return f"{type(e).__name__}: {e}" if not str(e) else str(e)


def _fail(message: str, code: int, exc: BaseException | None) -> None:
    if _state["debug"] and exc is not None:
        import traceback

        traceback.print_exception(exc)
    typer.echo(f"error: {message}", err=True)
    sys.exit(code)
