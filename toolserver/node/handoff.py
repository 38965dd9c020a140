"""A node's connections, handed to the worker that holds the fewest (`NODE_LISTEN=balanced`, the default).

The supervisor accepts on the node's one listening socket and passes each connection's file descriptor
(SCM_RIGHTS, over a SOCK_SEQPACKET pair per worker) to the live worker with the fewest open connections; a worker
says when one of them closes. Every connection then lands where the others are fewest: 128 sessions' connections
on 16 workers are 8 each, where SO_REUSEPORT's hash of their addresses gave some workers twice the average and left
others idle once they had finished (measured on the 16-core host: 9.9 of 16 cores busy; docs/node.md). A worker adopts
each connection into its own event loop (`loop.connect_accepted_socket`) with the HTTP protocol uvicorn uses, so
requests never pass through the supervisor: it handles a connection once, at its start (an accept and a sendmsg).

Written by hand: no library hands accepted sockets between processes by load; gunicorn and uvicorn share one socket
(the worker that wakes first takes a burst) or rely on SO_REUSEPORT's hash.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("toolserver.node")
ACCEPTS_PER_WAKE = 256  # then the links are read too, so that closes are counted between bursts
# Out of descriptors (or kernel memory), accept() leaves the connection queued and the listening socket readable: a
# dispatcher that tried again at once would spin and log without end. It stops accepting this long (asyncio's
# ACCEPT_RETRY_DELAY is 1 s), while it goes on counting closes, which free descriptors in the workers.
ACCEPT_PAUSE_S = 0.5
_EXHAUSTED = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
READY = b"ready"  # a worker's first message: it takes connections now (a close is told in one byte: how many)


def is_handoff(sock: socket.socket) -> bool:
    """Whether a worker's socket is its link to the supervisor (connections come from it) rather than a listener."""
    return sock.family == socket.AF_UNIX and sock.type == socket.SOCK_SEQPACKET


