"""fpng's encodes in processes of their own, so that they run in parallel and leave the event loop alone.

fpng's Python binding (py-fpng-nb) does not release the GIL while it encodes: in threads, the PNGs of all calls
are written one at a time (12 ms for a 1 MP super-resolution output on a 16-core GPU host: at most ~80 a second,
whatever the cores), and while one is written no other thread of the process runs, the event loop included.
Pillow's encoders (JPEG, WebP, zlib PNG) release it and need none of this.

Here the raw pixels go to one of `processes` spawned workers, which run the very same fpng call and send the bytes
back: the same bytes as in the calling thread, while the caller's process holds the GIL only to hand over the
pixels (a copy) and take the answer. A pool that broke (a worker killed) is replaced, and the encode is done in
the calling thread meanwhile, so no call fails for it.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool


def default_processes(cores: int | None = None) -> int:
    """A quarter of the cores, at most 8; none below 4 cores (there a process hop costs more than it frees)."""
    cores = cores or os.cpu_count() or 1
    return 0 if cores < 4 else min(8, cores // 4)


def _encode(raw: bytes, width: int, height: int, channels: int) -> bytes:
    import fpng

    return bytes(fpng.from_bytes(raw, width, height, channels))


class EncodePool:
    """`fpng(raw, width, height, channels)`: the PNG, written in a worker process. Thread-safe."""

    def __init__(self, processes: int):
        self.processes = processes
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.fallbacks = 0  # encodes done in the calling thread because the pool was broken

    def fpng(self, raw: bytes, width: int, height: int, channels: int) -> bytes:
        executor = self._get()
        if executor is None:
            return _encode(raw, width, height, channels)
        try:
            return executor.submit(_encode, raw, width, height, channels).result()
        except BrokenProcessPool:
            with self._lock:
                if self._executor is executor:
                    self._executor = None  # the next encode starts a fresh pool
            self.fallbacks += 1
            return _encode(raw, width, height, channels)

    def _get(self) -> ProcessPoolExecutor | None:
        with self._lock:
            if self._closed or self.processes <= 0:
                return None
            if self._executor is None:
                # spawn, not fork: the server's process has threads (and perhaps CUDA), which a fork would copy
                self._executor = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"))
            return self._executor

    def close(self) -> None:
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
