"""A Batch's items as the controller uses them: resolved once per generation.

`Resolver.items(batch)` resolves the Batch's items (`items.resolve`), reading the lists it names
from their ConfigMaps, and keeps them until the Batch's uid or generation changes. Items that
cannot be used (`ItemsInvalid`) are kept with the reason and resolved again at every call; an
`ItemsInvalid` Event is posted when the reason is new. A ConfigMap that cannot be read makes the
items invalid for this call only.

Not guaranteed: a ConfigMap changed after its Batch's items were resolved is read again only by
a new generation.
"""

from __future__ import annotations

from dataclasses import dataclass

from recall.kube import Api, ApiError, ObjectRef
from recall.operator.reconcile.items import Item, ItemsInvalid, resolve
from recall.operator.reconcile.record import BatchKey
from recall.operator.reconcile.report import PostEvent
from recall.resources import Batch


@dataclass(frozen=True)
class Resolved:
    """A Batch's items as resolved for one generation, or why they cannot be used."""

    uid: str
    generation: int
    items: list[Item]
    invalid: str | None = None


class Resolver:
    """Each Batch's items, resolved once per generation. The controller's thread resolves and
    kopf's forgets, each one dict operation at a time."""

    def __init__(self, store: Api, event: PostEvent) -> None:
        self.store = store
        self.event = event
        self._resolved: dict[BatchKey, Resolved] = {}

    def items(self, batch: Batch) -> Resolved:
        """The Batch's items (see the module)."""
        uid, gen = batch.metadata.uid or "", batch.metadata.generation or 0
        known = self._resolved.get(batch.key)
        if known is not None and (known.uid, known.generation) == (uid, gen) and not known.invalid:
            return known
        lists: dict[str, str] = {}
        try:
            for ref in batch.spec.items_from:
                cm = self.store.get_config_map(batch.namespace, ref.config_map)
                if cm is not None and ref.key in cm.data:
                    lists[f"{ref.config_map}/{ref.key}"] = cm.data[ref.key]
            resolved = Resolved(uid, gen, resolve(batch, lists))
        except ItemsInvalid as e:
            resolved = Resolved(uid, gen, [], invalid=str(e))
            if known is None or known.invalid != str(e):
                self.event(
                    ObjectRef("Batch", batch.namespace, batch.name, uid),
                    "Warning",
                    "ItemsInvalid",
                    str(e),
                )
        except ApiError as e:
            resolved = Resolved(uid, gen, [], invalid=f"cannot read the item lists: {e.message}")
        self._resolved[batch.key] = resolved
        return resolved

    def size_hint(self, batch: Batch) -> float:
        """How many items `batch` has, as far as known without reading its lists."""
        known = self._resolved.get(batch.key)
        if known is not None and known.generation == (batch.metadata.generation or 0):
            return len(known.items)
        return float("inf") if batch.spec.items_from else len(batch.spec.items)

    def forget(self, key: BatchKey) -> None:
        self._resolved.pop(key, None)
