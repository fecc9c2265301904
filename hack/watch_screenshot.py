"""Capture `recall watch` in a real terminal (tmux) mid-run and save it as docs/recall-watch.svg.

    .venv/bin/python hack/watch_screenshot.py

Starts a local control plane, the operator and three simulated workers, submits a Batch, runs
`recall watch` inside a detached tmux session, kills one worker while it holds a lease (so the
reclaim shows), captures the pane with its colours once the reclaim is visible, renders the
capture to SVG with rich, and stops everything.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.text import Text

from recall.kube.client import KubeClient
from recall.kube.config import load_api_client
from recall.resources import TranscriptionJob
from recall.resources.common import API_VERSION, BATCH_PLURAL, GROUP, VERSION
from recall_dev.cluster import ControlPlane
from recall_dev.crds import install_crds

OUT = Path(__file__).resolve().parents[1] / "docs" / "recall-watch.svg"
SESSION = "recall-watch-screenshot"
WIDTH, HEIGHT = 104, 34


def main() -> int:
    with (
        tempfile.TemporaryDirectory(prefix="recall-shot-") as tmp,
        ControlPlane(workdir=Path(tmp) / "cluster") as cp,
    ):
        install_crds(str(cp.kubeconfig))
        kube = KubeClient(load_api_client(cp.kubeconfig))
        store = Path(tmp) / "store"
        store.mkdir()
        env = cp.env() | {"RECALL_LOG_FORMAT": "json", "RECALL_STORE_URL": f"file://{store}"}
        procs = {}
        log = open(Path(tmp) / "procs.log", "ab")  # noqa: SIM115 - closed below
        for name, args in [("operator", ["operator", "-n", "default"])] + [
            (
                f"worker-{i}",
                ["worker", "--id", f"worker-{i}", "--engine", "simulated", "-n", "default"],
            )
            for i in (1, 2, 3)
        ]:
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "recall", *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        keys = [
            "intro",
            "keynote",
            "panel-a",
            "panel-b",
            "q-and-a",
            "workshop",
            "closing",
            "interview",
            "podcast-01",
            "podcast-02",
        ]
        kube.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            BATCH_PLURAL,
            {
                "apiVersion": API_VERSION,
                "kind": "Batch",
                "metadata": {"name": "conference"},
                "spec": {
                    "items": [
                        {"key": k, "source": {"url": f"file:///media/{k}.mp3"}} for k in keys
                    ],
                    "defaults": {
                        "leaseDurationSeconds": 3,
                        "engine": {
                            "name": "simulated",
                            "simulate": {"chunks": 8, "chunkDelaySeconds": 0.6},
                        },
                    },
                },
            },
        )
        shell_env = f"KUBECONFIG={cp.kubeconfig} COLUMNS={WIDTH}"
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
        subprocess.run(
            [
                "tmux",
                "new-session",
                "-d",
                "-s",
                SESSION,
                "-x",
                str(WIDTH),
                "-y",
                str(HEIGHT),
                f"{shell_env} {sys.executable} -m recall watch conference; sleep 60",
            ],
            check=True,
        )
        try:
            killed = False
            deadline = time.monotonic() + 120
            ansi = ""
            while time.monotonic() < deadline:
                time.sleep(0.5)
                jobs = [TranscriptionJob.from_api(o) for o in kube.list_jobs("default").items]
                if not killed:
                    for job in jobs:
                        lease, progress = job.status.lease, job.status.progress
                        if (
                            lease
                            and lease.holder == "worker-1"
                            and progress
                            and progress.chunks_done >= 2
                        ):
                            procs["worker-1"].send_signal(signal.SIGKILL)
                            killed = True
                            break
                    continue
                reclaimed = sum(j.status.expired_leases for j in jobs)
                done = sum(j.status.effective_phase == "Succeeded" for j in jobs)
                if reclaimed and done >= 3:
                    time.sleep(1.5)
                    ansi = subprocess.run(
                        ["tmux", "capture-pane", "-e", "-p", "-t", SESSION],
                        capture_output=True,
                        text=True,
                        check=True,
                    ).stdout
                    break
            if not ansi:
                print("error: the reclaim did not show in time", file=sys.stderr)
                log.flush()
                tail = (Path(tmp) / "procs.log").read_text(errors="replace").splitlines()[-20:]
                print("\n".join(tail), file=sys.stderr)
                return 1
        finally:
            subprocess.run(
                ["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False
            )
            for p in procs.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs.values():
                p.wait(timeout=30)
            log.close()
    console = Console(
        record=True,
        width=WIDTH,
        force_terminal=True,
        color_system="truecolor",
        file=open(os.devnull, "w"),
    )
    console.print(Text.from_ansi(ansi.rstrip("\n")))
    OUT.parent.mkdir(exist_ok=True)
    console.save_svg(str(OUT), title="recall watch conference")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
