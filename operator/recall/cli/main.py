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

from recall.base import log
from recall.base.clock import SYSTEM
from recall.cli.doctor import doctor

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
    health_port: Annotated[int | None, typer.Option(help="Serve /healthz on this port.")] = None,
    grace: Annotated[
        float | None, typer.Option(help="Seconds to finish the current jobs on SIGTERM.")
    ] = None,
    idle_exit: Annotated[
        float | None, typer.Option(help="Exit after this many idle seconds.")
    ] = None,
    max_jobs: Annotated[
        int | None, typer.Option(help="Exit after this many jobs (all slots together).")
    ] = None,
    device: Annotated[
        str | None, typer.Option(help="Where local Whisper runs: auto, cpu or cuda.")
    ] = None,
) -> None:
    """Rent transcription jobs under leases and transcribe them: one job at a time in each of
    the worker's slots (RECALL_WORKER_SLOTS), each lease with its own token and heartbeat."""
    from recall.base import metrics
    from recall.base.metrics import serve
    from recall.base.settings import ApiSettings, StoreSettings, WorkerSettings
    from recall.bucket import Stores, StoreUrlInvalid
    from recall.engines import make_engine
    from recall.engines.device import DeviceUnavailable
    from recall.engines.models import ModelStoreMissing
    from recall.kube.client import current_namespace
    from recall.worker.health import Liveness
    from recall.worker.loop import Worker
    from recall.worker.models import model_store
    from recall.worker.sources import object_reader

    settings = WorkerSettings(
        **_given(
            id=id,
            namespace=namespace,
            engine=engine,
            metrics_port=metrics_port,
            health_port=health_port,
            grace_seconds=grace,
            idle_exit_seconds=idle_exit,
            max_jobs=max_jobs,
            device=device,
        )
    )
    try:
        results = Stores(StoreSettings()).results()
    except StoreUrlInvalid as e:
        raise CliError(e.message) from e
    try:
        eng = make_engine(settings, object_reader(results.stores), model_store(results.stores))
    except (DeviceUnavailable, ModelStoreMissing) as e:  # the pool's own misconfiguration:
        raise CliError(str(e)) from e  # say so first, and do not start
    store = _store(kubeconfig, ApiSettings())
    ns = settings.namespace or current_namespace(kubeconfig)
    serve(settings.metrics_port)
    metrics.WORKER_SLOTS.set(settings.slots)  # free slots = these - leased jobs (the alerts)
    liveness = Liveness(stale_after=max(30.0, settings.relist_seconds))
    liveness.serve(settings.health_port)
    w = Worker(store, settings, eng, namespace=ns, results=results, beat=liveness.beat)
    liveness.draining = w.drain.draining  # a drained worker is not ready: it goes first

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if w.stopping.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        liveness.stopping()  # not ready any more: no new job comes this way
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
    leader_election: Annotated[
        bool | None,
        typer.Option(
            "--leader-election/--no-leader-election",
            help="Elect one acting replica through a Lease (for more than one replica).",
        ),
    ] = None,
    metrics_port: Annotated[int | None, typer.Option(help="Serve /metrics on this port.")] = None,
    liveness_port: Annotated[
        int | None, typer.Option(help="Serve kopf's /healthz on this port.")
    ] = None,
) -> None:
    """Run the operator: fan-out, projection, reclaim of expired leases, reconciliation."""
    from recall.base.settings import OperatorSettings
    from recall.operator.runtime.runner import run_operator

    run_operator(
        OperatorSettings(
            **_given(
                namespace=namespace,
                leader_election=leader_election,
                metrics_port=metrics_port,
                liveness_port=liveness_port,
            )
        ),
        kubeconfig,
    )


# --- user commands -------------------------------------------------------------------------

# `recall doctor`: checks an install and says how to fix what it finds.
app.command()(doctor)


def _given(**options: Any) -> dict[str, Any]:
    """The options given on the command line (the rest come from the environment)."""
    return {k: v for k, v in options.items() if v is not None}


def _store(kubeconfig: Path | None, api: Any = None) -> Any:
    from recall.base.settings import ApiSettings
    from recall.kube.client import KubeClient, load_api_client

    api = api or ApiSettings()
    try:
        client = load_api_client(kubeconfig)
    except Exception as e:  # a missing or broken kubeconfig
        raise CliError(f"cannot load the kubeconfig: {e}") from e
    return KubeClient(client, timeout=api.timeout, watch_seconds=api.watch_seconds)


