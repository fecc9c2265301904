"""The object store of a chaos run: SeaweedFS with one bucket, which every worker and operator
reaches through a fault proxy, and the harness's own view of it, which does not.

    store = RunStore(workdir / "objstore")
    store.start()                  # weed, the bucket `chaos`, the proxy
    store.env("worker")            # RECALL_STORE_URL and the AWS_* variables of a role
    store.slow(1.5); store.fast()  # the proxy's faults, each switched on and off by itself
    store.bucket                   # a `recall.bucket.Bucket` on weed itself (admin): the checks
    store.stop()

Contract:
- Workers run with the worker identity (read, write and delete under `scratch/` only),
  operators with the admin identity; both reach weed through the proxy, so its faults hit them.
  The harness reads weed directly (`bucket`), so its own reads see no fault.
- The proxy's faults switch independently: a slow store (`slow`/`fast`), lost answers to PUTs
  (`lose_puts`/`keep_puts`; "reset" or "hang"), a store that is down (`down`/`up`).
  `active(kind)` says whether one is on; `heal()` ends them all (the drain).
- `restart(sig)` kills weed with `sig` and starts it again on the same ports and data (call it
  from a thread that outlives the store: PR_SET_PDEATHSIG is per thread); `back(detail)`
  says whether it answers and takes writes again (after a restart weed refuses writes for
  about 15 s), noting when each happened in `detail`.
- `stop()` stops the proxy and weed and removes weed's data and its (throwaway) identities,
  keeping its log in the work directory. It never raises and may be called more than once.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import time
from pathlib import Path
from typing import Any, Literal

from recall.base.settings import StoreSettings
from recall.bucket import Bucket, Location, Stores
from recall_dev.objstore import ObjectStore
from recall_dev.objstore_faults import FaultProxy

BUCKET = "chaos"
URL = f"s3://{BUCKET}/"
Role = Literal["worker", "operator"]


class RunStore:
    """weed, its bucket and the fault proxy of one run; see the module contract."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.server = ObjectStore(workdir=workdir, buckets=(BUCKET,), die_with_parent=True)
        self.proxy: FaultProxy | None = None
        self._bucket: Bucket | None = None
        self._lose_how = "reset"
        self._slow = 0.0
        self._on: set[str] = set()

    def start(self) -> None:
        self.server.start(timeout=90)
        self.proxy = FaultProxy(self.server.s3_port)
        client = self.server.s3_store(BUCKET, client_options={"timeout": "30s"})
        self._bucket = Bucket(Stores(StoreSettings(url=URL)), client, Location.parse(URL))

    @property
    def bucket(self) -> Bucket:
        assert self._bucket is not None, "start() first"
        return self._bucket

    def env(self, role: Role) -> dict[str, str]:
        """The variables a `recall` process of `role` needs for the results store."""
        assert self.proxy is not None, "start() first"
        identity = self.server.worker if role == "worker" else self.server.admin
        return {"RECALL_STORE_URL": URL, **self.server.env(identity, self.proxy.endpoint)}

    # -- the proxy's faults ------------------------------------------------------------------

    def active(self, kind: str) -> bool:
        """Whether the fault `kind` ("slow", "lose", "down") is on."""
        return kind in self._on

    def slow(self, seconds: float) -> None:
        assert self.proxy is not None
        self.proxy.delay(seconds)
        self._slow = seconds
        self._on.add("slow")

    def fast(self) -> None:
        assert self.proxy is not None
        self.proxy.delay(0.0)
        self._on.discard("slow")

    def lose_puts(self, count: int, how: Literal["reset", "hang"]) -> None:
        """The next `count` PUTs are applied and their answers lost."""
        assert self.proxy is not None
        self.proxy.lose_answers(("PUT",), how=how, count=count)
        self._lose_how = how
        self._on.add("lose")

    def keep_puts(self) -> None:
        """PUT answers come back again; answers held by "hang" are dropped (connection reset)."""
        assert self.proxy is not None
        if self._lose_how == "hang":  # only heal() lets the held connections go
            self.proxy.heal()
            if "slow" in self._on:
                self.proxy.delay(self._slow)
            if "down" in self._on:
                self.proxy.down()
        else:
            self.proxy.lose_answers(())
        self._on.discard("lose")

    def down(self) -> None:
        assert self.proxy is not None
        self.proxy.down()
        self._on.add("down")

    def up(self) -> None:
        assert self.proxy is not None
        self.proxy.up()
        self._on.discard("down")

    def heal(self) -> None:
        if self.proxy is not None:
            self.proxy.heal()
        self._on.clear()

    def stats(self) -> dict[str, dict[str, int]]:
        """Requests forwarded and answers lost, by method."""
        if self.proxy is None:
            return {}
        return {"forwarded": dict(self.proxy.stats.forwarded), "lost": dict(self.proxy.stats.lost)}

    # -- restarts ----------------------------------------------------------------------------

    def restart(self, sig: signal.Signals) -> None:
        self.server.restart(sig=sig, wait=False)

    def back(self, detail: dict[str, Any]) -> bool:
        """Whether weed answers and takes writes; notes when it answered (`answers`)."""
        if "answers" not in detail:
            if not self.server.ready():
                return False
            detail["answers"] = time.time()
        return self.server.writable()

    # -- the end -----------------------------------------------------------------------------

    def stop(self) -> None:
        if self.proxy is not None:
            with contextlib.suppress(Exception):
                self.proxy.close()
        with contextlib.suppress(Exception):
            self.server.stop()
        shutil.rmtree(self.workdir / "data", ignore_errors=True)
        for name in ("s3-identities.json", "state.json"):
            (self.workdir / name).unlink(missing_ok=True)
