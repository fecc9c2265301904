"""`recall worker` refuses to start, in one line, when its pool is misconfigured for models:
it reads models with the results store's settings, so without a store it takes no job."""

from __future__ import annotations

import os
import subprocess
import sys


def test_worker__without_a_store_it_refuses_to_start_before_taking_a_job() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env["RECALL_WORKER_WHISPER_MODEL"] = "s3://models/faster-whisper-small/"
    env["KUBECONFIG"] = "/nonexistent"  # it must stop before it looks for a cluster
    done = subprocess.run(
        [sys.executable, "-m", "recall", "worker", "--engine", "whisper"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: no results store is configured: set RECALL_STORE_URL")
