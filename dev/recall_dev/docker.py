"""A Docker engine to build images with: the one running, or a private `dockerd` for the build.

Contract:
- `docker_engine()` yields a `DockerEngine` whose `run()` talks to a daemon that answers. When
  the default daemon (`DOCKER_HOST`, or /var/run/docker.sock) answers, it is used and left
  alone. Otherwise a `dockerd` is started with its own data root (in the cache, so images and
  the build cache survive between runs), its own exec root, socket and pid file, no bridge and
  no iptables rules (builds run with --network=none: nothing here needs a network), and it is
  stopped on exit — also when the caller dies (PR_SET_PDEATHSIG) — with its containerd; the
  empty cgroups its containers left under `docker` (new since it started) are removed.
- One private daemon per cache at a time: callers serialise on a lock file for the whole
  `with` block, so two test runs never start two daemons on one data root. Its run directory
  (exec root, socket, pid file) is the cache's own too, so a daemon for another cache is never
  taken for a stale one.
- Three private daemons exist, each with its own data root, exec root, socket and lock:
  `BUILD_DAEMON` (the above: images only), `KIND_DAEMON` for the tests' kind clusters and
  `KIND_DEV_DAEMON` for `recall dev up --kind`, which `detached_daemon()` starts to outlive
  the command (no lock, no parent death signal) and `stop_detached()` stops. The kind ones
  still adds no iptables rule, masquerades nothing and forwards nothing on the host; it runs
  docker-proxy (the userland proxy), which is what publishes a node's API server port on
  127.0.0.1. Networks on it are bridges the caller creates; the host routes nothing out of
  them (net.ipv4.ip_forward stays as it was, no NAT). Its containers run through
  recall_dev.runc_bounds, which drops the capabilities this host's root lacks (kind's
  `--privileged` nodes ask for all of them, and runc refuses what cannot be granted).
- BuildKit is on (DOCKER_BUILDKIT=1). The CLI is Debian's docker.io one (/usr/bin/docker) when
  present: its BuildKit is built in, while a newer CLI needs the buildx plug-in for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from recall_dev.procs import Proc, spawn, tail, terminate

log = structlog.get_logger("recall_dev.docker")

# Short paths: a unix socket path must fit in 108 bytes, and containerd's live under exec-root
# (each gets a digest of the cache appended: PrivateDaemon.run_dir).
PRIVATE_RUN_DIR = Path("/run/recall-docker")
KIND_RUN_DIR = Path("/run/recall-kind-docker")
KIND_DEV_RUN_DIR = Path("/run/recall-kind-dev-docker")
# No bridge of docker's own, no iptables rules, no masquerading, no forwarding on the host.
_ISOLATED = (
    "--bridge=none",
    "--iptables=false",
    "--ip6tables=false",
    "--ip-masq=false",
    "--ip-forward=false",
)
# dockerd's containerd creates this (empty) whatever its root; removed when it was not there.
CONTAINERD_OPT = Path("/opt/containerd")
CGROUP_ROOT = Path("/sys/fs/cgroup")


class DockerError(RuntimeError):
    """No Docker engine could be reached or started."""


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (hex), read a MiB at a time: how cached builds name and
    recognise what they made."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cache_root() -> Path:
    """Where the project keeps what it builds (`RECALL_CACHE_DIR`, else ~/.cache/recall)."""
    override = os.environ.get("RECALL_CACHE_DIR")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "recall"


def docker_cli() -> str:
    """The docker client to run: Debian's (built-in BuildKit) if installed, else the one on PATH."""
    debian = Path("/usr/bin/docker")
    if debian.exists():
        return str(debian)
    found = shutil.which("docker")
    if found is None:
        raise DockerError("no docker client: run hack/install-system-deps.sh (Debian's docker.io)")
    return found


