"""The object store of `recall dev up|down|status`: one detached `weed mini` per dev directory.

Contract:
- `dev_up()` returns the store already answering in `workdir` (creating any bucket asked for
  that is missing), or starts a new one there (detached: it outlives this process) after
  stopping whatever a stale state file names.
- `dev_down()` stops it (SIGTERM, then SIGKILL) and removes `workdir`; it works from the state
  file alone, whatever state the store is in.
- The state file (`state.json`, mode 0600) holds the ports, the identities' keys and weed's
  pid; `ObjectStore.attach()` reads it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from recall_dev.objstore import STATE_FILE, ObjectStore
from recall_dev.procs import pid_alive


def dev_up(workdir: Path, buckets: tuple[str, ...], progress: Callable[[str], None]) -> ObjectStore:
    """Start a detached store in `workdir`, or return the one already answering there."""
    if (workdir / STATE_FILE).exists():
        existing = ObjectStore.attach(workdir)
        if existing.ready():
            for bucket in buckets:
                existing.create_bucket(bucket)
            existing.buckets = tuple(dict.fromkeys(existing.buckets + buckets))
            existing._write_state()
            return existing
        dev_down(workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    store = ObjectStore(workdir=workdir, buckets=buckets, die_with_parent=False, keep_workdir=True)
    store.start(progress=progress)
    return store


def dev_down(workdir: Path) -> bool:
    """Stop the store in `workdir` and remove the directory. False if none was there."""
    if not (workdir / STATE_FILE).exists():
        existed = workdir.exists()
        shutil.rmtree(workdir, ignore_errors=True)
        return existed
    store = ObjectStore.attach(workdir)
    if store.proc is not None and pid_alive(store.proc.pid):
        store.stop()
    store.remove_grpc_sockets()
    shutil.rmtree(workdir, ignore_errors=True)
    return True


def dev_status(workdir: Path) -> dict[str, object]:
    """The endpoint, readiness and weed's liveness of the store in `workdir`."""
    store = ObjectStore.attach(workdir)
    assert store.proc is not None
    return {
        "endpoint": store.endpoint,
        "ready": store.ready(),
        "buckets": list(store.buckets),
        "weed": {"pid": store.proc.pid, "alive": store.proc.alive()},
    }
