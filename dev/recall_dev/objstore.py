"""A local S3 server: SeaweedFS's `weed mini` as one process on loopback ports.

This is the object store the tests, `make demo` and `recall dev up` run against, in place of
a cloud bucket. It is a real S3 server (SeaweedFS built from its Go module by
`hack/seaweedfs/build.sh`), never a mock: SigV4 authentication, conditional puts, copies,
presigned URLs and error codes are the server's own.

Contract:
- `start()` returns only when a signed ListBuckets answers 200 and the requested buckets
  exist, or raises `ObjectStoreError` with the tail of weed's log; on failure nothing is left
  running. `startup_buckets` are made by weed itself at every start (`weed mini -bucket`, as
  the chart's bundled store makes its bucket), after its S3 port opens: `start()` does not
  wait for them (`has_bucket()` says when they are there).
- Every port weed opens (master, volume, filer, S3, admin; each with its gRPC port: ten TCP
  ports) is set by flag to a distinct loopback port free at start, and every one binds
  127.0.0.1 only. A chosen port another process takes before weed binds it makes `start()`
  begin again on new ports (`PORT_TRIES` times at most); ports `reserve_ports()` chose are
  held until weed starts. The optional parts (WebDAV, the Admin UI, the Iceberg and Lance
  endpoints, the admin's legacy ports, telemetry) are off. Its unix sockets are in the work
  directory, except the five gRPC ones weed names itself
  (/tmp/seaweedfs-<part>-grpc-<port>.sock), which `stop()` removes if weed could not.
- S3 authentication is on: `admin` may do everything; `worker` may read, write and delete
  only keys under `scratch_prefix` (in any bucket), read sources under `media/`, and list
  buckets, nothing else. Wrong or
  unknown keys are refused (403). Both key pairs are random per store. A put to a missing
  bucket fails (no auto-creation), as on AWS, unless `auto_create_buckets`.
- `stop()` sends SIGTERM, then SIGKILL after `grace`; waits; removes the work directory
  unless asked to keep it. It is idempotent. With `die_with_parent`, weed receives SIGKILL
  when the thread that started it dies (PR_SET_PDEATHSIG).
- `kill()` and `restart()` stop weed and start it again on the same ports, data directory
  and identities ("the S3 server killed and restarted"): objects written before are there
  after. Reads work as soon as `restart()` returns; writes stall inside weed until its
  master has warmed up (15 s after it started; `wait_writable()` waits for that).
- `env()` holds the standard variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
  AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP) for a child process, and nothing else.

Not provided: TLS, replication, versioning, bucket policies beyond the two identities.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recall_dev.cluster import PORT_TRIES, free_ports, hold_ports, repo_root
from recall_dev.procs import Proc, spawn, tail, terminate
from recall_dev.s3_admin import S3Admin, S3Error

if TYPE_CHECKING:
    from obstore.store import ClientConfig, S3Store

STATE_FILE = "state.json"
REGION = "us-east-1"
# Every port `weed mini` opens with the options below, by its flag (each was seen listening
# with `ss -ltnp`; the admin's two open even with -admin.ui=false).
PORT_FLAGS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
    "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc",
    "admin.port", "admin.port.grpc",
)  # fmt: skip
# The gRPC sockets weed names itself in /tmp, by the flag whose port is in the name.
GRPC_SOCKETS = {
    "master.port.grpc": "master", "volume.port.grpc": "volume", "filer.port.grpc": "filer",
    "s3.port.grpc": "s3", "admin.port.grpc": "admin",
}  # fmt: skip
# weed mini reads these from its environment: credentials and buckets of its own making.
SCRUBBED_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "S3_BUCKET", "S3_TABLE_BUCKET")


class ObjectStoreError(RuntimeError):
    """The local object store could not be started or reached."""


def _port_taken(message: str) -> bool:
    """Whether weed's failure says one of its ports was taken by another process."""
    return "Port allocation failed" in message or "address already in use" in message


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str

    @classmethod
    def random(cls, name: str) -> Credentials:
        return cls(f"{name}-{secrets.token_hex(6)}", secrets.token_urlsafe(30))


def weed_bin_dir(build: bool = True) -> Path:
    """The directory holding `weed`, building it first when `build` is set.

    `RECALL_SEAWEEDFS_BIN` overrides the location (and disables building).
    """
    override = os.environ.get("RECALL_SEAWEEDFS_BIN")
    if override:
        return Path(override)
    script = repo_root() / "hack" / "seaweedfs" / "build.sh"
    args = [str(script)] if build else [str(script), "--print"]
    out = subprocess.run(args, check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])


