"""The machine's node state file, /run/recall-node/state.json: who owns the node, where it
lives, which processes it runs and what the host had before it started.

The node writes it from the first thing it makes, so any process can tear the node down from
this file alone (recall_dev.node_teardown) and tell whether another node holds the machine.
One node per machine: there is one such file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from recall_dev.procs import pid_alive

STATE_DIR = Path("/run/recall-node")
STATE_FILE = STATE_DIR / "state.json"


def read_state() -> dict[str, object] | None:
    try:
        state: dict[str, object] = json.loads(STATE_FILE.read_text())
        return state
    except (OSError, ValueError):
        return None


def update_state(**fields: object) -> None:
    state = read_state() or {}
    state.update(fields)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = STATE_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.rename(STATE_FILE)


def in_use(state: dict[str, object]) -> bool:
    """Whether the node of `state` still has an owner: a live starting process, or (detached,
    `recall dev up --node`) a live node process."""
    owner = int(str(state.get("owner", 0)))
    if owner == os.getpid():
        return False
    if state.get("detached"):
        procs = state.get("processes", {})
        return isinstance(procs, dict) and any(pid_alive(int(p)) for p in procs.values())
    return pid_alive(owner)
