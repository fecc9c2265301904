"""`recall dev up|down|status`: a local control plane for development (mounted by `recall`).

`recall dev up` also starts the object store (SeaweedFS on loopback, recall_dev.objstore) with
the bucket `recall` in `<dir>/objstore` and prints its S3 variables and `RECALL_STORE_URL` (so
`recall operator` and `recall worker` find their results store); `--no-objstore` skips it.

`recall dev up --node` adds a node that runs pods (recall_dev.node; needs root), `--image`
imports the project's image into it; `recall dev down` removes the node first (from its state
file, whatever state it is in), then the control plane.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from recall_dev.cluster import ControlPlane

DEFAULT_DEV_DIR = Path(".recall-dev")
OBJSTORE_DIR = "objstore"
DEV_BUCKET = "recall"

dev_app = typer.Typer(
    help="A local control plane (etcd + kube-apiserver, and a node with --node) for development.",
    no_args_is_help=True,
)


@dev_app.command("up")
def dev_up(
    dir: Annotated[
        Path, typer.Option("--dir", help="Where state, logs and the kubeconfig go.")
    ] = DEFAULT_DEV_DIR,
    crds: Annotated[bool, typer.Option("--crds/--no-crds", help="Install the recall CRDs.")] = True,
    node: Annotated[
        bool,
        typer.Option(
            "--node/--no-node",
            help="Also run a node (containerd, kubelet, scheduler; needs root) that runs pods.",
        ),
    ] = False,
    image: Annotated[
        bool,
        typer.Option(
            "--image/--no-image",
            help="With --node: build the project's image and import it into the node "
            "(recall.local/recall:dev).",
        ),
    ] = False,
    objstore: Annotated[
        bool,
        typer.Option(
            "--objstore/--no-objstore",
            help=f"Also run the object store (SeaweedFS S3 on loopback, bucket {DEV_BUCKET}).",
        ),
    ] = True,
) -> None:
    """Start etcd and kube-apiserver (and the S3 server) on loopback ports; print the export
    lines that reach them."""
    from recall_dev import cluster, objstore_dev

    def say(message: str) -> None:
        typer.echo(f"  {message}", err=True)

    store_dir = dir.resolve() / OBJSTORE_DIR
    if not _control_plane_ready(dir.resolve()):
        objstore_dev.dev_down(store_dir)  # cluster.dev_up is about to empty the directory
    cp = cluster.dev_up(dir.resolve(), progress=say)
    store = objstore_dev.dev_up(store_dir, (DEV_BUCKET,), progress=say) if objstore else None
    if crds:
        from recall_dev.crds import install_crds

        install_crds(str(cp.kubeconfig))
        say("CRDs installed")
    if node:
        _node_up(cp, dir.resolve() / "node", image, say)
    typer.echo(f"export KUBECONFIG={cp.kubeconfig}")
    typer.echo(f"export PATH={cp.bin_dir}:$PATH")
    if store is not None:
        say(f"S3 endpoint {store.endpoint}, bucket s3://{DEV_BUCKET}/ (admin credentials below)")
        for name, value in store.env().items():
            typer.echo(f"export {name}={value}")
        # The results store of `recall operator` and `recall worker` (the admin identity).
        typer.echo(f"export RECALL_STORE_URL=s3://{DEV_BUCKET}/dev")


@dev_app.command("down")
def dev_down(
    dir: Annotated[Path, typer.Option("--dir")] = DEFAULT_DEV_DIR,
) -> None:
    """Stop the local control plane, its node and what a `--keep` demo left running; remove
    its directory."""
    from recall_dev import cluster, objstore_dev
    from recall_dev.demo import stop_extra
    from recall_dev.node_state import read_state
    from recall_dev.node_teardown import teardown

    stop_extra(dir.resolve())
    # The node first, while the API server can still tell the kubelet to stop the pods; its
    # teardown works from /run/recall-node alone when the API server is gone already.
    failed = ""
    state = read_state()
    # Only this control plane's node: the machine's one node may belong to another (a test's).
    node_dir = Path(str((state or {}).get("workdir", "")))
    if state is not None and node_dir.is_relative_to(dir.resolve()):
        kubeconfig, bin_dir = None, None
        if (dir.resolve() / cluster.STATE_FILE).exists():
            cp = cluster.ControlPlane.attach(dir.resolve())
            kubeconfig, bin_dir = cp.kubeconfig, cp.bin_dir
        try:
            removed = teardown(graceful_kubeconfig=kubeconfig, bin_dir=bin_dir)
            typer.echo(f"node stopped ({len(removed)} things removed)", err=True)
        except OSError as e:
            failed = f"the node could not be removed: {e}"  # the control plane goes anyway
    if objstore_dev.dev_down(dir.resolve() / OBJSTORE_DIR):
        typer.echo("object store stopped", err=True)
    if cluster.dev_down(dir.resolve()):
        typer.echo("control plane stopped", err=True)
    else:
        typer.echo("no control plane was running", err=True)
    if failed:
        typer.echo(f"error: {failed}", err=True)
        raise typer.Exit(1)


@dev_app.command("status")
def dev_status(
    dir: Annotated[Path, typer.Option("--dir")] = DEFAULT_DEV_DIR,
) -> None:
    """Show whether the local control plane (and its node) is up, and where."""
    from recall_dev import cluster

    try:
        status = cluster.dev_status(dir.resolve())
    except cluster.ControlPlaneError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from e
    from recall_dev.node_state import read_state
    from recall_dev.procs import pid_alive

    node_state = read_state()
    if node_state is not None:
        procs = node_state.get("processes", {})
        status["node"] = {
            "workdir": node_state.get("workdir"),
            "processes": {
                name: {"pid": pid, "alive": pid_alive(int(pid))}
                for name, pid in (procs.items() if isinstance(procs, dict) else [])
            },
        }
    from recall_dev import objstore, objstore_dev

    store_dir = dir.resolve() / OBJSTORE_DIR
    if (store_dir / objstore.STATE_FILE).exists():
        status["objstore"] = objstore_dev.dev_status(store_dir)
    typer.echo(json.dumps(status, indent=2))
    if not status["ready"]:
        raise typer.Exit(1)


def _control_plane_ready(workdir: Path) -> bool:
    """Whether `cluster.dev_up` will reuse the control plane in `workdir` (else it empties it)."""
    from recall_dev import cluster

    if not (workdir / cluster.STATE_FILE).exists():
        return False
    return cluster.ControlPlane.attach(workdir).ready()


def _node_up(cp: ControlPlane, workdir: Path, image: bool, say: Callable[[str], None]) -> None:
    """Start the node of `recall dev up --node` (detached), unless it runs already."""
    from recall_dev import node
    from recall_dev.node_state import read_state

    state = read_state()
    if state is not None and state.get("workdir") == str(workdir):
        say("node already up")
    else:
        node.Node(cp, workdir, die_with_parent=False).start(progress=say)
    if image:
        from recall_dev.image import DEFAULT_TAG, build_and_save
        from recall_dev.node_images import import_archive

        import_archive(workdir / "containerd" / "containerd.sock", build_and_save(DEFAULT_TAG))
        say(f"image {DEFAULT_TAG} imported into the node")