@dataclass
class ObjectStore:
    """`weed mini` on loopback, rooted in `workdir`. A context manager, or `start()`/`stop()`."""

    workdir: Path | None = None
    bin_dir: Path | None = None
    buckets: tuple[str, ...] = ()
    startup_buckets: tuple[str, ...] = ()  # made by weed itself at each start (-bucket)
    auto_create_buckets: bool = False  # a put to a missing bucket makes it (not S3's way)
    scratch_prefix: str = "scratch/"
    die_with_parent: bool = True
    keep_workdir: bool = False
    ports: dict[str, int] = field(default_factory=dict)
    admin: Credentials = field(default_factory=lambda: Credentials.random("admin"))
    worker: Credentials = field(default_factory=lambda: Credentials.random("worker"))
    proc: Proc | None = None
    ready_seconds: float = 0.0  # how long the last (re)start took to answer
    _owns_workdir: bool = False
    _held: list[socket.socket] = field(default_factory=list, repr=False)

    # -- public ----------------------------------------------------------------------------

    @property
    def s3_port(self) -> int:
        return self.ports["s3.port"]

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL (path-style: `<endpoint>/<bucket>/<key>`)."""
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def logs_dir(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "logs"

    @property
    def data_dir(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "data"

    def __enter__(self) -> ObjectStore:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reserve_ports(self) -> None:
        """Choose every port now, for clients told the endpoint before weed starts, and hold
        them until `start()` (bound, not listening: a client is refused as by a stopped
        store, and no other process can take them meanwhile)."""
        self.release_ports()
        self._held = hold_ports(len(PORT_FLAGS))
        self.ports = {f: s.getsockname()[1] for f, s in zip(PORT_FLAGS, self._held, strict=True)}

    def release_ports(self) -> None:
        for s in self._held:
            s.close()
        self._held = []

    def start(self, timeout: float = 60.0, progress: Callable[[str], None] | None = None) -> None:
        say = progress or (lambda _msg: None)
        # The binary first: a store that cannot start leaves no directory behind.
        self.bin_dir = self.bin_dir or weed_bin_dir(build=True)
        if not (self.bin_dir / "weed").exists():
            raise ObjectStoreError(
                f"{self.bin_dir / 'weed'} is missing: run hack/seaweedfs/build.sh"
            )
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="recall-objstore-"))
            self._owns_workdir = True
        for d in (self.workdir, self.logs_dir, self.data_dir):
            d.mkdir(parents=True, exist_ok=True)
        unset = [flag for flag in PORT_FLAGS if not self.ports.get(flag)]
        fresh = not any(self.data_dir.iterdir())
        self._write_identities()
        for attempt in range(1, PORT_TRIES + 1):
            self.ports.update(zip(unset, free_ports(len(unset)), strict=True))
            try:
                self._start(timeout, say)
                break
            except ObjectStoreError as e:
                if not (unset and fresh and attempt < PORT_TRIES and _port_taken(str(e))):
                    self.stop(keep_logs=True)
                    raise
                say("a port was taken before weed bound it; starting again on new ports")
                self.kill()
                self.remove_grpc_sockets()
                shutil.rmtree(self.data_dir, ignore_errors=True)  # it knew the old ports
                self.data_dir.mkdir()
            except BaseException:
                self.stop(keep_logs=True)
                raise
        say(f"object store ready in {self.ready_seconds:.1f} s")

    def _start(self, timeout: float, say: Callable[[str], None]) -> None:
        """Start weed on the ports chosen; the caller stops it if this raises."""
        say(f"starting SeaweedFS (weed mini) with S3 on {self.endpoint}")
        self._spawn()
        self.wait_ready(timeout)
        for bucket in self.buckets:
            self.create_bucket(bucket)
        self._write_state()

    def stop(self, keep_logs: bool = False, grace: float = 10.0) -> Path | None:
        """Stop weed (SIGKILL after `grace` s). Returns where the log was kept, if anywhere."""
        self.release_ports()
        if self.proc is not None:
            terminate([self.proc], grace)
            self.proc = None
        self.remove_grpc_sockets()
        kept: Path | None = None
        if self.workdir is not None and self.workdir.exists():
            if keep_logs and self.logs_dir.exists():
                kept = Path(tempfile.mkdtemp(prefix="recall-objstore-logs-"))
                shutil.copytree(self.logs_dir, kept, dirs_exist_ok=True)
            if self._owns_workdir and not self.keep_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
        return kept

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Stop weed now with `sig` (SIGKILL: no goodbye); ports and data stay for `restart()`."""
        if self.proc is None:
            return
        if self.proc.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)
        terminate([self.proc], grace=10.0)
        self.proc = None

    def restart(
        self, *, sig: int = signal.SIGKILL, wait: bool = True, timeout: float = 60.0
    ) -> None:
        """`kill(sig)`, then weed again on the same ports, data and identities; with `wait`,
        returns once it answers. With `die_with_parent`, call it from a thread that lives as
        long as the store (PR_SET_PDEATHSIG is per thread)."""
        self.kill(sig)
        self.remove_grpc_sockets()
        self._spawn()
        self._write_state()
        if wait:
            self.wait_ready(timeout)

    def ready(self) -> bool:
        try:
            self.client().list_buckets()
        except (OSError, S3Error):
            return False
        return True

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Return when a signed ListBuckets answers; `ObjectStoreError` (with the tail of
        weed's log) if weed exited or `timeout` passed."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.proc is None or not self.proc.alive():
                log = self.proc.log if self.proc else self.logs_dir / "weed.log"
                raise ObjectStoreError(f"weed is not running; last lines of {log}:\n{tail(log)}")
            if self.ready():
                self.ready_seconds = time.monotonic() - start
                return
            time.sleep(0.1)
        raise ObjectStoreError(
            f"weed's S3 not ready after {timeout:.0f} s; last lines of its log:\n"
            + tail(self.logs_dir / "weed.log")
        )

    def writable(self) -> bool:
        """False while weed's master warms up after a restart: for 15 s after it starts on a
        data directory that holds volumes (5 s pulses × 3, fixed in SeaweedFS), it assigns no
        file ids, and a PUT waits inside weed (about 11 s after S3 answers) before it is
        stored. Reads are served meanwhile. Asks the master to look up a volume id that does
        not exist: 503 while warming up, 404 after (nothing is created)."""
        url = f"http://127.0.0.1:{self.ports['master.port']}/dir/lookup?volumeId=4294967295"
        try:
            with urllib.request.urlopen(url, timeout=5):
                return True
        except urllib.error.HTTPError as e:
            return e.code != 503
        except OSError:
            return False

    def wait_writable(self, timeout: float = 30.0) -> None:
        """Return when the master assigns file ids again (see `writable`)."""
        deadline = time.monotonic() + timeout
        while not self.writable():
            if time.monotonic() > deadline:
                raise ObjectStoreError(f"weed's master still warming up after {timeout:.0f} s")
            time.sleep(0.2)

    def client(self, credentials: Credentials | None = None, endpoint: str = "") -> S3Admin:
        """Signed raw S3 requests (bucket admin, hand-made headers), as admin by default."""
        creds = credentials or self.admin
        return S3Admin(endpoint or self.endpoint, creds.access_key, creds.secret_key, REGION)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(name)

    def has_bucket(self, name: str) -> bool:
        """Whether bucket `name` exists (a signed HEAD of it answers 200)."""
        try:
            return self.client().request("HEAD", f"/{name}").status == 200
        except OSError:
            return False

    def delete_bucket(self, name: str) -> bool:
        """Delete bucket `name` and every object in it; False if there was no such bucket."""
        return self.client().delete_bucket(name, force=True)

    def env(self, credentials: Credentials | None = None, endpoint: str = "") -> dict[str, str]:
        """The standard S3 variables for a child process (as admin by default; `endpoint`
        overrides the URL, e.g. a fault proxy's)."""
        creds = credentials or self.admin
        return {
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_ACCESS_KEY_ID": creds.access_key,
            "AWS_SECRET_ACCESS_KEY": creds.secret_key,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def s3_store(
        self,
        bucket: str,
        *,
        prefix: str = "",
        credentials: Credentials | None = None,
        endpoint: str = "",
        client_options: ClientConfig | None = None,
        **kwargs: Any,
    ) -> S3Store:
        """An obstore `S3Store` on `bucket` (keyword arguments pass through: `client_options`,
        `retry_config`, config keys)."""
        from obstore.store import S3Store

        creds = credentials or self.admin
        options: ClientConfig = {"allow_http": True}
        options.update(client_options or {})
        return S3Store(
            bucket,
            prefix=prefix or None,
            endpoint=endpoint or self.endpoint,
            access_key_id=creds.access_key,
            secret_access_key=creds.secret_key,
            region=REGION,
            client_options=options,
            **kwargs,
        )

    # -- internals -------------------------------------------------------------------------

    def _args(self) -> list[str]:
        assert self.bin_dir is not None and self.workdir is not None
        return [
            str(self.bin_dir / "weed"),
            "-logtostderr",  # glog's files would go to /tmp
            "mini",
            f"-dir={self.data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
            "-webdav=false",
            "-admin.ui=false",
            "-admin.port.legacy=0",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-filer.localSocket={self.workdir / 'filer.sock'}",
            f"-s3.localSocket={self.workdir / 's3.sock'}",
            f"-s3.config={self.workdir / 's3-identities.json'}",
            f"-s3.autoCreateBucket={str(self.auto_create_buckets).lower()}",
            *([f"-bucket={','.join(self.startup_buckets)}"] if self.startup_buckets else []),
            # One volume per bucket is created on its first write; small volumes and a fixed
            # count keep many short-lived test buckets from running out of them on any disk.
            "-master.volumeSizeLimitMB=64",
            "-volume.max=500",
        ]

    def _spawn(self) -> None:
        assert self.workdir is not None
        self.release_ports()
        env = dict.fromkeys(SCRUBBED_ENV, "")
        self.proc = spawn(
            "weed", self._args(), self.logs_dir, self.workdir, owned=self.die_with_parent, env=env
        )

    def _write_identities(self) -> None:
        assert self.workdir is not None
        scope = f"*/{self.scratch_prefix}*"
        config = {
            "identities": [
                {
                    "name": "admin",
                    "credentials": [asdict_keys(self.admin)],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                },
                {
                    "name": "worker",
                    "credentials": [asdict_keys(self.worker)],
                    # and read the sources under media/ (as a worker needs read on its
                    # source buckets: see the README's bucket policies)
                    "actions": [f"Read:{scope}", f"Write:{scope}", "Read:*/media/*", "List:*"],
                },
            ]
        }
        path = self.workdir / "s3-identities.json"
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)

    def remove_grpc_sockets(self) -> None:
        """Remove weed's /tmp gRPC sockets (it does so itself on a clean exit only)."""
        if self.proc is not None and self.proc.alive():
            return
        for flag, part in GRPC_SOCKETS.items():
            if flag in self.ports:
                Path(f"/tmp/seaweedfs-{part}-grpc-{self.ports[flag]}.sock").unlink(missing_ok=True)

    def _write_state(self) -> None:
        assert self.workdir is not None and self.proc is not None
        state = {
            "endpoint": self.endpoint,
            "bin_dir": str(self.bin_dir),
            "ports": self.ports,
            "buckets": list(self.buckets),
            "scratch_prefix": self.scratch_prefix,
            "admin": asdict(self.admin),
            "worker": asdict(self.worker),
            "pid": self.proc.pid,
        }
        path = self.workdir / STATE_FILE
        path.write_text(json.dumps(state, indent=2))
        path.chmod(0o600)

    @classmethod
    def attach(cls, workdir: Path) -> ObjectStore:
        """A handle on a store started earlier (by `recall dev up`) in `workdir`."""
        path = workdir / STATE_FILE
        if not path.exists():
            raise ObjectStoreError(f"no object store state in {workdir} (is it up?)")
        state = json.loads(path.read_text())
        return cls(
            workdir=workdir,
            bin_dir=Path(state["bin_dir"]),
            buckets=tuple(state["buckets"]),
            scratch_prefix=state["scratch_prefix"],
            die_with_parent=False,
            keep_workdir=True,
            ports={k: int(v) for k, v in state["ports"].items()},
            admin=Credentials(**state["admin"]),
            worker=Credentials(**state["worker"]),
            proc=Proc("weed", None, workdir / "logs" / "weed.log", int(state["pid"])),
        )


def asdict_keys(creds: Credentials) -> dict[str, str]:
    """SeaweedFS's spelling of a key pair in its identities file."""
    return {"accessKey": creds.access_key, "secretKey": creds.secret_key}
