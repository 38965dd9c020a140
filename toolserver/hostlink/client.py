"""The worker's side of the node's model hosts: `HostTransport` (a `Transport`) over a `HostPool` of `HostLink`s.

Each call goes whole (every request of a `call_many`, so that they can share a batch) to one host: the one this
process has the fewest calls of that model outstanding on, ties taken in turn. Concentration is what batching
wants, and a host is where it happens: every worker's calls for one device meet in that host's `Batcher`, so the
batches are as large as on one process; across devices, spreading is what uses them all.

A host that is down is tried again after `RETRY_S`, doubled while it stays down up to `RETRY_MAX_S` (it is being
restarted); a call waits for some host to answer until its own timeout (or `wait_s` for a call without one), then
fails with `ModelHostTimeout` saying why each host did not answer. A call in flight on a host that goes away fails
at once with `ModelHostLost`; it is not retried elsewhere, so that no call runs twice unseen.

A node that parks its hosts until the first model call (`MODEL_HOSTS_START=first_call`): a call that finds no host
asks the supervisor for them (`wire.WANTED`) and waits for them as for a restart; a description meanwhile comes from
what each host wrote at its start, so that tools describe the same models before and after.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolserver.batching import Transport
from toolserver.config import Settings
from toolserver.hostlink import wire
from toolserver.hostlink.wire import ModelHostError, ModelHostFailed, ModelHostLost, ModelHostTimeout

MODEL_NAMES = ("smfanet", "clip", "text")
RETRY_S = 0.2  # a host that failed to connect is not tried again sooner; doubled on each failure in a row,
RETRY_MAX_S = 2.0  # up to this (a hung host costs a call its connect timeout at most this often)


@dataclass(eq=False)
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    reply: tuple[str, Any] = ("lost", "")


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    pending: dict[int, _Pending] = field(default_factory=dict)
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    closed: str = ""  # why, once closed


class HostLink:
    """One model host as this process sees it: a connection (made on demand, made again after a restart), the
    calls waiting on it, and each model's calls outstanding and served."""

    def __init__(self, address: str, connect_timeout_s: float = 2.0):
        self.address = address
        self.connect_timeout_s = connect_timeout_s
        self.hello: dict[str, Any] = {}
        self.outstanding: collections.Counter[str] = collections.Counter()
        self.served: collections.Counter[str] = collections.Counter()
        self.down_until = 0.0
        self.last_error = ""
        self.failures = 0  # connection attempts failed in a row
        self._conn: _Conn | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count()

    @property
    def label(self) -> str:
        """Which host: its index and device (`0/cuda:0`), or its address before it first answered."""
        return f"{self.hello['index']}/{self.hello['device']}" if self.hello else self.address

    def usable(self, now: float) -> bool:
        return self._conn is not None or now >= self.down_until

    def connected(self, deadline: float) -> _Conn:
        with self._lock:
            if self._conn is not None:
                return self._conn
            now = time.monotonic()
            if now < self.down_until:
                raise ModelHostError(self.last_error)
            try:
                sock, hello = wire.connect(self.address, wire.read_key(self.address),
                                           max(0.01, min(self.connect_timeout_s, deadline - now)))
            except (OSError, EOFError, ModelHostError) as exc:
                self.down_until = time.monotonic() + min(RETRY_MAX_S, RETRY_S * 2 ** self.failures)
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                raise ModelHostError(self.last_error) from exc
            self.hello, self.last_error, self.failures = hello, "", 0
            conn = self._conn = _Conn(sock)
        threading.Thread(target=self._read, args=(conn,), name=f"toolserver-modelhost-{self.address}",
                         daemon=True).start()
        return conn

    def _read(self, conn: _Conn) -> None:
        why = "the connection was closed"
        try:
            while True:
                cid, kind, value = wire.recv(conn.sock)
                with self._lock:
                    pending = conn.pending.pop(cid, None)
                if pending is not None:
                    pending.reply = (kind, value)
                    pending.done.set()
        except BaseException as exc:  # EOF, reset, or a frame it could not read: the connection is done
            why = f"{type(exc).__name__}: {exc}"
        finally:
            self._drop(conn, why)

    def _drop(self, conn: _Conn, why: str) -> None:
        with self._lock:
            if self._conn is conn:
                self._conn = None
            conn.closed = conn.closed or why
            lost, conn.pending = list(conn.pending.values()), {}
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_RDWR)
        conn.sock.close()
        for pending in lost:
            pending.reply = ("lost", why)
            pending.done.set()

    def request(self, op: str, model: str, payload: Any, timeout_s: float | None, conn: _Conn,
                deadline: float | None) -> Any:
        """Send one request on `conn` and wait for its answer until `deadline` (None: until the host answers or
        goes away)."""
        pending = _Pending()
        cid = next(self._ids)
        with self._lock:
            if conn.closed:
                raise ModelHostLost(f"model host {self.label} went away: {conn.closed}")
            conn.pending[cid] = pending
        try:
            with conn.send_lock:
                wire.send(conn.sock, (cid, op, model, payload, timeout_s))
        except OSError as exc:
            self._drop(conn, f"{type(exc).__name__}: {exc}")
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not pending.done.wait(left):
            with self._lock:
                conn.pending.pop(cid, None)
            raise ModelHostTimeout(f"model host {self.label} did not answer {op} of {model} in time")
        kind, value = pending.reply
        if kind == "ok":
            return value
        if kind == "lost":
            raise ModelHostLost(f"model host {self.label} went away during the call: {value}")
        if kind == "timeout":
            raise ModelHostTimeout(f"model host {self.label}: {value}")
        raise ModelHostFailed(f"model host {self.label}: {value}")

    def summary(self, model: str) -> dict[str, Any]:
        return {"host": self.label, "address": self.address, "up": self._conn is not None,
                "pid": self.hello.get("pid"), "outstanding": self.outstanding[model], "served": self.served[model],
                **({"error": self.last_error} if self.last_error else {})}

    def close(self) -> None:
        conn = self._conn
        if conn is not None:
            self._drop(conn, "closed by this process")


