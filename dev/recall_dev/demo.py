"""`make demo`: the whole system on a local control plane, with a worker killed mid-job.

1. start etcd + kube-apiserver (+ controller manager) and install the CRDs;
2. start the operator and two workers running the local Whisper engine;
3. speak a few sentences into short WAV files with espeak-ng and submit them as one Batch;
4. follow the Batch with `recall watch` while one worker is killed (SIGKILL) as soon as it
   holds a lease with progress: its lease expires, the operator reclaims the job, the other
   worker resumes it from the checkpoint;
5. print the transcripts, then stop everything (`--keep` leaves it running; then
   `recall dev down` stops it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from recall.kube.client import KubeClient, load_api_client
from recall.resources import Phase, TranscriptionJob
from recall_dev import objstore_dev, speech
from recall_dev.cluster import STATE_FILE, ControlPlane, dev_down, dev_up
from recall_dev.crds import install_crds
from recall_dev.objstore import ObjectStore

DEMO_SENTENCES = [
    [speech.SENTENCES[0], speech.SENTENCES[1]],
    [speech.SENTENCES[2], speech.SENTENCES[3]],
    [speech.SENTENCES[4]],
    [speech.SENTENCES[5]],
]
EXTRA_PIDS = "demo-pids.json"


def say(message: str) -> None:
    print(f"\033[1;36m▶\033[0m {message}", flush=True)


def recall_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "recall", *args]


class Demo:
    def __init__(self, keep: bool, workdir: Path, lease: int, chunk_seconds: int) -> None:
        self.keep = keep
        self.workdir = workdir
        self.lease = lease
        self.chunk_seconds = chunk_seconds
        self.cp: ControlPlane | None = None
        self.objects: ObjectStore | None = None
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs = workdir / "logs"
        self.media = workdir / "media"

    # -- steps ---------------------------------------------------------------------------

    def start_control_plane(self) -> ControlPlane:
        say("starting a local control plane (etcd, kube-apiserver, kube-controller-manager)")
        if self.keep:
            cp = dev_up(self.workdir, progress=lambda m: print(f"    {m}", flush=True))
        else:
            cp = ControlPlane(workdir=self.workdir / "cluster")
            cp.start(progress=lambda m: print(f"    {m}", flush=True))
        self.cp = cp
        install_crds(str(cp.kubeconfig))
        say(f"API server {cp.server} is ready; CRDs installed")
        say("starting the results store (SeaweedFS on loopback, bucket recall)")
        if self.keep:
            self.objects = objstore_dev.dev_up(
                self.workdir / "objstore", ("recall",), lambda m: print(f"    {m}", flush=True)
            )
        else:
            self.objects = ObjectStore(self.workdir / "objstore", buckets=("recall",))
            self.objects.start()
        say(f"S3 at {self.objects.endpoint}: transcripts and checkpoints go there, not to etcd")
        return cp

    def env(self, worker: bool = False) -> dict[str, str]:
        """The control plane's and the results store's variables (the workers' own identity)."""
        assert self.cp is not None and self.objects is not None
        creds = self.objects.worker if worker else self.objects.admin
        store = self.objects.env(creds) | {"RECALL_STORE_URL": "s3://recall/"}
        return self.cp.env() | store

    def spawn(self, name: str, *args: str) -> None:
        assert self.cp is not None
        self.logs.mkdir(parents=True, exist_ok=True)
        env = self.env(worker=args[0] == "worker") | {
            "RECALL_LOG_FORMAT": "json",
            "PYTHONUNBUFFERED": "1",
        }
        with (self.logs / f"{name}.log").open("ab") as out:
            self.procs[name] = subprocess.Popen(
                recall_cmd(*args),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=self.keep,
            )
        if self.keep:
            pids = {n: p.pid for n, p in self.procs.items()}
            (self.workdir / EXTRA_PIDS).write_text(json.dumps(pids))

    def start_components(self) -> None:
        say("starting the operator and two workers (local Whisper, bundled tiny.en model)")
        self.spawn("operator", "operator", "--namespace", "default")
        for name in ("worker-1", "worker-2"):
            self.spawn(
                name, "worker", "--id", name, "--engine", "whisper", "--namespace", "default"
            )

    def synthesize(self) -> None:
        say(f"speaking {len(DEMO_SENTENCES)} short recordings with espeak-ng into {self.media}")
        self.media.mkdir(parents=True, exist_ok=True)
        names = ["council", "grandmother", "library", "engineers"]
        for name, sentences in zip(names, DEMO_SENTENCES, strict=True):
            seconds = speech.synthesize(sentences, self.media / f"{name}.wav")
            print(f"    {name}.wav  {seconds:.1f} s", flush=True)

    def submit(self) -> None:
        assert self.cp is not None
        say("submitting them as one Batch:  recall submit <folder> --name demo --language en")
        subprocess.run(
            recall_cmd(
                "submit",
                str(self.media),
                "--name",
                "demo",
                "--language",
                "en",
                "--engine",
                "whisper",
                "--lease",
                str(self.lease),
            ),
            env=self.env(),
            check=True,
        )

    def kill_a_worker_mid_job(self, stop: threading.Event) -> None:
        """Kill worker-1 as soon as it holds a lease with at least one chunk done."""
        assert self.cp is not None
        store = KubeClient(load_api_client(self.cp.kubeconfig))
        while not stop.wait(0.2):
            jobs = [TranscriptionJob.from_api(o) for o in store.list_jobs("default").items]
            for job in jobs:
                lease, progress = job.status.lease, job.status.progress
                if lease and lease.holder == "worker-1" and progress and progress.chunks_done >= 1:
                    self.procs["worker-1"].send_signal(signal.SIGKILL)
                    print(
                        f"\n\033[1;31m✖ killed worker-1 (SIGKILL) while it held {job.name} "
                        f"at {progress.summary}: the lease expires within {self.lease} s and "
                        f"the operator reclaims the job\033[0m\n",
                        flush=True,
                    )
                    return
            if all(j.status.effective_phase.terminal for j in jobs) and jobs:
                return

    def watch(self) -> int:
        assert self.cp is not None
        say("following the Batch:  recall watch demo")
        stop = threading.Event()
        killer = threading.Thread(target=self.kill_a_worker_mid_job, args=(stop,), daemon=True)
        killer.start()
        try:
            return subprocess.run(
                recall_cmd("watch", "demo", "--timeout", "600"), env=self.env()
            ).returncode
        finally:
            stop.set()
            killer.join(timeout=5)

    def show(self) -> None:
        assert self.cp is not None
        store = KubeClient(load_api_client(self.cp.kubeconfig))
        jobs = [TranscriptionJob.from_api(o) for o in store.list_jobs("default").items]
        say("the jobs:  recall get jobs -o wide")
        subprocess.run(recall_cmd("get", "jobs", "-o", "wide"), env=self.env(), check=False)
        for job in sorted(jobs, key=lambda j: j.name):
            if job.status.effective_phase is not Phase.SUCCEEDED:
                continue
            say(f"transcript of {job.name}:  recall transcript {job.name}")
            subprocess.run(recall_cmd("transcript", job.name), env=self.env(), check=False)

    def stop(self) -> None:
        if self.keep:
            assert self.cp is not None
            say("left running (--keep). Try:")
            print(
                f"    export KUBECONFIG={self.cp.kubeconfig}\n"
                f"    export PATH={self.cp.bin_dir}:$PATH\n"
                f"    kubectl get rb,tj\n    .venv/bin/recall dev down   # stop everything"
            )
            return
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.objects is not None:
            self.objects.stop()
        if self.cp is not None:
            self.cp.stop()
        say("stopped everything")


def stop_extra(workdir: Path) -> None:
    """Stop the operator and workers a `--keep` demo left running (used by `recall dev down`)."""
    path = workdir / EXTRA_PIDS
    if not path.exists():
        return
    for pid in json.loads(path.read_text()).values():
        try:
            os.kill(int(pid), signal.SIGTERM)
        except ProcessLookupError:
            continue
    path.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="recall-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave everything running")
    parser.add_argument("--lease", type=int, default=6, help="lease duration of the jobs (s)")
    parser.add_argument("--chunk-seconds", type=int, default=5, help="audio chunk length (s)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.keep:
        workdir = Path(".recall-dev").resolve()
        if (workdir / STATE_FILE).exists():
            stop_extra(workdir)
            dev_down(workdir)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="recall-demo-"))
    os.environ["RECALL_WORKER_CHUNK_SECONDS"] = str(args.chunk_seconds)
    demo = Demo(args.keep, workdir, args.lease, args.chunk_seconds)
    code = 1
    try:
        demo.start_control_plane()
        demo.start_components()
        demo.synthesize()
        demo.submit()
        code = demo.watch()
        demo.show()
    except speech.SpeechUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
    finally:
        demo.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    say(f"demo finished in {time.monotonic() - started:.0f} s (exit {code})")
    return code


if __name__ == "__main__":
    sys.exit(main())
