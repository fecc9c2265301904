"""An abandoned engine call does not keep the worker's process alive
(`recall.worker.engine_thread`): a process whose engine call hangs, ignoring `cancel`, exits as
soon as the worker stopped, not when the call returns."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

HANG = 120.0  # seconds the engine call blocks: far longer than the test waits

SCRIPT = textwrap.dedent(
    f"""
    import threading

    from recall.base.settings import WorkerSettings
    from recall.engines.simulated import SimulatedEngine
    from recall.worker.loop import Worker
    from recall_dev.twin.api import MemoryApi
    from tests.unit.fakes import NS, job_manifest, memory_bucket

    class Hanging(SimulatedEngine):
        def __init__(self):
            super().__init__(chunks=2, chunk_delay_seconds=0)
            self.entered = threading.Event()

        def transcribe(self, request):
            self.entered.set()
            threading.Event().wait({HANG})  # a C call that never looks at cancel
            return super().transcribe(request)

    store = MemoryApi(watch_seconds=1.0)
    store.create_job(NS, job_manifest("hung"))
    engine = Hanging()
    settings = WorkerSettings(
        id="w1", engine="simulated", self_serve_seconds=0.05, grace_seconds=0.2
    )
    worker = Worker(store, settings, engine, namespace=NS, results=memory_bucket())

    def stop_once_hung():
        engine.entered.wait(30)
        worker.stop()

    threading.Thread(target=stop_once_hung, daemon=True).start()
    worker.run()
    print("worker_returned", flush=True)
    """
)


def test_worker_process__exits_promptly_although_an_abandoned_engine_call_hangs() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=45)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"the process outlived its worker:\n{out[-3000:]}") from None
    assert proc.returncode == 0, out[-3000:]
    assert "released" in out and "worker_returned" in out, out[-3000:]
    assert time.monotonic() - began < HANG / 2