class HostPool:
    """The node's model hosts, shared by the transports of one process."""

    def __init__(self, addresses: list[str], wait_s: float = 30.0, connect_timeout_s: float = 2.0):
        if not addresses:
            raise ValueError("no model host addresses given")
        self.links = [HostLink(a, connect_timeout_s) for a in addresses]
        self.directory = Path(addresses[0]).parent  # the runtime directory all of a node's hosts share
        self.wait_s = wait_s
        self.on_served: Callable[[str, str], None] | None = None  # (model, host label), once per answered call
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def pick(self, model: str, deadline: float) -> tuple[HostLink, _Conn]:
        """The host this call goes to (see the module's docstring), connected and its call counted as outstanding;
        ModelHostTimeout at `deadline`."""
        asked = False
        while True:
            now = time.monotonic()
            with self._lock:
                turn = next(self._turn) % len(self.links)
                ring = self.links[turn:] + self.links[:turn]
                order = sorted((link for link in ring if link.usable(now)), key=lambda lk: lk.outstanding[model])
            for link in order:
                try:
                    conn = link.connected(deadline)
                except ModelHostError:
                    continue
                with self._lock:
                    link.outstanding[model] += 1  # counted before the next call picks (the caller uncounts it)
                return link, conn
            asked = asked or self.ask_for_hosts()
            if time.monotonic() >= deadline:
                why = "; ".join(f"{link.address}: {link.last_error or 'busy'}" for link in self.links)
                raise ModelHostTimeout(f"no model host answered in time ({why}{', parked' if self.parked() else ''})")
            soonest = min(link.down_until for link in self.links)
            time.sleep(max(0.01, min(soonest - time.monotonic(), deadline - time.monotonic(), RETRY_S)))

    def call(self, op: str, model: str, payload: Any, timeout_s: float | None) -> Any:
        started = time.monotonic()
        deadline = None if timeout_s is None else started + timeout_s
        link, conn = self.pick(model, started + (self.wait_s if timeout_s is None else timeout_s))
        try:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            value = link.request(op, model, payload, left, conn, deadline)
        finally:
            with self._lock:
                link.outstanding[model] -= 1
        with self._lock:
            link.served[model] += 1
        if self.on_served is not None:
            self.on_served(model, link.label)
        return value

    def parked(self) -> bool:
        """Whether the node's hosts are stopped until a model call (`MODEL_HOSTS_START=first_call`)."""
        return (self.directory / wire.PARKED).exists()

    def ask_for_hosts(self) -> bool:
        """Ask the supervisor to start the node's parked hosts; whether they were parked (and so asked for)."""
        if not self.parked():
            return False
        with contextlib.suppress(OSError):
            (self.directory / wire.WANTED).touch()
        return True

    def wake(self, deadline: float) -> None:
        """Every host started, if they were parked (ModelHostTimeout at `deadline`). Asks once, then waits for the
        supervisor to take the `parked` mark away."""
        if not self.ask_for_hosts():
            return
        while self.parked():
            if time.monotonic() >= deadline:
                raise ModelHostTimeout("the node's model hosts did not start in time")
            time.sleep(0.05)

    def described(self, model: str) -> list[dict[str, Any]] | None:
        """What each host wrote that `model` serves, at its last start; None if one has not."""
        infos = [wire.read_described(link.address) for link in self.links]
        if any(info is None or model not in info for info in infos):
            return None
        return [info[model] for info in infos if info is not None]

    def on_each(self, op: str, model: str, connect_s: float, answer_s: float | None) -> list[tuple[HostLink, Any]]:
        """`op` asked of every host in turn: each host's answer, or the error it gave."""
        answers: list[tuple[HostLink, Any]] = []
        for link in self.links:
            started = time.monotonic()
            conn_by, answer_by = started + connect_s, None if answer_s is None else started + answer_s
            try:
                answers.append((link, link.request(op, model, None, None, link.connected(conn_by), answer_by)))
            except (ModelHostError, ModelHostFailed) as exc:
                answers.append((link, exc))
        return answers

    def close(self) -> None:
        for link in self.links:
            link.close()