@dataclass(frozen=True)
class PrivateDaemon:
    """How a private dockerd is started: its name (log, lock and data root), run dir, flags."""

    name: str
    run_base: Path
    flags: tuple[str, ...]
    bounded_runtime: bool = False

    @property
    def run_dir(self) -> Path:
        """`run_base` plus a digest of the cache: two caches (RECALL_CACHE_DIR) run two
        daemons side by side, each stopping only its own stale one."""
        digest = hashlib.sha256(str(cache_root()).encode()).hexdigest()[:8]
        return Path(f"{self.run_base}-{digest}")

    @property
    def runtime(self) -> Path:
        """The launcher of recall_dev.runc_bounds, written at start (bounded_runtime only)."""
        return self.run_dir / "runc-bounds"

    @property
    def socket(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def data_root(self) -> Path:
        return cache_root() / self.name


BUILD_DAEMON = PrivateDaemon("docker", PRIVATE_RUN_DIR, (*_ISOLATED, "--userland-proxy=false"))
# kind publishes the API server port on 127.0.0.1: with iptables off, docker-proxy does it.
KIND_DAEMON = PrivateDaemon(
    "docker-kind", KIND_RUN_DIR, (*_ISOLATED, "--userland-proxy=true"), bounded_runtime=True
)
KIND_DEV_DAEMON = PrivateDaemon(
    "docker-kind-dev", KIND_DEV_RUN_DIR, (*_ISOLATED, "--userland-proxy=true"),
    bounded_runtime=True,
)  # fmt: skip


@dataclass
class DockerEngine:
    """A reachable Docker daemon: `host` is its DOCKER_HOST ("" for the client's default)."""

    host: str = ""
    cli: str = field(default_factory=docker_cli)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DOCKER_BUILDKIT"] = "1"
        if self.host:
            env["DOCKER_HOST"] = self.host
        return env

    def run(
        self, args: Sequence[str], *, capture: bool = False, check: bool = True, **kw: object
    ) -> subprocess.CompletedProcess[str]:
        """Run `docker ARGS` against this daemon (output captured as text when asked)."""
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            [self.cli, *args],
            env=self.env(),
            check=check,
            text=True,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
            **kw,
        )

    def answers(self) -> bool:
        try:
            done = self.run(
                ["version", "--format", "{{.Server.Version}}"], capture=True, check=False
            )
        except OSError:
            return False
        return done.returncode == 0

    def image_id(self, ref: str) -> str | None:
        """The local image ID of `ref`, or None when the daemon has no such image."""
        done = self.run(["image", "inspect", "--format", "{{.Id}}", ref], capture=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else None


@contextlib.contextmanager
def docker_engine(
    progress: bool = True, *, daemon: PrivateDaemon = BUILD_DAEMON
) -> Iterator[DockerEngine]:
    """A daemon to build with for the duration of the block (see the module contract)."""
    default = DockerEngine(host=os.environ.get("DOCKER_HOST", ""))
    if default.answers():
        yield default
        return
    if shutil.which("dockerd") is None:
        raise DockerError("no Docker daemon answers and dockerd is not installed")
    lock_path = cache_root() / f"{daemon.name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        opt_absent = not CONTAINERD_OPT.exists()
        cgroups_before = _docker_cgroups()
        proc = _start_private_daemon(progress, daemon)
        try:
            yield DockerEngine(host=f"unix://{daemon.socket}")
        finally:
            _stop_private_daemon(proc, daemon)
            if opt_absent:
                _remove_empty_tree(CONTAINERD_OPT)
            _remove_new_cgroups(cgroups_before)


def detached_daemon(daemon: PrivateDaemon = KIND_DEV_DAEMON) -> DockerEngine:
    """The default daemon when one answers; else `daemon`, started unless it answers already,
    left running when this process ends (stop it with `stop_detached`)."""
    default = DockerEngine(host=os.environ.get("DOCKER_HOST", ""))
    if default.answers():
        return default
    engine = DockerEngine(host=f"unix://{daemon.socket}")
    if engine.answers():
        return engine
    if shutil.which("dockerd") is None:
        raise DockerError("no Docker daemon answers and dockerd is not installed")
    _start_private_daemon(False, daemon, owned=False)
    return engine


def stop_detached(daemon: PrivateDaemon = KIND_DEV_DAEMON) -> bool:
    """Stop a daemon `detached_daemon` started (from its pid file); False if none ran."""
    running = (daemon.run_dir / "dockerd.pid").exists()
    _stop_stale_daemon(daemon)
    shutil.rmtree(daemon.run_dir, ignore_errors=True)
    return running


def _start_private_daemon(progress: bool, daemon: PrivateDaemon, *, owned: bool = True) -> Proc:
    data_root = daemon.data_root
    data_root.mkdir(parents=True, exist_ok=True)
    _stop_stale_daemon(daemon)
    daemon.run_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "dockerd",
        f"--data-root={data_root}",
        f"--exec-root={daemon.run_dir / 'exec'}",
        f"--host=unix://{daemon.socket}",
        f"--pidfile={daemon.run_dir / 'dockerd.pid'}",
        *daemon.flags,
    ]
    if daemon.bounded_runtime:
        daemon.runtime.write_text(
            f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m recall_dev.runc_bounds "$@"\n'
        )
        daemon.runtime.chmod(0o755)
        args += [f"--add-runtime=recall-runc={daemon.runtime}", "--default-runtime=recall-runc"]
    if progress:
        log.info("dockerd_start", data_root=str(data_root))
    proc = spawn(daemon.name.replace("docker", "dockerd", 1), args, cache_root(), None, owned=owned)
    engine = DockerEngine(host=f"unix://{daemon.socket}")
    deadline = time.monotonic() + 60
    while not engine.answers():
        if not proc.alive() or time.monotonic() > deadline:
            terminate([proc], grace=5)
            raise DockerError(f"dockerd did not start; last lines of {proc.log}:\n{tail(proc.log)}")
        time.sleep(0.3)
    return proc


def _stop_private_daemon(proc: Proc, daemon: PrivateDaemon) -> None:
    # dockerd stops the containerd it started; give both time to unmount cleanly.
    terminate([proc], grace=30)
    shutil.rmtree(daemon.run_dir, ignore_errors=True)


def _docker_cgroups() -> set[Path]:
    """The cgroups (v1 hierarchies and v2) that runc made under `docker` for containers. One
    that goes while they are read (a pod's, in a running kind node) is left out, never an error:
    os.walk skips a directory it cannot list."""
    found: set[Path] = set()
    for top in (*CGROUP_ROOT.glob("*/docker"), CGROUP_ROOT / "docker"):
        found.update(Path(d) for d, _, _ in os.walk(top))
    return found


def _remove_new_cgroups(before: set[Path]) -> None:
    """Empty cgroups the daemon's containers and builds left that were not there before it
    started (deepest first; one still in use refuses, and stays)."""
    for d in sorted(_docker_cgroups() - before, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            d.rmdir()


def _remove_empty_tree(top: Path) -> None:
    for d in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            d.rmdir()
    with contextlib.suppress(OSError):
        top.rmdir()


def _stop_stale_daemon(daemon: PrivateDaemon) -> None:
    """A private daemon left by a killed build (its pid file survives): stop it first."""
    pidfile = daemon.run_dir / "dockerd.pid"
    with contextlib.suppress(OSError, ValueError):
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"dockerd" in cmdline and str(daemon.run_dir).encode() in cmdline:
            terminate([Proc("dockerd", None, Path("/dev/null"), pid)], grace=30)
