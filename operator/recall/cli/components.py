"""`recall worker` and `recall operator`: the two components' processes, as the chart runs them.

Each reads its settings from `RECALL_*`, command-line options over them, and runs until
stopped: the worker drains its slots on SIGTERM, the operator runs until kopf stops. A
misconfiguration found at start (no results store, no device, no model store) is a one-line
CliError before anything runs.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from recall.cli.common import CliError, KubeconfigOpt, NamespaceOpt, connect, given, namespace_of

if TYPE_CHECKING:
    from recall.base.settings import WorkerSettings
    from recall.bucket import Bucket
    from recall.engines.base import Engine
    from recall.worker.health import Liveness
    from recall.worker.loop import Worker


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
    from recall.base.settings import WorkerSettings
    from recall.worker.health import Liveness
    from recall.worker.loop import Worker

    settings = WorkerSettings(
        **given(
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
    results, eng = _results_and_engine(settings)
    store = connect(kubeconfig)
    ns = namespace_of(settings.namespace, kubeconfig)
    metrics.serve(settings.metrics_port)
    metrics.WORKER_SLOTS.set(settings.slots)  # free slots = these - leased jobs (the alerts)
    liveness = Liveness(stale_after=max(30.0, settings.relist_seconds))
    liveness.serve(settings.health_port)
    w = Worker(store, settings, eng, namespace=ns, results=results, beat=liveness.beat)
    liveness.draining = w.drain.draining  # a drained worker is not ready: it goes first
    _stop_on_signals(w, liveness)
    raise typer.Exit(w.run())


def _results_and_engine(settings: WorkerSettings) -> tuple[Bucket, Engine]:
    """The results store and the engine, or a CliError saying which the pool got wrong."""
    from recall.base.settings import StoreSettings
    from recall.bucket import Stores, StoreUrlInvalid
    from recall.engines import make_engine
    from recall.engines.device import DeviceUnavailable
    from recall.engines.models import ModelStoreMissing
    from recall.worker.models import model_store
    from recall.worker.sources import object_reader

    try:
        results = Stores(StoreSettings()).results()
    except StoreUrlInvalid as e:
        raise CliError(e.message) from e
    try:
        eng = make_engine(settings, object_reader(results.stores), model_store(results.stores))
    except (DeviceUnavailable, ModelStoreMissing) as e:  # the pool's own misconfiguration:
        raise CliError(str(e)) from e  # say so first, and do not start
    return results, eng


def _stop_on_signals(w: Worker, liveness: Liveness) -> None:
    """SIGTERM and SIGINT stop the worker (its jobs finish within the grace, or are released);
    a second SIGINT while it stops interrupts it."""

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if w.stopping.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        liveness.stopping()  # not ready any more: no new job comes this way
        w.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


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
            **given(
                namespace=namespace,
                leader_election=leader_election,
                metrics_port=metrics_port,
                liveness_port=liveness_port,
            )
        ),
        kubeconfig,
    )