class HostTransport:
    """One model (`smfanet`, `clip`, `text`) on the node's model hosts; the `Transport` its front holds."""

    def __init__(self, pool: HostPool, model: str):
        self.pool = pool
        self.model = model
        self.where = f"model hosts ({len(pool.links)} on this node)"

    def call_many(self, requests: list[Any], timeout_s: float | None = None) -> list[Any]:
        return list(self.pool.call("call", self.model, list(requests), timeout_s))

    def describe(self) -> dict[str, Any]:
        """What the first host that answers serves, with every host's state under `status.hosts`; while the hosts
        are parked, what they wrote at their start (nothing is started to describe a model)."""
        described = self.pool.described(self.model) if self.pool.parked() else None
        if described:
            info = dict(described[0])
            # the pid its host had when it wrote this: no process now (the per-host entries say `pid: None`)
            status = {k: v for k, v in info["status"].items() if k != "pid"}
            info["status"] = {**status, "parked": True,
                              "hosts": [{**link.summary(self.model), "host": d["status"].get("host", link.label),
                                         "parked": True} for link, d in zip(self.pool.links, described, strict=True)]}
            return info
        answers = self.pool.on_each("describe", self.model, 2.0, self.pool.wait_s)
        infos = [value for _link, value in answers if isinstance(value, dict)]
        if not infos:
            raise ModelHostError("no model host answered: " + "; ".join(
                f"{link.address}: {value}" for link, value in answers))
        info = dict(infos[0])
        info["status"] = {**info["status"], "hosts": [link.summary(self.model) for link, _ in answers]}
        return info

    def warm(self) -> None:
        """Load the model on every host (each device holds its own copy), starting them if they are parked."""
        self.pool.wake(time.monotonic() + self.pool.wait_s)
        for link, value in self.pool.on_each("warm", self.model, self.pool.wait_s, None):
            if isinstance(value, Exception):
                raise ModelHostError(f"model host {link.label} could not load {self.model}: {value}") from value

    def close(self) -> None:
        """The hosts outlive this process; its connections close with it (or with `HostPool.close`)."""


def node_transports(settings: Settings, addresses: list[str] | None = None,
                    names: tuple[str, ...] = MODEL_NAMES) -> dict[str, Transport]:
    """The transports `Core(settings, transports)` takes in a worker process: every model on the node's model hosts
    (`addresses`, by default `settings.model_hosts`), one shared pool of connections."""
    addresses = list(addresses if addresses is not None else settings.model_host_addresses())
    pool = HostPool(addresses, wait_s=settings.model_host_wait_s)
    return {name: HostTransport(pool, name) for name in names}
