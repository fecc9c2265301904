"""A local Kubernetes control plane: etcd, kube-apiserver and kube-controller-manager as processes.

This is what the tests, `make demo` and `recall dev up` run against, in place of a cluster.
It is the real API server (the binaries are built from Go modules by
`hack/k8s-tools/build.sh`), so resourceVersion conflicts, the status subresource, CRD
validation, RBAC, TokenRequest and watches behave exactly as in a cluster.

Contract:
- `start()` returns only when `/readyz` answers ok, or raises `ControlPlaneError` with the tail
  of the failing server's log; on failure nothing is left running.
- `stop()` terminates the processes (SIGTERM, then SIGKILL after a grace period), waits for
  them, and removes the work directory unless asked to keep it. It is idempotent.
- Processes started with `die_with_parent=True` receive SIGKILL when the starting process
  dies, so an interrupted test run leaves no orphans (Linux `PR_SET_PDEATHSIG`).
- Ports are free loopback ports chosen at start; nothing listens beyond 127.0.0.1.

Not provided here: a scheduler and kubelets (pods run on kind: recall_dev.kind), and the
controller manager runs only the garbage collector, namespace, service-account and
ClusterRole aggregation controllers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from recall_dev.pki import Pki, kubeconfig_dict, write_pki
from recall_dev.procs import Proc, spawn, tail, terminate

STATE_FILE = "state.json"
KUBECONFIG_FILE = "kubeconfig"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# The API server's Go garbage collector: at the default (GOGC=100) marking took about 30 % of
# its CPU while simulated workers drained a big Batch on two cores (a CPU profile from
# /debug/pprof). Collecting at 4x the live heap, with a soft ceiling, spends memory this
# throwaway control plane has instead.
API_SERVER_GC = {"GOGC": "400", "GOMEMLIMIT": "4GiB"}


class ControlPlaneError(RuntimeError):
    """The local control plane could not be started or reached."""


def repo_root() -> Path:
    """The checkout this package runs from (`RECALL_REPO` overrides): dev tools need its
    `hack/` scripts and `crds/`, which no installed wheel carries."""
    override = os.environ.get("RECALL_REPO")
    root = Path(override) if override else Path(__file__).resolve().parents[2]
    if not (root / "hack" / "k8s-tools" / "build.sh").exists():
        raise ControlPlaneError(
            f"{root} is not a recall checkout (no hack/k8s-tools/build.sh); "
            "run from a clone or set RECALL_REPO"
        )
    return root


def tools_bin_dir(build: bool = True, *, control_plane: bool = False) -> Path:
    """The directory holding the Kubernetes binaries, building them first when `build` is set
    (with `control_plane`, only what a local control plane runs: etcd, kube-apiserver and
    kubectl; the controller manager is started when it was built).

    `RECALL_K8S_BIN` overrides the location (and disables building).
    """
    override = os.environ.get("RECALL_K8S_BIN")
    if override:
        return Path(override)
    script = repo_root() / "hack" / "k8s-tools" / "build.sh"
    flag = "--control-plane" if control_plane else None
    args = [str(script)] if build else [str(script), "--print"]
    if build and flag:
        args.append(flag)
    out = subprocess.run(args, check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports on 127.0.0.1 that were free a moment ago (each held until all
    are chosen, so the system cannot hand the same one out twice)."""
    held = hold_ports(n)
    try:
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


def hold_ports(n: int) -> list[socket.socket]:
    """`n` sockets bound to distinct free ports on 127.0.0.1 and not listening: while they are
    open no other process can bind or connect from those ports, and a client is refused there
    as where no server runs. Close one just before its server binds the port."""
    held: list[socket.socket] = []
    try:
        for _ in range(n):
            held.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            held[-1].bind(("127.0.0.1", 0))
    except BaseException:
        for s in held:
            s.close()
        raise
    return held


