"""The commands of the people who use recall: submit media, list and follow Batches and jobs,
print transcripts, resend events, and read what each namespace used.

Each declares its options and calls its module (`submission`, `listing`, `watch`,
`transcript`, `notify`), imported when it runs so `recall --help` stays quick; what that raises
for the user becomes a one-line CliError.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from recall.base.clock import SYSTEM
from recall.cli.common import CliError, KubeconfigOpt, NamespaceOpt, connect, namespace_of

if TYPE_CHECKING:
    from recall.cli.submission import Submission


# The options of `submit`, one alias each (the command's signature stays a list of names).
InputsArg = Annotated[
    list[str], typer.Argument(help="Media files, folders or URLs.", metavar="PATH|URL...")
]
NameOpt = Annotated[
    str | None,
    typer.Option("--name", help="Batch name (default: the folder's, or recall-<time>)."),
]
LanguageOpt = Annotated[str | None, typer.Option(help="Spoken language (ISO 639-1), e.g. en.")]
EngineOpt = Annotated[
    str | None, typer.Option(help="Require this engine: whisper, openai or simulated.")
]
LeaseOpt = Annotated[int | None, typer.Option(help="Lease duration of each job, seconds.")]
AttemptsOpt = Annotated[int | None, typer.Option(help="Claims each job may take.")]
PriorityOpt = Annotated[int | None, typer.Option(help="Priority of the jobs.")]
OutputOpt = Annotated[
    str | None,
    typer.Option(
        help="Publish each accepted transcript here: a URL with {key} (the item), e.g. "
        "s3://media-out/talks/{key}."
    ),
]
FormatsOpt = Annotated[
    str, typer.Option(help="Formats to publish with --output: json, srt, vtt, txt.")
]
TtlOpt = Annotated[
    int | None,
    typer.Option(help="Delete the finished jobs this many seconds after the Batch ends."),
]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the manifests, create nothing.")]


def submit(
    inputs: InputsArg,
    name: NameOpt = None,
    language: LanguageOpt = None,
    engine: EngineOpt = None,
    lease: LeaseOpt = None,
    max_attempts: AttemptsOpt = None,
    priority: PriorityOpt = None,
    output: OutputOpt = None,
    formats: FormatsOpt = "json",
    ttl: TtlOpt = None,
    dry_run: DryRunOpt = False,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Create one Batch from media files, folders or URLs (any number of them)."""
    from recall.bucket import StoreError as BucketError
    from recall.cli.submission import (
        SubmitError,
        collect,
        default_batch_name,
        submission_for,
        submit_to,
    )
    from recall.kube import ApiError

    try:
        media = collect(inputs, _list_objects)
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
        typer.echo(_manifests(plan), nl=False)
        return
    try:
        submit_to(connect(kubeconfig), namespace_of(namespace, kubeconfig), plan)
    except ApiError as e:
        raise CliError(e.message) from e
    how = f"{len(plan.lists)} item list(s)" if plan.lists else "inline items"
    typer.echo(
        f"batch.recall.dev/{plan.batch['metadata']['name']} created ({len(media)} items, {how})"
    )


def _list_objects(prefix: str) -> list[str]:
    """The object URLs under a bucket prefix, with the results store's credentials."""
    from recall.base.settings import StoreSettings
    from recall.bucket import Stores

    bucket = Stores(StoreSettings()).open(prefix)
    return [bucket.url_of(o.key) for o in bucket.list()]


def _manifests(plan: Submission) -> str:
    """What `--dry-run` prints: the item-list ConfigMaps, then the Batch, as YAML documents."""
    import yaml

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
    return yaml.safe_dump_all([*docs, plan.batch], sort_keys=False)


def get(
    kind: Annotated[str, typer.Argument(help="batches (rb) or jobs (tj).")] = "batches",
    names: Annotated[list[str] | None, typer.Argument(help="Only these names.")] = None,
    namespace: NamespaceOpt = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A")] = False,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="wide, name, yaml or json.")
    ] = None,
    batch: Annotated[str | None, typer.Option("--batch", help="Jobs of this Batch only.")] = None,
    phase: Annotated[
        str | None, typer.Option("--phase", help="Jobs in this phase only (e.g. Failed).")
    ] = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """List Batches or TranscriptionJobs as a kubectl-style table (jobs page by page)."""
    from recall.cli.listing import check_output, get_command

    try:
        check_output(output)  # before connecting: a bad -o fails without a cluster too
        get_command(
            connect(kubeconfig),
            kind,
            names or [],
            None if all_namespaces else namespace_of(namespace, kubeconfig),
            output=output,
            batch=batch,
            phase=phase,
            echo=typer.echo,
        )
    except LookupError as e:
        raise CliError(str(e.args[0])) from e


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
        code = follow(
            connect(kubeconfig), namespace_of(namespace, kubeconfig), batch, timeout=timeout
        )
    except (BatchNotFound, TimeoutError) as e:
        raise CliError(str(e)) from e
    raise typer.Exit(code)


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
    from recall.cli.transcript import find_transcript
    from recall.resources import FORMATS
    from recall.transcripts import load_transcript, render

    if format not in FORMATS:
        raise CliError(f"unknown format {format!r}: use {', '.join(FORMATS)}")
    store = connect(kubeconfig)
    ns = namespace_of(namespace, kubeconfig)

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


def notify_resend(
    ref: Annotated[str, typer.Argument(help="job/NAME or batch/NAME.", metavar="KIND/NAME")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Send the events given up for a job, or a Batch and its items, again (same ids)."""
    from recall.cli.notify import gone, resend

    store, ns = connect(kubeconfig), namespace_of(namespace, kubeconfig)
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
    namespaces = all_namespaces or [namespace_of(namespace, kubeconfig)]
    typer.echo(f"{'NAMESPACE':<24}{'JOBS':>8}{'AUDIO-HOURS':>14}{'ENGINE-HOURS':>14}")
    for row in read_usage(connect(kubeconfig), namespaces, first, last):
        typer.echo(
            f"{row.namespace:<24}{row.jobs:>8}{row.audio_seconds / 3600:>14.2f}"
            f"{row.engine_seconds / 3600:>14.2f}"
        )
