"""A bounded pool for CPU-heavy work (decode, crop, resize, encode) off the event loop.

Admission is counted from submission until the thread actually finishes (not until the caller stops
waiting), so work abandoned by a timeout still holds its place: the pool can never be flooded by
calls that time out. Past `queue_limit`, work is refused with `Overloaded` (HTTP 429 + Retry-After).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from toolserver.errors import Overloaded

T = TypeVar("T")


class WorkPool:
    def __init__(self, workers: int, queue_limit: int, retry_after_s: int = 1):
        self.workers = workers
        self.queue_limit = max(1, queue_limit)
        self.retry_after_s = retry_after_s
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="toolserver-work")
        self._lock = threading.Lock()
        self.in_flight = 0
        self.rejected = 0

    def _admit(self) -> None:
        with self._lock:
            if self.in_flight >= self.queue_limit:
                self.rejected += 1
                raise Overloaded(
                    f"the server is at capacity ({self.in_flight} jobs admitted, limit {self.queue_limit}); "
                    f"retry after {self.retry_after_s} s",
                    retry_after_s=self.retry_after_s,
                )
            self.in_flight += 1

    def _release(self, _future: Any = None) -> None:
        with self._lock:
            self.in_flight -= 1

    async def run(self, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """Run `fn(*args)` in a worker thread; raises Overloaded, or TimeoutError after `timeout` s."""
        self._admit()
        try:
            future = self._executor.submit(fn, *args)
        except BaseException:
            self._release()
            raise
        future.add_done_callback(self._release)
        wrapped = asyncio.wrap_future(future)
        # A result nobody waits for any more (timed out) must not log "exception never retrieved".
        wrapped.add_done_callback(lambda f: f.cancelled() or f.exception())
        if timeout is None:
            return await wrapped
        return await asyncio.wait_for(asyncio.shield(wrapped), timeout)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
