"""`recall dev up|down|status`: a local control plane for development (mounted by `recall`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_DEV_DIR = Path(".recall-dev")

dev_app = typer.Typer(
    help="A local control plane (etcd + kube-apiserver) for development.", no_args_is_help=True
)


@dev_app.command("up")
def dev_up(
    dir: Annotated[
        Path, typer.Option("--dir", help="Where state, logs and the kubeconfig go.")
    ] = DEFAULT_DEV_DIR,
    crds: Annotated[bool, typer.Option("--crds/--no-crds", help="Install the recall CRDs.")] = True,
) -> None:
    """Start etcd and kube-apiserver on loopback ports; print the KUBECONFIG export line."""
    from recall_dev import cluster

    cp = cluster.dev_up(dir.resolve(), progress=lambda m: typer.echo(f"  {m}", err=True))
    if crds:
        from recall_dev.crds import install_crds

        install_crds(str(cp.kubeconfig))
        typer.echo("  CRDs installed", err=True)
    typer.echo(f"export KUBECONFIG={cp.kubeconfig}")
    typer.echo(f"export PATH={cp.bin_dir}:$PATH")


@dev_app.command("down")
def dev_down(
    dir: Annotated[Path, typer.Option("--dir")] = DEFAULT_DEV_DIR,
) -> None:
    """Stop the local control plane and what a `--keep` demo left running; remove its dir."""
    from recall_dev import cluster
    from recall_dev.demo import stop_extra

    stop_extra(dir.resolve())
    if cluster.dev_down(dir.resolve()):
        typer.echo("control plane stopped", err=True)
    else:
        typer.echo("no control plane was running", err=True)


@dev_app.command("status")
def dev_status(
    dir: Annotated[Path, typer.Option("--dir")] = DEFAULT_DEV_DIR,
) -> None:
    """Show whether the local control plane is up, and where."""
    from recall_dev import cluster

    try:
        status = cluster.dev_status(dir.resolve())
    except cluster.ControlPlaneError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from e
    typer.echo(json.dumps(status, indent=2))
    if not status["ready"]:
        raise typer.Exit(1)
