"""The `recall` command line.

Errors are printed as one line (`error: ...`) without a traceback, with kubectl's exit code
(1); `--debug` shows the traceback.
"""

from __future__ import annotations

import importlib.util
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
_state: dict[str, Any] = {"debug": False}


class CliError(Exception):
    """A user-facing error: printed as one line, exit code `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


KubeconfigOpt = Annotated[
    Path | None,
    typer.Option("--kubeconfig", envvar="KUBECONFIG", help="Path to the kubeconfig file."),
]
NamespaceOpt = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Namespace (default: the context's).")
]


def _add_dev_commands() -> None:
    """`recall dev ...` comes from the development tools (`recall_dev`, installed from a
    checkout); without them the group says how to get them."""
    if importlib.util.find_spec("recall_dev") is not None:
        from recall_dev.cli import dev_app

        app.add_typer(dev_app, name="dev")
        return
    missing = typer.Typer(help="Development tools (not installed).", no_args_is_help=False)

    @missing.callback(invoke_without_command=True)
    def _missing() -> None:
        raise CliError("recall dev needs the development tools: run `make venv` in a checkout")

    app.add_typer(missing, name="dev")


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    log_level: Annotated[str, typer.Option("--log-level", envvar="RECALL_LOG_LEVEL")] = "info",
) -> None:
    _state["debug"] = debug
    log.configure(level=log_level)


# --- worker -------------------------------------------------------------------------------


@app.command()
def worker(
    id: Annotated[
        str | None, typer.Option("--id", help="Worker identity (default: pod name / hostname).")
    ] = None,
    namespace: NamespaceOpt = None,
    engine: Annotated[str | None, typer.Option(help="whisper, openai or simulated.")] = None,
    kubeconfig: KubeconfigOpt = None,
    metrics_port: Annotated[int | None, typer.Option(help="Serve /metrics on this port.")] = None,
    grace: Annotated[
        float | None, typer.Option(help="Seconds to finish the current job on SIGTERM.")
    ] = None,
    idle_exit: Annotated[
        float | None, typer.Option(help="Exit after this many idle seconds.")
    ] = None,
    max_jobs: Annotated[int | None, typer.Option(help="Exit after this many jobs.")] = None,
) -> None:
    """Rent transcription jobs one at a time under a lease and transcribe them."""
    from recall.engines import make_engine
    from recall.kube import Kube, current_namespace, load_api_client
    from recall.metrics import serve
    from recall.settings import WorkerSettings
    from recall.worker import Worker

    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "id": id,
            "namespace": namespace,
            "engine": engine,
            "metrics_port": metrics_port,
            "grace_seconds": grace,
            "idle_exit_seconds": idle_exit,
            "max_jobs": max_jobs,
        }.items()
        if v is not None
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
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Watch one namespace (default: all).")
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    peering: Annotated[
        str | None, typer.Option(help="kopf peering name for HA (default: standalone).")
    ] = None,
    priority: Annotated[
        int | None, typer.Option(help="Peering priority; the highest alive peer acts.")
    ] = None,
    metrics_port: Annotated[int | None, typer.Option(help="Serve /metrics on this port.")] = None,
    liveness_port: Annotated[
        int | None, typer.Option(help="Serve kopf's /healthz on this port.")
    ] = None,
) -> None:
    """Run the operator: fan-out, projection, reclaim of expired leases, reconciliation."""
    from recall.runner import run_operator
    from recall.settings import OperatorSettings

    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "namespace": namespace,
            "peering": peering,
            "priority": priority,
            "metrics_port": metrics_port,
            "liveness_port": liveness_port,
        }.items()
        if v is not None
    }
    run_operator(OperatorSettings(**overrides), kubeconfig)


# --- user commands -------------------------------------------------------------------------


def _kube(kubeconfig: Path | None) -> Any:
    from recall.kube import Kube, load_api_client

    try:
        return Kube(load_api_client(kubeconfig))
    except Exception as e:  # a missing or broken kubeconfig
        raise CliError(f"cannot load the kubeconfig: {e}") from e


def _namespace(namespace: str | None, kubeconfig: Path | None) -> str:
    from recall.kube import current_namespace

    return namespace or current_namespace(kubeconfig)


@app.command()
def submit(
    inputs: Annotated[
        list[str], typer.Argument(help="Media files, folders or URLs.", metavar="PATH|URL...")
    ],
    name: Annotated[
        str | None,
        typer.Option("--name", help="Batch name (default: the folder's, or recall-<time>)."),
    ] = None,
    language: Annotated[
        str | None, typer.Option(help="Spoken language (ISO 639-1), e.g. en.")
    ] = None,
    engine: Annotated[
        str | None, typer.Option(help="Require this engine: whisper, openai or simulated.")
    ] = None,
    lease: Annotated[int | None, typer.Option(help="Lease duration of each job, seconds.")] = None,
    max_attempts: Annotated[int | None, typer.Option(help="Claims each job may take.")] = None,
    priority: Annotated[int | None, typer.Option(help="Priority of the jobs.")] = None,
    max_items: Annotated[
        int, typer.Option(help="Items per Batch; more inputs make more Batches.")
    ] = 1000,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the Batch manifests, create nothing.")
    ] = False,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Create Batches from media files, folders or URLs."""
    import datetime as dt

    import yaml
    from kubernetes.client.exceptions import ApiException

    from recall.client import SubmitError, batches_for, collect, default_batch_name
    from recall.models import BATCH_PLURAL, GROUP, VERSION

    try:
        media = collect(inputs)
        manifests = batches_for(
            media,
            name=name or default_batch_name(inputs, dt.datetime.now(dt.UTC)),
            language=language,
            engine=engine,
            lease_seconds=lease,
            max_attempts=max_attempts,
            priority=priority,
            max_items=max_items,
        )
    except SubmitError as e:
        raise CliError(str(e)) from e
    if dry_run:
        typer.echo(yaml.safe_dump_all(manifests, sort_keys=False), nl=False)
        return
    kube = _kube(kubeconfig)
    ns = _namespace(namespace, kubeconfig)
    for m in manifests:
        try:
            kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, BATCH_PLURAL, m)
        except ApiException as e:
            from recall.kube import api_message

            raise CliError(api_message(e)) from e
        typer.echo(
            f"batch.{GROUP}/{m['metadata']['name']} created ({len(m['spec']['items'])} items)"
        )


