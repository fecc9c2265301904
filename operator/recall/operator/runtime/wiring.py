"""The operator's parts, made once and wired at the top: nobody builds or reaches into a peer.

    controller = wire(store, settings, results=bucket, leadership=elector, clock=clock)

`wire` makes each of the controller's `Peers` once, hands each the others it works with, and
returns the controller. The informers, the autoscalers and the notifier get the same peers from
`handlers.Runtime`, never through the controller.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from recall.base.clock import SYSTEM, Clock
from recall.base.settings import OperatorSettings
from recall.bucket import Bucket, Stores
from recall.kube import Api
from recall.operator.controller import Controller, Peers, Signals
from recall.operator.dispatch import ReadyQueue
from recall.operator.peers.leader import Leadership
from recall.operator.peers.registry import Registry
from recall.operator.reconcile.apply import Applier
from recall.operator.reconcile.cache import JobCache, KnownBatches
from recall.operator.results.publish import Results
from recall.operator.results.retention import never
from recall.resources import Batch


def wire(
    store: Api,
    settings: OperatorSettings,
    *,
    results: Bucket,
    stores: Stores | None = None,
    leading: threading.Event | None = None,
    leadership: Leadership | None = None,
    clock: Clock = SYSTEM,
    held: Callable[[Batch], bool] = never,
) -> Controller:
    """The controller and its peers. `leading` is set while this replica leads (the elector's
    event; a new one, unset, by default); `leadership` fences the applier's writes (the elector;
    a sole replica's by default); `held` holds a finished Batch's TTL (its events unsettled)."""
    leading = leading if leading is not None else threading.Event()
    signals = Signals()
    batches = KnownBatches()
    cache = JobCache(clock, wake=signals.dispatch)
    ready = ReadyQueue(clock, ahead_seconds=settings.offer_ahead_seconds)
    cache.listeners.append(ready.update)
    registry = Registry(clock, wake=signals.dispatch)
    publisher = Results(
        store,
        results,
        stores or results.stores,
        cache,
        leading=leading,
        batches=batches.snapshot,
        clock=clock,
        sweep_seconds=settings.sweep_seconds,
    )
    applier = Applier(store, leadership, storage=publisher.storage_error, clock=clock)
    peers = Peers(cache, ready, registry, publisher, applier, batches, signals, held)
    return Controller(store, settings, peers, leading=leading, clock=clock)
