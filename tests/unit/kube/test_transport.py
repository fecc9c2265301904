"""The HTTP verbs against a real socket (no API server): a connection refused is "not sent",
a watch that hears nothing for `WATCH_READ_SECONDS` ends, and connections use TCP keepalive."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from recall.kube import Unavailable, WatchEvent, http
from recall.kube.config import load_api_client
from recall.kube.http import HttpVerbs
from recall.kube.verbs import JOBS


def api_at(port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> client.ApiClient:
    """An API client as the processes make it, for a server at 127.0.0.1:`port`."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return load_api_client(kubeconfig)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_refused_connection__a_write_is_not_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    verbs = HttpVerbs(api_at(closed_port(), tmp_path, monkeypatch), timeout=5)
    with pytest.raises(Unavailable) as refused:
        verbs.patch(JOBS, "ns", "j", {"status": {"phase": "Queued"}})
    assert refused.value.maybe_applied is False
    assert "cannot connect" in refused.value.message


def test_client__connections_use_tcp_keepalive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = api_at(closed_port(), tmp_path, monkeypatch).configuration.socket_options or []
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in options


class Silent:
    """A server that answers one watch with its headers and one event, then says nothing."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.recv(65536)
            line = b'{"type": "ADDED", "object": {"metadata": {"resourceVersion": "7"}}}\n'
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + f"{len(line):x}\r\n".encode()
                + line
                + b"\r\n"
            )
            self.done.wait(30)


def test_silent_watch__ends_after_the_read_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "WATCH_READ_SECONDS", 0.5, raising=False)
    server = Silent()
    verbs = HttpVerbs(api_at(server.port, tmp_path, monkeypatch), timeout=5)
    events: list[WatchEvent] = []
    ended = threading.Event()
    failed: list[BaseException] = []

    def watch() -> None:
        stream: Iterator[WatchEvent] = verbs.watch(JOBS, "ns", "1")
        try:
            events.extend(stream)
        except BaseException as e:  # reported by the assertions below
            failed.append(e)
        ended.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        assert ended.wait(10), "a silent watch was not noticed"
    finally:
        server.done.set()
    assert not failed  # an ordinary end: the informer watches again from the last version
    assert [e.object["metadata"]["resourceVersion"] for e in events] == ["7"]
