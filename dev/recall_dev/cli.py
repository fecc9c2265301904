"""`recall dev up|down|status`: a cluster for development (mounted by `recall`).

`recall dev up` starts a local control plane (etcd and kube-apiserver on loopback, the CRDs
installed) and the object store (SeaweedFS on loopback, recall_dev.objstore) with the bucket
`recall` in `<dir>/objstore`, and prints their variables; `--no-objstore` skips the store.
Operators and workers then run as local processes.

`recall dev up --kind` starts a kind cluster instead (recall_dev.kind: a control plane and
`--workers` worker nodes, on a private dockerd that outlives the command), with every image the
chart's default values name built here and loaded (recall_dev.release.chart_images), and no
CRDs: the chart installs them, so `helm install recall charts/recall` works on it as written.
`recall dev down` removes whichever runs (the kind cluster with its network and its daemon).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

DEFAULT_DEV_DIR = Path(".recall-dev")
OBJSTORE_DIR = "objstore"
KIND_DIR = "kind"
KIND_STATE = "state.json"
KIND_CLUSTER = "recall-dev"
DEV_BUCKET = "recall"

dev_app = typer.Typer(
    help="A cluster for development: a local control plane (etcd + kube-apiserver), or kind.",
    no_args_is_help=True,
)


def _say(message: str) -> None:
    typer.echo(f"  {message}", err=True)


@dev_app.command("up")
def dev_up(
    dir: Annotated[
        Path, typer.Option("--dir", help="Where state, logs and the kubeconfig go.")
    ] = DEFAULT_DEV_DIR,
    crds: Annotated[
        bool, typer.Option("--crds/--no-crds", help="Install the recall CRDs (not with --kind).")
    ] = True,
    kind: Annotated[
        bool,
        typer.Option(
            "--kind/--no-kind",
            help="A kind cluster that runs pods, with the chart's default images loaded, "
            "instead of the local control plane.",
        ),
    ] = False,
    workers: Annotated[
        int,
        typer.Option(
            "--workers", min=0, help="With --kind: worker nodes beside the control plane."
        ),
    ] = 2,
    objstore: Annotated[
        bool,
        typer.Option(
            "--objstore/--no-objstore",
            help=f"Also run the object store (SeaweedFS S3 on loopback, bucket {DEV_BUCKET}).",
        ),
    ] = True,
) -> None:
    """Start the development cluster; print the export lines that reach it."""
    if kind:
        _kind_up(dir.resolve(), workers)
        return
    from recall_dev import cluster, objstore_dev

    store_dir = dir.resolve() / OBJSTORE_DIR
    if not _control_plane_ready(dir.resolve()):
        objstore_dev.dev_down(store_dir)  # cluster.dev_up is about to empty the directory
    cp = cluster.dev_up(dir.resolve(), progress=_say)
    store = objstore_dev.dev_up(store_dir, (DEV_BUCKET,), progress=_say) if objstore else None
    if crds:
        from recall_dev.crds import install_crds

        install_crds(str(cp.kubeconfig))
        _say("CRDs installed")
    typer.echo(f"export KUBECONFIG={cp.kubeconfig}")
    typer.echo(f"export PATH={cp.bin_dir}:$PATH")
    if store is not None:
        _say(f"S3 endpoint {store.endpoint}, bucket s3://{DEV_BUCKET}/ (admin credentials below)")
        for name, value in store.env().items():
            typer.echo(f"export {name}={value}")
        # The results store of `recall operator` and `recall worker` (the admin identity):
        # without it they refuse to start (tests/integration/test_docs_commands.py).
        typer.echo(f"export RECALL_STORE_URL=s3://{DEV_BUCKET}/dev")


@dev_app.command("down")
def dev_down(
    dir: Annotated[Path, typer.Option("--dir")] = DEFAULT_DEV_DIR,
) -> None:
    """Stop the development cluster and what a `--keep` demo left running; remove its
    directory."""
    from recall_dev import cluster, objstore_dev
    from recall_dev.demo import stop_extra

    workdir = dir.resolve()
    if _kind_down(workdir):
        typer.echo("kind cluster deleted", err=True)
    stop_extra(workdir)
    if objstore_dev.dev_down(workdir / OBJSTORE_DIR):
        typer.echo("object store stopped", err=True)
    if cluster.dev_down(workdir):
        typer.echo("control plane stopped", err=True)
    elif not (workdir / KIND_DIR).exists():
        typer.echo("no control plane was running", err=True)


@dev_app.command("status")
def dev_status(
    dir: Annotated[Path, typer.Option("--dir")] = DEFAULT_DEV_DIR,
) -> None:
    """Show whether the development cluster is up, and where."""
    workdir = dir.resolve()
    state = _kind_state(workdir)
    if state is not None:
        status = _kind_status(state)
        typer.echo(json.dumps(status, indent=2))
        if not status["ready"]:
            raise typer.Exit(1)
        return
    from recall_dev import cluster, objstore, objstore_dev

    try:
        status = cluster.dev_status(workdir)
    except cluster.ControlPlaneError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from e
    store_dir = workdir / OBJSTORE_DIR
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


# -- kind ----------------------------------------------------------------------------------------


def _kind_state(workdir: Path) -> dict[str, Any] | None:
    path = workdir / KIND_DIR / KIND_STATE
    if not path.exists():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def _kind_up(workdir: Path, workers: int) -> None:
    """Make the kind cluster (unless it runs) with the chart's default images loaded."""
    from recall_dev import kind, kind_image
    from recall_dev.docker import detached_daemon
    from recall_dev.release import chart_default_images, chart_images

    state = _kind_state(workdir)
    if state is not None and _kind_status(state)["ready"]:
        _say(f"kind cluster {state['name']} already up")
    else:
        if state is not None:
            _kind_down(workdir)
        kind_dir = workdir / KIND_DIR
        bin_dir = kind_image.kind_tools()
        archives = chart_images()
        docker = detached_daemon()
        volumes = kind.dangling_volumes(docker)
        state = {
            "name": KIND_CLUSTER,
            "kubeconfig": str(kind_dir / "kubeconfig"),
            "bin_dir": str(bin_dir),
            "docker_host": docker.host,
            "workers": workers,
            "volumes_before": sorted(volumes),
            "modules_made": not kind.HOST_MODULES.exists(),
        }
        kind_dir.mkdir(parents=True, exist_ok=True)
        (kind_dir / KIND_STATE).write_text(json.dumps(state, indent=2))
        try:
            kind.create(
                docker, KIND_CLUSTER, kind_dir, bin_dir=bin_dir, workers=workers, archives=archives
            )
        except BaseException:
            _kind_down(workdir)
            raise
        for ref in chart_default_images(_root()):
            _say(f"image {ref} loaded into every node")
    typer.echo(f"export KUBECONFIG={state['kubeconfig']}")
    typer.echo(f"export PATH={state['bin_dir']}:$PATH")


