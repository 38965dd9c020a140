"""ASGI middleware of the HTTP adapter: body limits, timing, request ids with an access log, the drain gate of a
graceful shutdown, and a node worker's trim after large requests. Pure ASGI (no BaseHTTPMiddleware), so streamed
bodies stay streamed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from toolserver.allocator import give_back_freed_memory
from toolserver.logs import new_request_id, request_id

access_log = logging.getLogger("toolserver.access")
TRIM_INTERVAL_S = 0.5  # a node worker's trims after large requests, at most one this often (GiveBackAfterLarge)


class BodyLimit:
    """Refuse request bodies over `max_bytes` with 413, whether or not Content-Length is given."""

    class _TooLarge(Exception):
        pass

    def __init__(self, app: Any, max_bytes: int, overrides: dict[str, int] | None = None):
        self.app = app
        self.max_bytes = max_bytes
        self.overrides = overrides or {}  # exact paths with their own limit (document uploads)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.overrides.get(scope.get("path", ""), self.max_bytes)
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await self._reject(send, limit)
                return
        received = 0
        started = False

        async def limited_receive() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyLimit._TooLarge
            return message

        async def tracking_send(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyLimit._TooLarge:
            if not started:
                await self._reject(send, limit)

    async def _reject(self, send: Any, limit: int) -> None:
        await _send_json(send, 413, {"detail": f"request body is over the {limit}-byte limit", "code": "too_large"})


class ProcessTime:
    """Adds `X-Process-Time` (seconds spent in the server, as verl-tool reports it) to every response."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message: dict) -> None:
            if message["type"] == "http.response.start":
                elapsed = f"{time.perf_counter() - started:.6f}".encode()
                message = {**message, "headers": [*message.get("headers", []), (b"x-process-time", elapsed)]}
            await send(message)

        await self.app(scope, receive, timed_send)


class GiveBackAfterLarge:
    """After a request whose body and response together carried at least `min_bytes`, give malloc's freed pages
    back to the system (`allocator.give_back_freed_memory`), in a thread, once the response is sent: one trim at a
    time, at most one every `interval_s`, and one after the last such request (a request that ends while a trim
    runs or waits leaves the work to the next).

    A node's workers each keep their own heap, and glibc hands a freed block of a megabyte or more back to the
    system only from the heap's top: 16 workers each kept what a burst of 1.75 MB request bodies (verl-tool's
    protocol carries the image in every call) had freed, 133-195 MB private a worker (docs/node.md, "Memory"). The
    interval bounds the price: pages given back are faulted in again by the next burst."""

    def __init__(self, app: Any, min_bytes: int, interval_s: float = TRIM_INTERVAL_S):
        self.app = app
        self.min_bytes = min_bytes
        self.interval_s = interval_s
        self.trims = 0
        self._trimming: asyncio.Future[bool] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._again = False
        self._last = float("-inf")

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carried = 0

        async def counted_receive() -> dict:
            nonlocal carried
            message = await receive()
            if message["type"] == "http.request":
                carried += len(message.get("body", b""))
            return message

        async def counted_send(message: dict) -> None:
            nonlocal carried
            if message["type"] == "http.response.body":
                carried += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, counted_receive, counted_send)
        finally:
            if carried >= self.min_bytes:
                self._want_trim()

    def _want_trim(self) -> None:
        if self._trimming is not None:
            self._again = True
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            wait = self._last + self.interval_s - loop.time()
            if wait > 0:
                self._timer = loop.call_later(wait, self._trim)
            else:
                self._trim()

    def _trim(self) -> None:
        self._timer = None
        self._again = False
        self.trims += 1
        self._trimming = asyncio.get_running_loop().run_in_executor(None, give_back_freed_memory)
        self._trimming.add_done_callback(self._trimmed)

    def _trimmed(self, _: asyncio.Future[bool]) -> None:
        self._trimming = None
        self._last = asyncio.get_running_loop().time()
        if self._again:
            self._want_trim()


def internal_error_body() -> dict[str, str | None]:
    return {"detail": "internal server error", "code": "internal_error", "request_id": request_id.get()}


class DrainGate:
    """Whether the server still takes work, and how many requests are in flight.

    A graceful shutdown closes the gate: new requests get 503 (with Retry-After and `Connection: close`,
    so a client or load balancer goes to another replica) while those in flight finish.
    """

    # Liveness and metrics keep answering while draining; long-lived MCP streams do not hold the drain up.
    ALWAYS_OPEN = frozenset({"/healthz", "/metrics"})

    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self.drain_started: float | None = None

    def close(self) -> None:
        if not self.draining:
            self.draining = True
            self.drain_started = time.monotonic()


class RequestContext:
    """Request id (from `X-Request-ID` or new), echoed in the response; one access-log record per request;
    the drain gate. Headers and query strings are never logged."""

    def __init__(self, app: Any, gate: DrainGate, retry_after_s: int = 1, worker: int | None = None):
        self.app = app
        self.gate = gate
        self.retry_after_s = retry_after_s
        # Which process of a node answered (`serve --workers N`), for the operator and the node's tests.
        self.extra = [] if worker is None else [(b"x-toolserver-worker", str(worker).encode())]

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        offered = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"x-request-id"), None)
        rid = new_request_id(offered)
        token = request_id.set(rid)
        path = scope.get("path", "")
        started = time.perf_counter()
        status = 500
        responded = False

        async def send_with_id(message: dict) -> None:
            nonlocal status, responded
            if message["type"] == "http.response.start":
                status, responded = message["status"], True
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode()),
                                                  *self.extra]}
            await send(message)

        counted = not (path == "/mcp" and scope.get("method") == "GET")  # an MCP event stream stays open
        try:
            if self.gate.draining and path not in DrainGate.ALWAYS_OPEN:
                await self._refuse(send_with_id)
                return
            if counted:
                self.gate.in_flight += 1
            try:
                await self.app(scope, receive, send_with_id)
            except Exception:
                # A bug, not a bad request: logged here with the id; answered 500 with the id to quote
                # (by the app's own handler when it got that far).
                logging.getLogger("toolserver").exception("unhandled error")
                if not responded:
                    await _send_json(send_with_id, 500, internal_error_body())
            finally:
                if counted:
                    self.gate.in_flight -= 1
        finally:
            access_log.info("request", extra={
                "method": scope.get("method"), "path": path, "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                "client": (scope.get("client") or ("", 0))[0]})
            request_id.reset(token)

    async def _refuse(self, send: Any) -> None:
        await _send_json(send, 503, {"detail": "the server is shutting down; retry (another replica will answer)",
                                     "code": "shutting_down"},
                         [(b"retry-after", str(self.retry_after_s).encode()), (b"connection", b"close")])


async def _send_json(send: Any, status: int, content: dict, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps(content).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})