def _namespace(namespace: str | None, kubeconfig: Path | None) -> str:
    from recall.kube.client import current_namespace

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
    output: Annotated[
        str | None,
        typer.Option(
            help="Publish each accepted transcript here: a URL with {key} (the item), e.g. "
            "s3://media-out/talks/{key}."
        ),
    ] = None,
    formats: Annotated[
        str, typer.Option(help="Formats to publish with --output: json, srt, vtt, txt.")
    ] = "json",
    ttl: Annotated[
        int | None,
        typer.Option(help="Delete the finished jobs this many seconds after the Batch ends."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the manifests, create nothing.")
    ] = False,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Create one Batch from media files, folders or URLs (any number of them)."""

    import yaml

    from recall.bucket import StoreError as BucketError
    from recall.cli.client import (
        SubmitError,
        collect,
        default_batch_name,
        submission_for,
        submit_to,
    )
    from recall.kube import ApiError

    def list_objects(prefix: str) -> list[str]:
        from recall.base.settings import StoreSettings
        from recall.bucket import Stores

        bucket = Stores(StoreSettings()).open(prefix)
        return [bucket.url_of(o.key) for o in bucket.list()]

    try:
        media = collect(inputs, list_objects)
        plan = submission_for(
            media,
            name=name or default_batch_name(inputs, SYSTEM.now()),
            language=language,
            engine=engine,
            lease_seconds=lease,
            max_attempts=max_attempts,
            priority=priority,
            output=output,
            formats=[f.strip() for f in formats.split(",") if f.strip()],
            ttl_seconds=ttl,
        )
    except SubmitError as e:
        raise CliError(str(e)) from e
    except BucketError as e:
        raise CliError(f"listing {e.message}") from e
    if dry_run:
        docs = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": cm},
                "immutable": True,
                "data": {"items": text},
            }
            for cm, text in plan.lists.items()
        ]
        typer.echo(yaml.safe_dump_all([*docs, plan.batch], sort_keys=False), nl=False)
        return
    try:
        submit_to(_store(kubeconfig), _namespace(namespace, kubeconfig), plan)
    except ApiError as e:
        raise CliError(e.message) from e
    how = f"{len(plan.lists)} item list(s)" if plan.lists else "inline items"
    typer.echo(
        f"batch.recall.dev/{plan.batch['metadata']['name']} created ({len(media)} items, {how})"
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
    phase: Annotated[
        str | None, typer.Option("--phase", help="Jobs in this phase only (e.g. Failed).")
    ] = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """List Batches or TranscriptionJobs as a kubectl-style table (jobs page by page)."""
    from recall.cli.client import get_command

    try:
        get_command(
            _store(kubeconfig),
            kind,
            names or [],
            None if all_namespaces else _namespace(namespace, kubeconfig),
            output=output,
            batch=batch,
            phase=phase,
            echo=typer.echo,
        )
    except LookupError as e:
        raise CliError(str(e.args[0])) from e


@app.command()
def watch(
    batch: Annotated[str, typer.Argument(help="The Batch to follow.")],
    namespace: NamespaceOpt = None,
    timeout: Annotated[float | None, typer.Option(help="Give up after this many seconds.")] = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Live progress of a Batch until it completes (exit 1 if any item failed)."""
    from recall.cli.watch import BatchNotFound
    from recall.cli.watch import watch as follow

    try:
        code = follow(_store(kubeconfig), _namespace(namespace, kubeconfig), batch, timeout=timeout)
    except (BatchNotFound, TimeoutError) as e:
        raise CliError(str(e)) from e
    raise typer.Exit(code)


@app.command()
def transcript(
    job: Annotated[str, typer.Argument(help="The TranscriptionJob (or Batch item as BATCH/ITEM).")],
    format: Annotated[
        str, typer.Option("--format", "-f", help="txt, srt, vtt, json or aws.json.")
    ] = "txt",
    url: Annotated[
        bool,
        typer.Option("--url", help="Print a presigned URL of the transcript instead (json)."),
    ] = False,
    results_url: Annotated[
        str,
        typer.Option(
            "--store",
            envvar="RECALL_STORE_URL",
            show_envvar=True,
            help="The results store the cluster's workers write to (s3://bucket/prefix, ...); "
            "its credentials from the store's own variables (AWS_*, GOOGLE_*, AZURE_*).",
        ),
    ] = "",
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Print the accepted transcript of a job, from the results store.

    A Batch's item (BATCH/ITEM) is read from its job, or, once the job is gone (the Batch's
    ttlSecondsAfterFinished), from the Batch's results index.
    """
    from recall.base.settings import StoreSettings
    from recall.bucket import Bucket, Stores
    from recall.bucket import StoreError as BucketError
    from recall.cli.client import find_transcript
    from recall.resources import FORMATS
    from recall.transcripts import load_transcript, render

    if format not in FORMATS:
        raise CliError(f"unknown format {format!r}: use {', '.join(FORMATS)}")
    store = _store(kubeconfig)
    ns = _namespace(namespace, kubeconfig)

    def open_results() -> Bucket:
        if not results_url:
            raise CliError(
                "no results store is configured: pass --store or set RECALL_STORE_URL "
                "(s3://bucket/prefix, gs://…, az://… or file:///…), the URL the workers use"
            )
        return Stores(StoreSettings(url=results_url)).results()

    try:
        results, key = find_transcript(store, open_results, ns, job)
        if url:
            typer.echo(results.sign(key))
            return
        found = load_transcript(results, key)
    except BucketError as e:
        raise CliError(f"the results store: {e.message}") from e
    except LookupError as e:
        raise CliError(str(e)) from e
    if found is None:
        raise CliError(f"the transcript {results.url_of(key)} is missing from the results store")
    typer.echo(render(found, format), nl=False)


_add_dev_commands()


notify_app = typer.Typer(help="The operator's events (docs/notify.md).", no_args_is_help=True)
app.add_typer(notify_app, name="notify")


@notify_app.command("resend")
def notify_resend(
    ref: Annotated[str, typer.Argument(help="job/NAME or batch/NAME.", metavar="KIND/NAME")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Send the events given up for a job, or a Batch and its items, again (same ids)."""
    from recall.cli.notify import gone, resend

    store, ns = _store(kubeconfig), _namespace(namespace, kubeconfig)
    try:
        lost = gone(store, ns, ref)
        marked = resend(store, ns, ref)
    except LookupError as e:
        raise CliError(str(e.args[0])) from e
    for m in marked:
        typer.echo(f"{m}: given-up events to be sent again")
    if lost:
        typer.echo(
            f"{ref}: {lost} given-up item events cannot be sent again: the Batch's TTL deleted "
            "their jobs (status.notified.items.givenUpIndexes names the items)",
            err=True,
        )
    if not marked:
        typer.echo("nothing was given up")


@app.command()
def usage(
    namespace: NamespaceOpt = None,
    all_namespaces: Annotated[
        list[str] | None, typer.Option("--of", help="These namespaces (repeat the option).")
    ] = None,
    since: Annotated[str | None, typer.Option(help="First day (YYYY-MM-DD).")] = None,
    until: Annotated[str | None, typer.Option(help="Last day (YYYY-MM-DD).")] = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """What each namespace used: jobs finished, audio and engine hours (docs/notify.md)."""
    import datetime as dt

    from recall.cli.notify import usage as read_usage

    try:
        first = dt.date.fromisoformat(since) if since else None
        last = dt.date.fromisoformat(until) if until else None
    except ValueError as e:
        raise CliError(f"a day is YYYY-MM-DD: {e}") from e
    namespaces = all_namespaces or [_namespace(namespace, kubeconfig)]
    typer.echo(f"{'NAMESPACE':<24}{'JOBS':>8}{'AUDIO-HOURS':>14}{'ENGINE-HOURS':>14}")
    for row in read_usage(_store(kubeconfig), namespaces, first, last):
        typer.echo(
            f"{row.namespace:<24}{row.jobs:>8}{row.audio_seconds / 3600:>14.2f}"
            f"{row.engine_seconds / 3600:>14.2f}"
        )


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
    from recall.kube import ApiError

    if isinstance(e, ApiError):
        return e.message
    return f"{type(e).__name__}: {e}" if not str(e) else str(e)


def _fail(message: str, code: int, exc: BaseException | None) -> None:
    if _state["debug"] and exc is not None:
        import traceback

        traceback.print_exception(exc)
    typer.echo(f"error: {message}", err=True)
    sys.exit(code)