def _root() -> Path:
    from recall_dev.cluster import repo_root

    return repo_root()


def _kind_status(state: dict[str, Any]) -> dict[str, Any]:
    from recall_dev.docker import DockerEngine

    docker = DockerEngine(host=str(state["docker_host"]))
    nodes: dict[str, str] = {}
    if docker.answers():
        from recall_dev.kind import node_names

        for node in node_names(str(state["name"]), int(state["workers"])):
            done = docker.run(
                ["inspect", "--format", "{{.State.Status}}", node], capture=True, check=False
            )
            nodes[node] = done.stdout.strip() or "missing"
    ready = bool(nodes) and all(s == "running" for s in nodes.values())
    return {
        "kind": state["name"],
        "kubeconfig": state["kubeconfig"],
        "nodes": nodes,
        "ready": ready,
    }


def _kind_down(workdir: Path) -> bool:
    """Delete the kind cluster, its network and its daemon; False if there was none."""
    import shutil

    from recall_dev import kind
    from recall_dev.docker import KIND_DEV_DAEMON, DockerEngine, stop_detached

    state = _kind_state(workdir)
    if state is None:
        return False
    docker = DockerEngine(host=str(state["docker_host"]))
    if docker.answers():
        kind.delete(
            docker, Path(str(state["bin_dir"])), str(state["name"]),
            modules_made=bool(state["modules_made"]),
            volumes_before=set(state["volumes_before"]),
        )  # fmt: skip
    if docker.host.endswith(str(KIND_DEV_DAEMON.socket)):
        stop_detached(KIND_DEV_DAEMON)
    shutil.rmtree(workdir / KIND_DIR, ignore_errors=True)
    return True
