"""Real PostgreSQL and Redis servers, and the worker processes, started and always stopped.

Contract:
- `Children` owns every process the comparison starts. Each runs in its own session (so a
  Ctrl-C on the terminal reaches only the benchmark, which then stops them) and with a
  parent-death signal (so they die with the benchmark even if it is killed with SIGKILL).
  `stop_all()` ends every one, frozen (SIGSTOP) ones included, and their process groups.
- `postgres(children, workdir)` and `redis(children, workdir)` are context managers: they
  start a server on a free loopback port with its files under `workdir`, wait until it
  answers, yield its address, and stop it on the way out, whatever happened inside.
- Nothing listens on anything but 127.0.0.1. Durability is off on both servers (no fsync,
  no snapshots), as it is for the etcd of recall's own benchmarks, so that all three
  measure their protocol rather than this machine's disk.

Not guaranteed: a port picked free can be taken by someone else before the server binds it;
the server then fails to start and the benchmark says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PG_BIN = Path(os.environ.get("RECALL_BENCH_PG_BIN", "/usr/lib/postgresql/15/bin"))
LOOPBACK = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


class ServerError(RuntimeError):
    """A server could not be started or did not answer in time."""


def free_port() -> int:
    """A TCP port on the loopback interface that nobody listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def python_env() -> dict[str, str]:
    """This environment, with the repository importable (workers run `python -m bench...`)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: ask the kernel to SIGKILL it when the
    # benchmark process goes away, however that happens.
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Children:
    """The processes this benchmark started, each the leader of its own process group."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        argv: Sequence[str],
        *,
        log: Path,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start `argv` with stdout and stderr appended to `log`."""
        with log.open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                user=user,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self._procs.append(proc)
        return proc

    def stop(
        self, proc: subprocess.Popen[bytes], *, sig: int = signal.SIGTERM, grace: float = 5.0
    ) -> None:
        """Stop one process: `sig` to it, then SIGKILL to its group after `grace` seconds."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)  # a frozen process cannot act on SIGTERM
                os.kill(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the leader's group: any stray descendants
        if proc.poll() is None:
            proc.kill()
            proc.wait(5.0)
        if proc in self._procs:
            self._procs.remove(proc)

    def stop_all(self, *, grace: float = 5.0) -> None:
        """Stop every process still owned, newest first (workers before their servers)."""
        for proc in reversed(list(self._procs)):
            self.stop(proc, grace=grace)


@dataclass(frozen=True)
class Postgres:
    host: str
    port: int
    user: str
    version: str

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname=postgres"


@dataclass(frozen=True)
class Redis:
    host: str
    port: int
    version: str

    def url(self, db: int) -> str:
        return f"redis://{self.host}:{self.port}/{db}"


def _run_as(user: str | None) -> str | None:
    """initdb and postgres refuse to run as root: as root, run them as the `postgres` user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(user or "postgres")
    except KeyError as exc:
        raise ServerError(
            "running as root and there is no 'postgres' user to run PostgreSQL"
        ) from exc
    return user or "postgres"


def _wait(
    check: Callable[[], None], what: str, timeout: float, proc: subprocess.Popen[bytes]
) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"{what} exited with {proc.returncode} while starting")
        try:
            check()
            return
        except Exception as exc:
            last = exc
            time.sleep(0.1)
    raise ServerError(f"{what} did not answer within {timeout:.0f} s: {last}")


@contextlib.contextmanager
def postgres(children: Children, workdir: Path, *, timeout: float = 60.0) -> Iterator[Postgres]:
    """A PostgreSQL 15 cluster made by initdb under `workdir`, serving 127.0.0.1 only."""
    import psycopg

    for tool in ("initdb", "postgres"):
        if not (PG_BIN / tool).exists():
            raise ServerError(f"{PG_BIN / tool} not found (Debian package postgresql-15)")
    user = _run_as(None)
    home = workdir / "postgres"
    data, sockets = home / "data", home / "sockets"
    for path in (home, sockets):
        path.mkdir(parents=True)
    if user is not None:
        account = pwd.getpwnam(user)
        workdir.chmod(0o711)  # let the postgres user reach its own directory
        for path in (home, sockets):
            os.chown(path, account.pw_uid, account.pw_gid)
    log = home / "server.log"
    if user is not None:
        log.touch()
        os.chown(log, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
    initdb = subprocess.run(
        [
            str(PG_BIN / "initdb"),
            "--pgdata", str(data),
            "--username", "postgres",
            "--auth", "trust",
            "--encoding", "UTF8",
            "--no-sync",
            "--no-instructions",
        ],
        user=user,
        capture_output=True,
        timeout=timeout,
        check=False,
    )  # fmt: skip
    if initdb.returncode != 0:
        raise ServerError(f"initdb failed: {initdb.stderr.decode(errors='replace')[-2000:]}")
    port = free_port()
    proc = children.start(
        [
            str(PG_BIN / "postgres"),
            "-D", str(data),
            "-h", LOOPBACK,
            "-p", str(port),
            "-k", str(sockets),
            "-c", "fsync=off",
            "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off",
            "-c", "max_connections=300",
        ],
        log=log,
        user=user,
    )  # fmt: skip
    server = Postgres(LOOPBACK, port, "postgres", "")
    try:

        def answer() -> None:
            with psycopg.connect(server.dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")

        _wait(answer, "postgres", timeout, proc)
        with psycopg.connect(server.dsn) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        version = str(row[0]).split()[0] if row else "?"
        yield Postgres(LOOPBACK, port, "postgres", version)
    finally:
        # SIGINT is PostgreSQL's "fast" shutdown: roll back, close connections, exit.
        children.stop(proc, sig=signal.SIGINT, grace=15.0)


@contextlib.contextmanager
def redis(children: Children, workdir: Path, *, timeout: float = 30.0) -> Iterator[Redis]:
    """A redis-server with its directory under `workdir`, serving 127.0.0.1 only."""
    import redis as redis_client

    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerError("redis-server not found (Debian package redis-server)")
    home = workdir / "redis"
    home.mkdir(parents=True)
    port = free_port()
    proc = children.start(
        [
            binary,
            "--bind", LOOPBACK,
            "--port", str(port),
            "--dir", str(home),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--protected-mode", "yes",
        ],
        log=home / "server.log",
    )  # fmt: skip
    try:

        def answer() -> None:
            with redis_client.Redis(host=LOOPBACK, port=port, socket_timeout=2) as client:
                client.ping()

        _wait(answer, "redis-server", timeout, proc)
        with redis_client.Redis(host=LOOPBACK, port=port) as client:
            info = client.info("server")
        yield Redis(LOOPBACK, port, str(info.get("redis_version", "?")))
    finally:
        children.stop(proc, sig=signal.SIGTERM, grace=10.0)