# A port chosen free can be taken by another process before ours binds it: start again on
# new ports, this many times at most.
PORT_TRIES = 3


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager) on loopback, rooted in `workdir`.

    Use as a context manager, or call `start()` / `stop()`.
    """

    workdir: Path | None = None
    bin_dir: Path | None = None
    controller_manager: bool = True
    die_with_parent: bool = True
    keep_workdir: bool = False
    etcd_port: int = 0
    etcd_peer_port: int = 0
    apiserver_port: int = 0
    # More kube-apiserver flags (for example lower --max-requests-inflight, so that API
    # Priority and Fairness, which is on as in any cluster, turns a flood away sooner).
    apiserver_args: list[str] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    _owns_workdir: bool = False

    # -- public ----------------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        assert self.workdir is not None
        return self.workdir / KUBECONFIG_FILE

    @property
    def pki(self) -> Pki:
        assert self.workdir is not None
        d = self.workdir / "pki"
        return Pki(
            d / "ca.crt",
            d / "apiserver.crt",
            d / "apiserver.key",
            d / "admin.crt",
            d / "admin.key",
            d / "sa.key",
            d / "sa.pub",
        )

    @property
    def logs_dir(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "logs"

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 120.0, progress: Callable[[str], None] | None = None) -> None:
        say = progress or (lambda _msg: None)
        # The binaries first: a control plane that cannot start leaves no directory behind.
        bin_dir = self.bin_dir or tools_bin_dir(build=True, control_plane=True)
        self.bin_dir = bin_dir
        for tool in ("etcd", "kube-apiserver"):
            if not (bin_dir / tool).exists():
                raise ControlPlaneError(f"{bin_dir / tool} is missing: run hack/k8s-tools/build.sh")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="recall-dev-"))
            self._owns_workdir = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        pki = write_pki(self.workdir / "pki")
        chosen = not (self.etcd_port or self.etcd_peer_port or self.apiserver_port)
        for attempt in range(1, PORT_TRIES + 1):
            if chosen:
                self.etcd_port, self.etcd_peer_port, self.apiserver_port = free_ports(3)
            try:
                self._start(bin_dir, pki, timeout, say)
                return
            except ControlPlaneError as e:
                if not (chosen and attempt < PORT_TRIES and "address already in use" in str(e)):
                    self.stop(keep_logs=True)
                    raise
                say("a port was taken before it was bound; starting again on new ports")
                terminate(list(reversed(self.procs)), 3.0)
                self.procs.clear()
                shutil.rmtree(self.workdir / "etcd", ignore_errors=True)  # bootstrapped on the old
            except BaseException:
                self.stop(keep_logs=True)
                raise

    def _start(self, bin_dir: Path, pki: Pki, timeout: float, say: Callable[[str], None]) -> None:
        """Start the processes on the ports chosen; the caller stops them if this raises."""
        say(f"starting etcd on 127.0.0.1:{self.etcd_port}")
        self._spawn("etcd", self._etcd_args(bin_dir))
        say(f"starting kube-apiserver on {self.server}")
        self._spawn("kube-apiserver", self._apiserver_args(bin_dir, pki))
        self._write_kubeconfig(pki)
        self._wait_ready(timeout)
        if self.controller_manager and (bin_dir / "kube-controller-manager").exists():
            say("starting kube-controller-manager")
            self._spawn("kube-controller-manager", self._kcm_args(bin_dir, pki))
        self._write_state()
        say("control plane ready")

    def stop(self, keep_logs: bool = False, grace: float = 3.0) -> Path | None:
        """Stop every process (SIGKILL after `grace` s: the data is throwaway). Returns the
        directory the logs were kept in, if any."""
        # The API server first, so it does not log etcd's disappearance at length.
        terminate(list(reversed(self.procs)), grace)
        self.procs.clear()
        kept: Path | None = None
        if self.workdir is not None and self.workdir.exists():
            if keep_logs and self.logs_dir.exists():
                kept = Path(tempfile.mkdtemp(prefix="recall-dev-logs-"))
                shutil.copytree(self.logs_dir, kept, dirs_exist_ok=True)
            if self._owns_workdir and not self.keep_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
        return kept

    def ready(self) -> bool:
        try:
            return self.get_raw("/readyz") == "ok"
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    def restart(
        self,
        name: str,
        *,
        sig: int = signal.SIGKILL,
        wait: bool = True,
        timeout: float = 120.0,
    ) -> None:
        """Stop one server process (`etcd`, `kube-apiserver`, `kube-controller-manager`) with
        `sig` and start it again on the same ports, data directory and certificates.

        With `wait`, returns when `/readyz` answers ok again (see `wait_ready`). Clients keep
        their kubeconfig: nothing they know changes. With `die_with_parent`, the kernel kills a
        server when the *thread* that started it ends (PR_SET_PDEATHSIG is per thread): call
        this from a thread that lives as long as the control plane.
        """
        index = next((i for i, p in enumerate(self.procs) if p.name == name), None)
        if index is None or self.bin_dir is None:
            raise ControlPlaneError(f"no {name} process in this control plane")
        old = self.procs[index]
        if old.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(old.popen.pid if old.popen else old.pid, sig)
        terminate([old], grace=10.0)
        bin_dir = self.bin_dir
        args = {
            "etcd": lambda: self._etcd_args(bin_dir),
            "kube-apiserver": lambda: self._apiserver_args(bin_dir, self.pki),
            "kube-controller-manager": lambda: self._kcm_args(bin_dir, self.pki),
        }[name]()
        self._spawn(name, args)
        self.procs[index] = self.procs.pop()  # in the old one's place: the stop order holds
        self._write_state()
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Return when `/readyz` answers ok; `ControlPlaneError` (with the tail of the failing
        server's log) if a server exited or `timeout` passed."""
        self._wait_ready(timeout)

    def get_raw(self, path: str, timeout: float = 5.0) -> str:
        """GET a path on the API server as the admin (like `kubectl get --raw`)."""
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        ctx.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        with urllib.request.urlopen(self.server + path, context=ctx, timeout=timeout) as resp:
            body: bytes = resp.read()
            return body.decode()

    def env(self) -> dict[str, str]:
        """Environment for a child process that should talk to this control plane."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        if self.bin_dir:
            env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    # -- internals -------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> None:
        env = API_SERVER_GC if name == "kube-apiserver" else None
        self.procs.append(
            spawn(name, args, self.logs_dir, self.workdir, owned=self.die_with_parent, env=env)
        )

    def _etcd_args(self, bin_dir: Path) -> list[str]:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        assert self.workdir is not None
        return [
            str(bin_dir / "etcd"),
            "--name=default",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--initial-cluster-state=new",
            # A throwaway store: skipping fsync makes every write ~10x cheaper on a shared disk.
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def _apiserver_args(self, bin_dir: Path, pki: Pki) -> list[str]:
        assert self.workdir is not None
        return [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--v=1",
            *self.apiserver_args,
        ]

    def _kcm_args(self, bin_dir: Path, pki: Pki) -> list[str]:
        return [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--controllers=garbagecollector,namespace,serviceaccount,clusterrole-aggregation",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={self.workdir}/kcm-certs",
            f"--root-ca-file={pki.ca_cert}",
            f"--service-account-private-key-file={pki.sa_key}",
            "--use-service-account-credentials=false",
            "--v=1",
        ]

    def _write_kubeconfig(self, pki: Pki) -> None:
        config = kubeconfig_dict(self.server, pki.ca_cert, cert=pki.admin_cert, key=pki.admin_key)
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if not p.alive():
                    raise ControlPlaneError(
                        f"{p.name} exited during start-up; last lines of {p.log}:\n{tail(p.log)}"
                    )
            if self.ready():
                return
            time.sleep(0.2)
        raise ControlPlaneError(
            f"kube-apiserver not ready after {timeout:.0f} s; last lines of its log:\n"
            + tail(self.logs_dir / "kube-apiserver.log")
        )

    def _write_state(self) -> None:
        assert self.workdir is not None
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "bin_dir": str(self.bin_dir),
            "processes": {p.name: p.pid for p in self.procs},
        }
        (self.workdir / STATE_FILE).write_text(json.dumps(state, indent=2))

    @classmethod
    def attach(cls, workdir: Path) -> ControlPlane:
        """A handle on a control plane started earlier (by `recall dev up`) in `workdir`."""
        state_path = workdir / STATE_FILE
        if not state_path.exists():
            raise ControlPlaneError(f"no control plane state in {workdir} (is it up?)")
        state = json.loads(state_path.read_text())
        cp = cls(workdir=workdir, bin_dir=Path(state["bin_dir"]), die_with_parent=False)
        cp.apiserver_port = int(state["server"].rsplit(":", 1)[1])
        cp.procs = [
            Proc(name, None, workdir / "logs" / f"{name}.log", int(pid))
            for name, pid in state["processes"].items()
        ]
        return cp


# --- `recall dev up|down|status` ----------------------------------------------------------


def dev_up(workdir: Path, progress: Callable[[str], None]) -> ControlPlane:
    """Start a detached control plane in `workdir`, or return the one already running there."""
    if (workdir / STATE_FILE).exists():
        existing = ControlPlane.attach(workdir)
        if existing.ready():
            return existing
        dev_down(workdir)
    if workdir.exists():
        shutil.rmtree(workdir)
    cp = ControlPlane(workdir=workdir, die_with_parent=False, keep_workdir=True)
    cp.start(progress=progress)
    return cp


def dev_down(workdir: Path) -> bool:
    """Stop the control plane in `workdir` and remove the directory. False if none was there."""
    if not (workdir / STATE_FILE).exists():
        existed = workdir.exists()
        shutil.rmtree(workdir, ignore_errors=True)
        return existed
    cp = ControlPlane.attach(workdir)
    terminate(list(reversed(cp.procs)), grace=3.0)
    shutil.rmtree(workdir, ignore_errors=True)
    return True


def dev_status(workdir: Path) -> dict[str, object]:
    """What runs in `workdir`: server, kubeconfig, readiness and each process's liveness."""
    cp = ControlPlane.attach(workdir)
    return {
        "server": cp.server,
        "kubeconfig": str(cp.kubeconfig),
        "ready": cp.ready(),
        "processes": {p.name: {"pid": p.pid, "alive": p.alive()} for p in cp.procs},
    }
