"""The `recall` CLI against the real API server: submit, get, watch, transcript, errors."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from pathlib import Path

import pysubs2
import yaml

from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall_dev.cluster import ControlPlane
from tests.helpers import Procs, create_batch, get_batch


def run(
    cp: ControlPlane, namespace: str, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = cp.env() | {"RECALL_LOG_FORMAT": "json"}
    return subprocess.run(
        [sys.executable, "-m", "recall", *args, "--namespace", namespace]
        if args[0] not in ("dev",)
        else [sys.executable, "-m", "recall", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _read_lines(proc: subprocess.Popen[str], into: queue.Queue[str | None]) -> None:
    """Put each line the process prints into `into`, then None at its end."""
    assert proc.stdout is not None
    for line in proc.stdout:
        into.put(line.rstrip("\n"))
    into.put(None)


def media_folder(tmp_path: Path, names: list[str]) -> Path:
    folder = tmp_path / "Talks 2026"
    folder.mkdir()
    for n in names:
        (folder / n).write_bytes(b"RIFF")
    (folder / "notes.txt").write_text("not media")
    return folder


def test_submit_dry_run__builds_batches_from_a_folder(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    folder = media_folder(tmp_path, ["Intro Talk.wav", "intro-talk.mp3", "q&a.m4a"])
    out = run(control_plane, namespace, "submit", str(folder), "--dry-run", "--language", "en")
    assert out.returncode == 0, out.stderr
    (batch,) = list(yaml.safe_load_all(out.stdout))
    assert batch["metadata"]["name"] == "talks-2026"
    assert [i["key"] for i in batch["spec"]["items"]] == ["intro-talk", "intro-talk-2", "q-a"]
    assert batch["spec"]["defaults"] == {"language": "en"}
    assert all(i["source"]["url"].startswith("file:///") for i in batch["spec"]["items"])


def test_submit__many_inputs_make_one_batch_with_item_lists(
    control_plane: ControlPlane, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    folder = media_folder(tmp_path, [f"part-{i:04d}.wav" for i in range(1500)])
    out = run(control_plane, namespace, "submit", str(folder), "--name", "big")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "batch.recall.dev/big created (1500 items, 1 item list(s))"
    batch = get_batch(kube, namespace, "big")
    assert batch.spec.items == [] and [r.config_map for r in batch.spec.items_from] == [
        "big-items-1"
    ]
    cm = kube.get_config_map(namespace, "big-items-1")
    assert cm is not None and len(cm.data["items"].splitlines()) == 1500
    raw = kube.core.read_namespaced_config_map("big-items-1", namespace)
    assert raw.immutable and raw.metadata.owner_references[0].uid == batch.metadata.uid


def test_submit_watch_get_transcript__whole_flow(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    procs: Procs,
    results: Bucket,
    tmp_path: Path,
) -> None:
    folder = media_folder(tmp_path, ["alpha.wav", "beta.wav"])
    procs.recall("operator", "operator", "--namespace", namespace)
    out = run(
        control_plane, namespace, "submit", str(folder), "--name", "flow", "--engine", "simulated"
    )
    assert out.returncode == 0, out.stderr
    # Follow from the start: the worker starts once the watch has shown the Batch unfinished,
    # so there is progress to show whatever the two processes' start-up times.
    stderr = tmp_path / "watch.err"
    with stderr.open("w") as err:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "recall", "watch", "flow", "--timeout", "60", "-n", namespace],
            env=control_plane.env(),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(watcher, lines), daemon=True)
    reader.start()
    first = lines.get(timeout=60)
    assert first is not None and "2/2 completed" not in first, stderr.read_text()
    procs.worker("w", "--engine", "simulated", "--namespace", namespace)
    assert watcher.wait(timeout=90) == 0, stderr.read_text()
    reader.join(timeout=10)
    rest = list(iter(lines.get_nowait, None))
    assert rest, "watch should print progress as it changes"
    assert rest[-1].startswith("flow: 2/2 completed")

    table = run(control_plane, namespace, "get", "batches").stdout.splitlines()
    assert table[0].split() == ["NAME", "ITEMS", "COMPLETED", "FAILED", "PROGRESS", "ETA", "AGE"]
    assert table[1].split()[:5] == ["flow", "2", "2", "0", "100%"]
    jobs = run(control_plane, namespace, "get", "jobs", "--batch", "flow").stdout
    assert "flow-alpha" in jobs and "Succeeded" in jobs

    # The transcript is read from the results store the workers wrote to: --store names it.
    unset = run(control_plane, namespace, "transcript", "flow-beta")
    assert unset.returncode == 1
    assert unset.stderr.startswith("error: no results store is configured: pass --store")
    srt = run(
        control_plane, namespace, "transcript", "flow/alpha", "--format", "srt",
        "--store", results.url,
    )  # fmt: skip
    assert srt.returncode == 0, srt.stderr
    assert srt.stdout.startswith("1\n00:00:00,000 --> ")
    # The cues, in order, say the transcript's words (split to follow the subtitle rules).
    cues = pysubs2.SSAFile.from_string(srt.stdout, format_="srt")
    said = " ".join(cue.plaintext.replace("\n", " ") for cue in cues).split()
    assert said[:3] == ["flow-alpha", "chunk", "0"], said
    assert all(cue.end - cue.start <= 7000 for cue in cues)
    txt = run(control_plane, namespace, "transcript", "flow-beta", "--store", results.url)
    assert txt.stdout.startswith("flow-beta chunk 0")


def test_watch__exits_non_zero_when_an_item_failed(
    control_plane: ControlPlane, kube: Kube, namespace: str, procs: Procs
) -> None:
    procs.recall("operator", "operator", "--namespace", namespace)
    procs.worker("w", "--engine", "simulated", "--namespace", namespace)
    create_batch(kube, namespace, "doomed", ["x"], simulate={"chunks": 1, "failure": "permanent"})
    watched = run(control_plane, namespace, "watch", "doomed", "--timeout", "60", timeout=90)
    assert watched.returncode == 1
    assert "1 failed" in watched.stdout.splitlines()[-1]


def test_errors__one_line_without_traceback_and_kubectl_exit_code(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cases = [
        (("transcript", "nope"), 'transcriptionjobs.recall.dev "nope" not found'),
        (("watch", "nope"), 'batches.recall.dev "nope" not found'),
        (("get", "widgets"), 'resource type "widgets"'),
        (("submit", str(tmp_path / "missing.wav")), "no such file, folder or URL"),
        (("transcript", "x", "--format", "doc"), "unknown format"),
    ]
    for args, words in cases:
        out = run(control_plane, namespace, *args)
        assert out.returncode == 1, (args, out.stderr)
        assert out.stderr.startswith("error: ") and words in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
