"""Model calls: one code path, two transports, the same batching rule on both.

A model service (SMFANet, a document encoder) is an object with three methods: `batch(requests) -> replies`
(one reply per request, in order, each saying how large a batch it ran in), `describe() -> dict` (what it serves)
and `warm()` (load now). Tools and the document library never call it directly: they hold a *front* (the
engine-like object of `toolserver.sr.service` or `toolserver.documents.encoder_service`) that turns their call into
requests and hands them to a `Transport`:

- `LocalTransport` (under uvicorn): the model lives in this process; concurrent calls are gathered by a `Batcher`.
- the Ray Serve transport (`toolserver.rayapp`): a deployment handle; the model lives in its own deployment,
  which gathers the calls of every ingress replica with `@serve.batch` under the same `BatchRule`.

Either way the model runs the same `batch` function on the same requests, so a call's output does not depend
on the transport. The rule is Ray Serve's: a batch starts as soon as a call arrives and a batch slot is free,
takes every call waiting then (up to `max_size`), and waits up to `wait_s` for more while it is not full; at most
`concurrent` batches run at once, so that a CPU engine with one worker per core is never left idle at a batch's
tail.

The `Batcher` is written here rather than taken from a library because the only batchers of this shape are
asyncio ones (Ray Serve's own, which would make ray a dependency of every server); tool calls run in worker
threads and block on the model.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

Req = TypeVar("Req")
Rep = TypeVar("Rep")


@dataclass(frozen=True)
class BatchRule:
    max_size: int = 16  # calls in one batch
    wait_s: float = 0.0  # how long a batch that is not full waits for more calls
    concurrent: int = 1  # batches running at once


class Model(Protocol):
    def batch(self, requests: list[Any]) -> list[Any]: ...

    def describe(self) -> dict[str, Any]: ...

    def warm(self) -> None: ...


class Transport(Protocol):
    """How a front reaches its model: `call_many` is batched with other callers' calls; `describe`, `warm` and
    `close` are not."""

    where: str  # "in-process", or the deployment's name

    def call_many(self, requests: list[Any], timeout_s: float | None = None) -> list[Any]:
        """One reply per request, in order; the requests are submitted together (they may share a batch)."""
        ...

    def describe(self) -> dict[str, Any]: ...

    def warm(self) -> None: ...

    def close(self) -> None: ...


@dataclass(eq=False)
class _Slot:
    request: Any
    wake: threading.Condition  # on the batcher's lock: this call's thread alone waits on it
    answered: bool = False
    reply: Any = None
    error: BaseException | None = None
    lead: bool = False  # this call's thread runs batches (it started one, or was handed the lead)


class Batcher(Generic[Req, Rep]):
    """Gathers concurrent blocking calls into batches for `fn`; thread-safe. The calling threads run the batches
    themselves (a leader per running batch), so an idle batcher holds no thread.

    Each waiting call sleeps on a condition of its own (all on one lock), woken only when it is answered or handed
    the lead; only leaders wait on `_work`. One shared condition woke every waiting thread at each new call and each
    answered batch: with 64 callers, 233 us of CPU a call went to threads that woke, found nothing, and slept again
    (docs/decisions.md, #41)."""

    def __init__(self, fn: Callable[[list[Req]], list[Rep]], rule: BatchRule):
        self.fn = fn
        self.rule = BatchRule(max(1, rule.max_size), max(0.0, rule.wait_s), max(1, rule.concurrent))
        self._queue: deque[_Slot] = deque()
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # leaders waiting for calls (or for a fuller batch)
        self._leaders = 0

    def call(self, request: Req, timeout_s: float | None = None) -> Rep:
        """`request`'s reply. `timeout_s` bounds only the wait for a batch to take the call (then TimeoutError);
        a call taken into a batch waits for that batch."""
        slot = _Slot(request, threading.Condition(self._lock))
        with self._lock:
            self._queue.append(slot)
            if self._leaders < self.rule.concurrent:
                self._leaders += 1
                slot.lead = True
            else:
                self._work.notify_all()  # a leader waiting for calls, or for a fuller batch, sees this one
                if not slot.wake.wait_for(lambda: slot.answered or slot.lead, timeout_s):
                    if slot in self._queue:  # no batch took it: withdraw it
                        self._queue.remove(slot)
                        raise TimeoutError("the model did not take the call in time")
                    slot.wake.wait_for(lambda: slot.answered or slot.lead)
        if not slot.answered:
            self._lead(slot)
        if slot.error is not None:
            raise slot.error
        return slot.reply

    def _lead(self, own: _Slot) -> None:
        """Run batches until this thread's own call is answered, then hand the lead to the first waiting call."""
        while (batch := self._take(own)):
            self._run(batch)
        with self._lock:
            own.lead = False
            successor = next((slot for slot in self._queue if not slot.lead), None)
            if successor is None:
                self._leaders -= 1
            else:
                successor.lead = True
                successor.wake.notify()

    def _take(self, own: _Slot) -> list[_Slot]:
        """The next batch, or [] once `own` is answered (by this leader's batch or another's)."""
        rule = self.rule
        with self._lock:
            self._work.wait_for(lambda: own.answered or bool(self._queue))
            if own.answered:
                return []
            if rule.wait_s > 0 and len(self._queue) < rule.max_size:
                until = time.monotonic() + rule.wait_s
                while len(self._queue) < rule.max_size and (left := until - time.monotonic()) > 0:
                    self._work.wait(left)
            return [self._queue.popleft() for _ in range(min(rule.max_size, len(self._queue)))]

    def _run(self, batch: list[_Slot]) -> None:
        replies: list[Any] = []
        error: BaseException | None = None
        try:
            replies = self.fn([slot.request for slot in batch])
            if len(replies) != len(batch):
                raise RuntimeError(f"the model answered {len(replies)} of {len(batch)} calls")
        except BaseException as exc:  # every call of the batch learns why
            error = exc
        with self._lock:
            for i, slot in enumerate(batch):
                slot.reply, slot.error = (None, error) if error is not None else (replies[i], None)
                slot.answered = True
                slot.wake.notify()
            self._work.notify_all()  # a leader whose own call this batch answered stops leading


class LocalTransport:
    """The model in this process, its calls gathered by a `Batcher`."""

    where = "in-process"

    def __init__(self, model: Model, rule: BatchRule):
        self.model = model
        self.batcher: Batcher[Any, Any] = Batcher(model.batch, rule)

    def call_many(self, requests: list[Any], timeout_s: float | None = None) -> list[Any]:
        if len(requests) == 1:
            return [self.batcher.call(requests[0], timeout_s)]
        # Each request is its own call of the batcher, made from its own thread so that they are all waiting at
        # once (a batch takes them together).
        replies: list[Any] = [None] * len(requests)
        errors: list[BaseException] = []

        def one(i: int) -> None:
            try:
                replies[i] = self.batcher.call(requests[i], timeout_s)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(1, len(requests))]
        for thread in threads:
            thread.start()
        one(0)
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return replies

    def describe(self) -> dict[str, Any]:
        return self.model.describe()

    def warm(self) -> None:
        self.model.warm()

    def close(self) -> None:
        close = getattr(self.model, "close", None)
        if close is not None:
            close()


class ModelFront:
    """What the fronts (`SRFront`, `EncoderFront`) share: what their model serves, read from the transport at start
    and again on `refresh()` (readiness does so), never on a call's path; each reply's batch size reported to
    `on_batch` (the metric). A subclass says what an unanswered `describe` means (`_unanswered`)."""

    def __init__(self, transport: Transport, on_batch: Callable[[int], None] | None = None):
        self.transport = transport
        self.on_batch = on_batch
        self._lock = threading.Lock()
        self._info: dict[str, Any] = {}
        self.refresh()

    def refresh(self) -> None:
        try:
            info = self.transport.describe()
        except Exception as exc:  # the model's deployment is not up (yet): say so, ask again next time
            info = self._unanswered(exc)
        info["status"] = {**info["status"], "served_by": self.transport.where}
        with self._lock:
            self._info = info

    def _unanswered(self, exc: Exception) -> dict[str, Any]:
        raise NotImplementedError

    def status(self) -> dict[str, Any]:
        return dict(self._info["status"])

    def _ran_in(self, batch: int) -> None:
        if self.on_batch is not None:
            self.on_batch(batch)

    def close(self) -> None:
        self.transport.close()
