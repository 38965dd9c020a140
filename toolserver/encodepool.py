"""fpng's encodes in processes of their own, so that they run in parallel and leave the event loop alone.

fpng's Python binding (py-fpng-nb) does not release the GIL while it encodes: in threads, the PNGs of all calls
are written one at a time (12 ms for a 1 MP super-resolution output on a 16-core GPU host: at most ~80 a second,
whatever the cores), and while one is written no other thread of the process runs, the event loop included.
Pillow's encoders (JPEG, WebP, zlib PNG) release it and need none of this.

Here the raw pixels go down a pipe to one of `processes` spawned workers, which run the very same fpng call and
send the bytes back: the same bytes as in the calling thread, while the caller holds its process's GIL only to
hand over the pixels and take the answer (a pipe's reads and writes release it). Each worker has its own pipe and
serves one caller at a time, with no thread in between (a `ProcessPoolExecutor` adds a feeder and a manager thread,
two more hand-offs). A worker that died (killed, out of memory) is replaced, and that encode is done in the
calling thread, so no call fails for it.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
from multiprocessing.connection import Connection
from typing import Any


def default_processes(cores: int | None = None) -> int:
    """A quarter of the cores, at most 8; none below 4 cores (there a process hop costs more than it frees)."""
    cores = cores or os.cpu_count() or 1
    return 0 if cores < 4 else min(8, cores // 4)


def _encode(raw: bytes, width: int, height: int, channels: int) -> bytes:
    import fpng

    return bytes(fpng.from_bytes(raw, width, height, channels))


def _serve(conn: Connection) -> None:
    """A worker: (width, height, channels) then the raw pixels in; the PNG out (b"" where fpng failed)."""
    import fpng  # noqa: F401  (loaded before the first encode waits for it)

    while True:
        try:
            width, height, channels = conn.recv()
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            png = _encode(raw, width, height, channels)
        except Exception:
            png = b""
        conn.send_bytes(png)


class _Worker:
    def __init__(self, context: Any):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child,), name="toolserver-encode", daemon=True)
        self.process.start()
        child.close()

    def encode(self, raw: bytes, width: int, height: int, channels: int) -> bytes:
        self.conn.send((width, height, channels))
        self.conn.send_bytes(raw)
        png = self.conn.recv_bytes()
        if not png:
            raise ValueError("fpng failed in the encode process")
        return png

    def close(self) -> None:
        self.conn.close()
        self.process.join(1)
        if self.process.is_alive():
            self.process.kill()


class EncodePool:
    """`fpng(raw, width, height, channels)`: the PNG, written in a worker process. Thread-safe. No call waits for a
    worker to start: while none is free and one is starting, the encode runs in the calling thread."""

    def __init__(self, processes: int):
        self.processes = processes
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        self._lock = threading.Lock()
        self._started = 0  # workers alive or starting
        self._starting = 0
        self._closed = False
        self.fallbacks = 0  # encodes done in the calling thread because their worker died

    def start(self) -> None:
        """Every worker started now (≈ 0.5 s each to spawn), rather than when encodes first need them. Called at
        server start, from a thread at normal priority (a spawned worker inherits its thread's nice value)."""
        while self._claim():
            self._spawn()

    def fpng(self, raw: bytes, width: int, height: int, channels: int) -> bytes:
        worker = self._take()
        if worker is None:
            return _encode(raw, width, height, channels)
        try:
            png = worker.encode(raw, width, height, channels)
        except (EOFError, OSError):  # the worker died: replaced, and this encode done here
            worker.close()
            with self._lock:
                self._started -= 1
            self.fallbacks += 1
            return _encode(raw, width, height, channels)
        except ValueError:  # fpng itself failed: the caller falls back to Pillow, as in a thread
            self._give_back(worker)
            raise
        self._give_back(worker)
        return png

    def _claim(self) -> bool:
        """Whether the caller may start one more worker (counted as starting)."""
        with self._lock:
            if self._closed or self._started >= self.processes:
                return False
            self._started += 1
            self._starting += 1
            return True

    def _spawn(self) -> None:
        try:  # spawn, not fork: the server's process has threads (and perhaps CUDA), which a fork would copy
            worker = _Worker(multiprocessing.get_context("spawn"))
        except BaseException:
            with self._lock:
                self._started -= 1
                self._starting -= 1
            raise
        with self._lock:
            self._starting -= 1
        self._give_back(worker)

    def _take(self) -> _Worker | None:
        with self._lock:
            if self._closed or self.processes <= 0:
                return None
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                wait = self._starting == 0 and self._started >= self.processes
        if not wait:  # a worker is starting (or may be): this encode runs here meanwhile
            if self._claim():
                threading.Thread(target=self._spawn, name="toolserver-encode-start", daemon=True).start()
            return None
        return self._idle.get()  # every worker busy: wait for one (None: the pool closed)

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            closed = self._closed
        if closed:
            worker.close()
        else:
            self._idle.put(worker)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            started = self._started
        while True:  # the idle workers end now; busy ones when they are given back
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                break
            if worker is not None:
                worker.close()
        for _ in range(started):  # wakes any caller waiting for a worker: it encodes in its own thread
            self._idle.put(None)