class Dispatcher:
    """The supervisor's side: the listening socket, a link per worker and each worker's open connections."""

    def __init__(self, listening: socket.socket):
        self.listening = listening
        listening.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(listening, selectors.EVENT_READ, None)
        self.links: dict[int, socket.socket] = {}
        self.open: dict[int, int] = {}  # worker index -> its connections not yet closed
        self.ready: set[int] = set()  # workers whose event loop takes connections
        self.turn = 0
        self.paused_until = 0.0  # accepts stopped until then (out of descriptors); 0: accepting

    def link(self, index: int) -> socket.socket:
        """A new link for worker `index` (before it is forked): returns the worker's end, for the child."""
        self.unlink(index)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        self.links[index], self.open[index] = ours, 0
        self.selector.register(ours, selectors.EVENT_READ, index)
        return theirs

    def unlink(self, index: int) -> None:
        """Worker `index` is gone: nothing more is handed to it (what its link held is closed with it)."""
        ours = self.links.pop(index, None)
        self.open.pop(index, None)
        self.ready.discard(index)
        if ours is not None:
            self.selector.unregister(ours)
            ours.close()

    def parent_ends(self) -> list[socket.socket]:
        """What a forked worker closes: the listening socket and the supervisor's ends of every link."""
        return [self.listening, *self.links.values()]

    def serve(self, timeout: float) -> None:
        """Wait up to `timeout` for connections and closes, and hand out what came."""
        if self.paused_until and time.monotonic() >= self.paused_until:
            self.paused_until = 0.0
            self.selector.register(self.listening, selectors.EVENT_READ, None)
        ready = [key.data for key, _ in self.selector.select(timeout)]
        for index in ready:  # the closes first, so that the connections that came with them are counted right
            if index is not None:
                self._closed(index)
        if None in ready:
            self._accept()

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                conn, _ = self.listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _EXHAUSTED:  # the connection stays queued: take it once descriptors are free
                    log.warning("accept failed: %s; accepting again in %.1f s", exc, ACCEPT_PAUSE_S)
                    self.selector.unregister(self.listening)
                    self.paused_until = time.monotonic() + ACCEPT_PAUSE_S
                else:  # a connection reset before accept: the next one may do
                    log.warning("accept failed: %s", exc)
                return
            with conn:
                self._hand(conn)

    def _hand(self, conn: socket.socket) -> None:
        """Send `conn` to the ready worker with the fewest open connections (ties in turn); one whose link is full
        or gone is passed over. A worker still starting (forked again after a death) is handed none while another
        is ready: it has the fewest, and would hold every new connection until its app is up. With no worker to
        take it, it is closed: the client sees a reset and retries."""
        n = max(1, len(self.links))
        self.turn += 1
        ready = [i for i in self.links if i in self.ready] or list(self.links)  # at the node's start: all queue
        for index in sorted(ready, key=lambda i: (self.open[i], (i - self.turn) % n)):
            try:
                socket.send_fds(self.links[index], [b"c"], [conn.fileno()])
            except (BlockingIOError, InterruptedError):
                continue  # a worker too far behind to read its link
            except OSError:  # its end is closed (it is exiting): the reaper unlinks it
                continue
            self.open[index] += 1
            return
        log.warning("no worker could take a connection; it is closed")

    def _closed(self, index: int) -> None:
        ours = self.links.get(index)
        while ours is not None:
            try:
                message = ours.recv(16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                message = b""
            if not message:  # the worker closed its end (shutting down, or dead): hand it nothing more
                self.unlink(index)
                return
            if message == READY:
                self.ready.add(index)
                continue
            self.open[index] = max(0, self.open[index] - message[0])

    def close(self) -> None:
        for index in list(self.links):
            self.unlink(index)
        self.selector.close()


class Intake:
    """A worker's side: adopt the connections its link brings into this event loop with `protocol()` (the HTTP
    protocol the server would have made for an accepted connection), and tell the supervisor when each closes."""

    def __init__(self, link: socket.socket, protocol: Callable[[], asyncio.Protocol]):
        self.link = link
        self.protocol = protocol
        self.loop: asyncio.AbstractEventLoop | None = None
        self.unsent = 0  # closes not yet told (the link was full)
        self.adopting: set[asyncio.Task[Any]] = set()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.link.setblocking(False)
        loop.add_reader(self.link.fileno(), self._receive)
        with contextlib.suppress(OSError):  # the supervisor is gone: the reader sees the link close
            self.link.send(READY)

    def stop(self) -> None:
        """Take no more connections: the supervisor sees the link close and hands this worker nothing more."""
        if self.loop is not None and self.link.fileno() >= 0:
            self.loop.remove_reader(self.link.fileno())
        self.link.close()

    def _receive(self) -> None:
        assert self.loop is not None
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(self.link, 16, 64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                message, fds = b"", []
            if not message and not fds:  # the supervisor is gone
                self.stop()
                return
            for fd in fds:
                task = self.loop.create_task(self._adopt(socket.socket(fileno=fd)))
                self.adopting.add(task)
                task.add_done_callback(self.adopting.discard)

    async def _adopt(self, conn: socket.socket) -> None:
        assert self.loop is not None
        conn.setblocking(False)
        try:
            await self.loop.connect_accepted_socket(self._counted, sock=conn)
        except Exception as exc:  # a connection reset before it was adopted
            log.debug("a handed connection could not be adopted: %s", exc)
            conn.close()
            self._tell_closed()

    def _counted(self) -> asyncio.Protocol:
        """The HTTP protocol, told to report its connection's close. A WebSocket upgrade hands the connection to a
        new protocol (uvicorn's `ws_protocol_class`, an attribute of each HTTP protocol) and the HTTP one never
        sees the close, so the WebSocket protocol it makes reports it instead."""
        protocol = self._reporting(self.protocol())
        upgrade = getattr(protocol, "ws_protocol_class", None)
        if upgrade is not None:
            protocol.ws_protocol_class = lambda *a, **k: self._reporting(upgrade(*a, **k))  # type: ignore[attr-defined]
        return protocol

    def _reporting(self, protocol: asyncio.Protocol) -> asyncio.Protocol:
        lost = protocol.connection_lost

        def connection_lost(exc: Exception | None) -> None:
            try:
                lost(exc)
            finally:
                self._tell_closed()

        protocol.connection_lost = connection_lost  # type: ignore[method-assign]
        return protocol

    def _tell_closed(self) -> None:
        self.unsent += 1
        with contextlib.suppress(OSError):  # full (told with the next close) or closed (the supervisor is gone)
            self.link.send(bytes([min(255, self.unsent)]))
            self.unsent -= min(255, self.unsent)
