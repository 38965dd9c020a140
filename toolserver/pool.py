"""Bounded work lanes for CPU-heavy work (decode, crop, resize, encode, SMFANet, document queries).

Two lanes, so that a cheap call (a crop, a lookback, a validator) never waits behind SMFANet tiles or a
document query in one FIFO queue:
- `fast`: pixel tools, validators, decoding and encoding; `workers` threads at normal priority.
- `code`: threads that wait for model-written code running in the sandbox's own processes (`run_python`).
- `heavy`: the tools that run a network or an index (super-resolution, document search by query); their own
  `heavy_workers` threads, lowered in the OS scheduler (`nice`), as are SMFANet's CPU workers.

The heavy lane's threads mostly wait for SMFANet's workers, which are bounded by the core count on their
own, so the lanes do not multiply the CPU work in flight; and because everything heavy runs at a lower
priority, the kernel hands a core to a cheap job as soon as one is runnable instead of time-slicing it
evenly with a long network pass. (Python's executors have no priorities, and a priority queue in one pool
would still leave a cheap job waiting for a worker held by a four-second SMFANet call.)

Admission is counted from submission until the thread actually finishes (not until the caller stops
waiting), so work abandoned by a timeout still holds its place: a lane can never be flooded by calls that
time out. Past `queue_limit` jobs in a lane, work is refused with `Overloaded` (HTTP 429 + Retry-After).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar

from toolserver.errors import Overloaded

T = TypeVar("T")
LaneName = Literal["fast", "heavy", "code"]
LANES: tuple[LaneName, ...] = ("fast", "heavy", "code")


def lower_thread_priority(nice: int) -> None:
    """Make the calling thread yield the CPU to normal-priority threads (Linux: per-thread nice).

    Raising one's own nice value needs no privilege; where it is not supported it is a no-op.
    """
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


class _Lane:
    def __init__(self, name: str, workers: int, queue_limit: int, nice: int):
        self.name = name
        self.workers = max(1, workers)
        self.queue_limit = max(1, queue_limit)
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=f"toolserver-{name}",
                                            initializer=lower_thread_priority, initargs=(nice,))
        self._lock = threading.Lock()
        self.in_flight = 0
        self.rejected = 0

    def admit(self, retry_after_s: int) -> None:
        with self._lock:
            if self.in_flight >= self.queue_limit:
                self.rejected += 1
                raise Overloaded(
                    f"the server is at capacity ({self.in_flight} {self.name} jobs admitted, limit "
                    f"{self.queue_limit}); retry after {retry_after_s} s",
                    retry_after_s=retry_after_s,
                )
            self.in_flight += 1

    def release(self, _future: Any = None) -> None:
        with self._lock:
            self.in_flight -= 1

    def submit(self, fn: Callable[..., T], *args: Any):
        return self._executor.submit(fn, *args)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class WorkPool:
    def __init__(self, workers: int, queue_limit: int, retry_after_s: int = 1, *, heavy_workers: int | None = None,
                 heavy_nice: int = 10, code_workers: int = 8):
        self.workers = workers
        self.queue_limit = max(1, queue_limit)
        self.retry_after_s = retry_after_s
        self.lanes: dict[str, _Lane] = {
            "fast": _Lane("fast", workers, queue_limit, nice=0),
            "heavy": _Lane("heavy", heavy_workers or workers, queue_limit, nice=heavy_nice),
            # Threads that wait for sandboxed code (which runs in processes of its own): one per sandbox slot.
            "code": _Lane("code", code_workers, queue_limit, nice=0),
        }

    @property
    def in_flight(self) -> int:
        return sum(lane.in_flight for lane in self.lanes.values())

    @property
    def rejected(self) -> int:
        return sum(lane.rejected for lane in self.lanes.values())

    async def run(self, fn: Callable[..., T], *args: Any, timeout: float | None = None,
                  lane: LaneName = "fast") -> T:
        """Run `fn(*args)` in a worker thread of `lane`; raises Overloaded, or TimeoutError after `timeout` s."""
        chosen = self.lanes[lane]
        chosen.admit(self.retry_after_s)
        try:
            future = chosen.submit(fn, *args)
        except BaseException:
            chosen.release()
            raise
        future.add_done_callback(chosen.release)
        wrapped = asyncio.wrap_future(future)
        # A result nobody waits for any more (timed out) must not log "exception never retrieved".
        wrapped.add_done_callback(lambda f: f.cancelled() or f.exception())
        if timeout is None:
            return await wrapped
        return await asyncio.wait_for(asyncio.shield(wrapped), timeout)

    def shutdown(self) -> None:
        for lane in self.lanes.values():
            lane.shutdown()
