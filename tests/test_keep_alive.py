"""Pooled connections: the server keeps idle connections longer than common client pools (`KEEP_ALIVE_S`), and
the client sends a request again when the pooled connection it went out on was closed before any answer."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.conftest import start_server, stop_server
from toolserver.client import Client
from toolserver.config import Settings

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n"


def _exchange(sock: socket.socket) -> bytes:
    """One request, and its whole response read (headers, then content-length bytes of body)."""
    sock.sendall(HEALTH)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(4096)
    return head


@pytest.mark.slow
def test_the_server_keeps_idle_connections_as_long_as_configured(tmp_path):
    assert Settings().keep_alive_s > 15  # longer than aiohttp's pool (15 s) and httpx's (5 s)
    server = start_server({"TOOLSERVER_KEEP_ALIVE_S": "2", "TOOLSERVER_DATA_DIR": str(tmp_path)})
    try:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            assert _exchange(sock).startswith(b"HTTP/1.1 200")
            time.sleep(1.0)  # idle, under the keep-alive: the same connection still answers
            assert _exchange(sock).startswith(b"HTTP/1.1 200")
            time.sleep(3.0)  # idle past it: the server has closed the connection
            sock.settimeout(2)
            try:
                sock.sendall(HEALTH)
                closed = sock.recv(4096) == b""
            except OSError:
                closed = True
            assert closed
    finally:
        stop_server(server)


def test_the_client_resends_a_request_whose_pooled_connection_was_closed():
    """A server that, like one whose keep-alive just ran out, reads the second request on a connection and closes it
    without an answer: the client sends that request again on a new connection and gets its answer."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    body = b'[{"name": "default"}]'
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    connections: list[int] = []

    def serve() -> None:
        for n in range(2):
            conn, _ = listener.accept()
            connections.append(n)
            with conn:
                conn.recv(65536)
                conn.sendall(answer)
                if n == 0:  # keep-alive: read the next request on this connection, then drop it unanswered
                    conn.recv(65536)
                    continue
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with Client(f"http://127.0.0.1:{port}", retries=2, backoff=0.01) as client:
        assert client.profiles() == [{"name": "default"}]
        assert client.profiles() == [{"name": "default"}]  # the pooled connection was dropped: sent again
    thread.join(5)
    assert connections == [0, 1]