@app.command()
def get(
    kind: Annotated[str, typer.Argument(help="batches (rb) or jobs (tj).")] = "batches",
    names: Annotated[list[str] | None, typer.Argument(help="Only these names.")] = None,
    namespace: NamespaceOpt = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A")] = False,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="wide, yaml or json.")
    ] = None,
    batch: Annotated[str | None, typer.Option("--batch", help="Jobs of this Batch only.")] = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """List Batches or TranscriptionJobs as a kubectl-style table."""
    import datetime as dt

    import yaml

    from recall.client import batch_rows, job_rows, table
    from recall.models import (
        BATCH_PLURAL,
        GROUP,
        JOB_PLURAL,
        LABEL_BATCH,
        VERSION,
        Batch,
        TranscriptionJob,
    )
    from recall.transcripts import label_value

    plural = {
        "batches": BATCH_PLURAL,
        "batch": BATCH_PLURAL,
        "rb": BATCH_PLURAL,
        "jobs": JOB_PLURAL,
        "job": JOB_PLURAL,
        "tj": JOB_PLURAL,
        "transcriptionjobs": JOB_PLURAL,
        "transcriptionjob": JOB_PLURAL,
    }.get(kind)
    if plural is None:
        raise CliError(f'the server doesn\'t have a resource type "{kind}" (use batches or jobs)')
    kube = _kube(kubeconfig)
    selector = f"{LABEL_BATCH}={label_value(batch)}" if batch and plural == JOB_PLURAL else None
    kwargs: dict[str, Any] = {"label_selector": selector} if selector else {}
    if all_namespaces:
        items = kube.custom.list_cluster_custom_object(GROUP, VERSION, plural, **kwargs)["items"]
    else:
        ns = _namespace(namespace, kubeconfig)
        items = kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural, **kwargs)[
            "items"
        ]
    if names:
        wanted = set(names)
        items = [i for i in items if i["metadata"]["name"] in wanted]
        missing = wanted - {i["metadata"]["name"] for i in items}
        if missing:
            raise CliError(f'{plural}.{GROUP} "{sorted(missing)[0]}" not found')
    if output in ("yaml", "json"):
        import json

        doc = (
            items[0]
            if names and len(items) == 1
            else {"apiVersion": "v1", "kind": "List", "items": items}
        )
        typer.echo(
            yaml.safe_dump(doc, sort_keys=False) if output == "yaml" else json.dumps(doc, indent=2)
        )
        return
    if not items:
        typer.echo("No resources found.", err=True)
        return
    now = dt.datetime.now(dt.UTC)
    wide = output == "wide" or all_namespaces
    if plural == BATCH_PLURAL:
        headers, rows = batch_rows([Batch.from_api(i) for i in items], now, wide)
    else:
        headers, rows = job_rows([TranscriptionJob.from_api(i) for i in items], now, wide)
    typer.echo(table(headers, rows))


@app.command()
def watch(
    batch: Annotated[str, typer.Argument(help="The Batch to follow.")],
    namespace: NamespaceOpt = None,
    timeout: Annotated[float | None, typer.Option(help="Give up after this many seconds.")] = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Live progress of a Batch until it completes (exit 1 if any item failed)."""
    from recall.watch import BatchNotFound
    from recall.watch import watch as follow

    try:
        code = follow(_kube(kubeconfig), _namespace(namespace, kubeconfig), batch, timeout=timeout)
    except (BatchNotFound, TimeoutError) as e:
        raise CliError(str(e)) from e
    raise typer.Exit(code)


@app.command()
def transcript(
    job: Annotated[str, typer.Argument(help="The TranscriptionJob (or Batch item as BATCH/ITEM).")],
    format: Annotated[str, typer.Option("--format", "-f", help="txt, srt, vtt or json.")] = "txt",
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Print the accepted transcript of a job."""
    from recall.fanout import job_name
    from recall.formats import render
    from recall.models import GROUP, JOB_PLURAL
    from recall.transcripts import TranscriptStore

    if format not in ("txt", "srt", "vtt", "json"):
        raise CliError(f"unknown format {format!r}: use txt, srt, vtt or json")
    kube = _kube(kubeconfig)
    ns = _namespace(namespace, kubeconfig)
    name = job_name(*job.split("/", 1)) if "/" in job else job
    tj = kube.get_job(ns, name)
    if tj is None:
        raise CliError(f'{JOB_PLURAL}.{GROUP} "{name}" not found')
    if tj.status.result is None:
        raise CliError(f"{name} has no transcript yet (phase {tj.status.effective_phase})")
    text = TranscriptStore(kube).load_transcript(ns, tj.status.result.config_map)
    if text is None:
        raise CliError(f"the transcript ConfigMap {tj.status.result.config_map} is missing")
    typer.echo(render(text, format), nl=False)  # type: ignore[arg-type]


_add_dev_commands()


def main() -> None:
    """Console entry point: one-line errors, kubectl's exit codes."""
    try:
        # Without standalone mode, click returns the exit code of typer.Exit instead of exiting.
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except CliError as e:
        _fail(str(e), e.code, e)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        _fail("aborted", 130, None)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:
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
