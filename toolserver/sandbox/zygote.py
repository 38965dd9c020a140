"""The sandbox's zygote: a single-threaded process that has numpy, Pillow and matplotlib imported already and
forks confined children (`children.py`), so that an execution pays for a fork, not for ≈ 0.45 s of imports.

It is its own process, started by the server (`python -m toolserver.sandbox.zygote CONFIG`), because forking
the server itself would copy a process with many threads (uvicorn's, the work pool's, torch's). It speaks
length-prefixed msgpack frames on stdin/stdout: first a `hello` with the isolation levels its self-test found,
then a `result` for each `run`. Two kinds of run:
- one-shot: a child per execution, killed with its whole process group once its result is in (which ends
  anything the code left running) or at its deadline;
- a cell of a stateful worker (`worker` names it): the worker is forked with the first cell and keeps its
  namespace for the next ones; it is killed at a cell's deadline (its state is lost, and the answer says so),
  on `close`, and, the least recently used idle one first, when a new worker needs its slot.
Each child has a slot: its own uid (`uid_base + slot`) and, at the `restricted` level, its own working directory.
Every run is watched for its disk quota (`quota.py`): one at the quota is stopped (`disk_quota`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import selectors
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from toolserver.sandbox import child as child_side
from toolserver.sandbox import quota
from toolserver.sandbox.children import CHILD_ENV, Children, become_subreaper, reap_group
from toolserver.sandbox.confine import Limits, landlock_abi
from toolserver.sandbox.images import ImageCache
from toolserver.sandbox.pipes import HEADER, widen_pipe
from toolserver.sandbox.selftest import self_test
from toolserver.sandbox.workers import Worker, Workers

CELL_FIELDS = ("code", "max_output_bytes", "max_images", "max_pixels", "figure_dpi", "figure_bbox", "rewrites",
               "error_style", "collect", "close_on_error", "filename", "program", "options")


@dataclass
class Running:
    request_id: int
    pid: int
    slot: int
    deadline: float
    started: float
    max_bytes: int
    worker: Worker | None = None
    fresh: bool = False  # the worker was started for this cell
    buffer: bytearray = field(default_factory=bytearray)
    killed: str | None = None  # why the zygote killed it
    level: str = "restricted"
    disk_bytes: int = Limits.disk_bytes


class Zygote:
    def __init__(self, config: dict[str, Any]):
        self.runtime = Path(config["runtime_dir"])
        slots = int(config["slots"])
        self.free_slots = list(range(slots))[::-1]
        self.workers = Workers(list(range(slots, slots + int(config.get("worker_slots", 0))))[::-1])
        self.children = Children(self.runtime, int(config["uid_base"]), landlock=bool(config.get("landlock", True)))
        self.as_root, self.landlock = self.children.as_root, self.children.landlock
        self.running: dict[int, Running] = {}  # by the read end of the child's result pipe
        self.selector = selectors.DefaultSelector()
        self.inbox = bytearray()
        self.out = sys.stdout.buffer
        self.images = ImageCache(int(config.get("image_cache_bytes", 512 << 20)))

    # what the self-test uses
    def fork(self, message: dict[str, Any], slot: int) -> tuple[int, int]:
        pid, read_end, _ = self.children.fork(message, slot)
        return pid, read_end

    def reset_workdir(self, slot: int) -> None:
        self.children.reset_workdir(slot)

    def send(self, message: dict[str, Any], attachment: bytearray | None = None) -> None:
        """A frame, and after it (when given) the child's message as a second frame, written from its buffer."""
        payload = msgpack.packb(message, use_bin_type=True)
        self.out.write(HEADER.pack(len(payload)) + payload)
        if attachment is not None:
            self.out.write(HEADER.pack(len(attachment)))
            self.out.write(memoryview(attachment))
        self.out.flush()

    # -- the loop -----------------------------------------------------------------------------------
    def serve(self) -> None:
        os.set_blocking(0, False)
        self.selector.register(0, selectors.EVENT_READ, "requests")
        next_watch = time.monotonic() + quota.WATCH_S
        while True:
            timeout = min((r.deadline for r in self.running.values()), default=time.monotonic() + 1)
            timeout = min(timeout, next_watch) if self.running or len(self.workers) else timeout
            for key, _ in self.selector.select(max(0.0, min(1.0, timeout - time.monotonic()))):
                if key.data == "requests":
                    if not self._read_requests():
                        self._kill_all()  # the server went away: so does every run
                        return
                else:
                    self._read_result(key.fd)
            now = time.monotonic()
            for fd, run in list(self.running.items()):
                if now >= run.deadline:
                    self._kill(run, "timeout")
                    self._finish(fd)
            if now >= next_watch:
                self._watch_disks()
                next_watch = now + quota.WATCH_S

    def _over_quota(self, level: str, pid: int, slot: int, disk_bytes: int) -> bool:
        shared_uid = None if self.landlock or level == "namespaces" else self.children.uid_base + slot
        return quota.over(level, pid, self.children.workdir(slot), disk_bytes, shared_uid)

    def _watch_disks(self) -> None:
        for fd, run in list(self.running.items()):
            if self._over_quota(run.level, run.pid, run.slot, run.disk_bytes):
                self._kill(run, "disk_quota")
                self._finish(fd)
        for worker in self.workers.all():
            if not worker.busy and self._over_quota(worker.level, worker.pid, worker.slot, worker.disk_bytes):
                self._drop_worker(worker)  # a thread it left was writing: its session's next cell starts afresh

    def _kill_all(self) -> None:
        pids = [run.pid for run in self.running.values()]
        pids += [worker.pid for worker in self.workers.all() if not worker.busy]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        for pid in pids:
            reap_group(pid)

    def _read_requests(self) -> bool:
        try:
            chunk = os.read(0, 1 << 20)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        self.inbox += chunk
        while len(self.inbox) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.inbox)
            if len(self.inbox) < HEADER.size + size:
                break
            message = msgpack.unpackb(bytes(self.inbox[HEADER.size:HEADER.size + size]), raw=False)
            del self.inbox[:HEADER.size + size]
            if message.get("type") == "close":
                self._close_worker(str(message["worker"]))
            elif message.get("worker") is not None:
                self._start_cell(message)
            else:
                self._start(message)
        return True

    # -- one-shot executions ------------------------------------------------------------------------------
    def _start(self, message: dict[str, Any]) -> None:
        if not self.free_slots:
            self._answer(message, {"status": "busy"})
            return
        missing = self.images.resolve(message)
        if missing:
            self._answer(message, {"status": "missing_images", "missing": missing})
            return
        slot = self.free_slots.pop()
        pid, read_end, _ = self.children.fork(message, slot)
        self._watch(message, read_end, Running(message["id"], pid, slot, 0, 0, 0))

    def _watch(self, message: dict[str, Any], read_end: int, run: Running) -> None:
        run.started = time.monotonic()
        run.deadline = run.started + float(message["timeout_s"])
        run.max_bytes = int(message.get("max_result_bytes", 256 << 20))
        run.level = str(message["level"]) if run.worker is None else run.worker.level
        run.disk_bytes = int(message.get("limits", {}).get("disk_bytes", Limits.disk_bytes)) if run.worker is None \
            else run.worker.disk_bytes
        os.set_blocking(read_end, False)
        self.running[read_end] = run
        self.selector.register(read_end, selectors.EVENT_READ, "child")

    def _answer(self, message: dict[str, Any], result: dict[str, Any]) -> None:
        self.send({"type": "result", "id": message["id"], **result})

    # -- stateful workers -----------------------------------------------------------------------------------
    def _start_cell(self, message: dict[str, Any]) -> None:
        worker_id = str(message["worker"])
        worker = self.workers.get(worker_id)
        if worker is not None and worker.busy:
            self._answer(message, {"status": "busy"})
            return
        if worker is None:
            self._open_worker(message, worker_id)
            return
        payload = msgpack.packb({k: message[k] for k in CELL_FIELDS if k in message}, use_bin_type=True)
        try:  # code only: it fits the (emptied) pipe, so the zygote never waits on a worker
            written = os.write(worker.to_worker, HEADER.pack(len(payload)) + payload)
        except OSError:
            written = -1
        if written != HEADER.size + len(payload):
            self._drop_worker(worker)
            self._answer(message, {"status": "crashed", "error": "the worker stopped reading", "worker_lost": True})
            return
        worker.busy = True
        self._watch(message, worker.from_worker, Running(message["id"], worker.pid, worker.slot, 0, 0, 0, worker))

    def _open_worker(self, message: dict[str, Any], worker_id: str) -> None:
        slot = self.workers.take_slot()
        if slot is None and (idle := self.workers.least_recent_idle()) is not None:
            self._drop_worker(idle)  # its session's next cell starts afresh, and is told so
            slot = self.workers.take_slot()
        if slot is None:
            self._answer(message, {"status": "busy"})
            return
        missing = self.images.resolve(message)
        if missing:
            self.workers.release_slot(slot)
            self._answer(message, {"status": "missing_images", "missing": missing})
            return
        pid, read_end, to_worker = self.children.fork(message, slot, worker=True)
        assert to_worker is not None
        os.set_blocking(to_worker, False)
        worker = Worker(worker_id, pid, slot, to_worker, read_end, busy=True, level=str(message["level"]),
                        disk_bytes=int(message.get("limits", {}).get("disk_bytes", Limits.disk_bytes)))
        self.workers.add(worker)
        self._watch(message, read_end, Running(message["id"], pid, slot, 0, 0, 0, worker, fresh=True))

    def _close_worker(self, worker_id: str) -> None:
        worker = self.workers.get(worker_id)
        if worker is None:
            return
        run = self.running.get(worker.from_worker)
        if run is not None:  # a cell in flight: it ends as killed
            self._kill(run, "closed")
            self._finish(worker.from_worker)
        else:
            self._drop_worker(worker)

    def _drop_worker(self, worker: Worker) -> int | None:
        """Kills the worker and its group; the signal that ended it, if one did before."""
        self.workers.remove(worker.worker_id)
        for fd in (worker.to_worker, worker.from_worker):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signal.SIGKILL)
        ended = reap_group(worker.pid)
        self.children.reset_workdir(worker.slot)
        self.workers.release_slot(worker.slot)
        return ended

    # -- results --------------------------------------------------------------------------------------------
    def _read_result(self, fd: int) -> None:
        run = self.running[fd]
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return
        if chunk:
            run.buffer += chunk
            if len(run.buffer) > run.max_bytes:
                self._kill(run, "output_too_large")
                self._finish(fd)
            elif child_side.frame_length(run.buffer) == len(run.buffer):
                self._finish(fd)
            return
        self._finish(fd)  # the pipe closed without a whole message: the child died

    def _kill(self, run: Running, reason: str) -> None:
        run.killed = run.killed or reason
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.pid, signal.SIGKILL)

    def _finish(self, fd: int) -> None:
        run = self.running.pop(fd)
        self.selector.unregister(fd)
        meta = {"type": "result", "id": run.request_id, "seconds": time.monotonic() - run.started}
        whole = bool(run.buffer) and child_side.frame_length(run.buffer) == len(run.buffer)
        if not run.killed and self._over_quota(run.level, run.pid, run.slot, run.disk_bytes):
            self._kill(run, "disk_quota")  # it reached the quota since the last look (the child waits to be killed)
        if run.worker is not None:
            meta["worker_started"] = run.fresh
            if whole and not run.killed:  # the worker lives on, with its namespace, for the next cell
                run.worker.busy = False
                self.send({**meta, "attached": True}, attachment=run.buffer)
                return
            ended = self._drop_worker(run.worker)
            self.send({**meta, **self._result(run, ended), "worker_lost": True})
            return
        os.close(fd)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.pid, signal.SIGKILL)  # whatever the code left running ends with its run
        if whole and not run.killed:  # the answer first: the child's teardown is not the caller's to wait for
            self.send({**meta, "attached": True}, attachment=run.buffer)
            reap_group(run.pid)
        else:
            self.send({**meta, **self._result(run, reap_group(run.pid))})
        self.children.reset_workdir(run.slot)
        self.free_slots.append(run.slot)

    def _result(self, run: Running, signal_number: int | None) -> dict[str, Any]:
        if run.killed == "disk_quota":
            return {"status": "disk_quota", "error": f"the run's files reached its disk quota of "
                    f"{run.disk_bytes / 2**20:g} MiB (or one file per {quota.ENTRY_BYTES} bytes of it)"}
        if run.killed:
            return {"status": run.killed}
        if run.buffer and child_side.frame_length(run.buffer) == len(run.buffer):
            return {"attached": True}  # the child's message follows as it is; the server reads and checks it
        if signal_number is not None:
            reason = "cpu_limit" if signal_number == signal.SIGXCPU else "crashed"
            return {"status": reason, "error": f"killed by {signal.Signals(signal_number).name}"}
        return {"status": "crashed", "error": "the code's process ended without a result"}


# Imported by the zygote: what code commonly uses, so that a child need not read the interpreter's files (at the
# `restricted` level they may be unreadable to the sandbox's user, as under /root).
STDLIB = ("base64", "collections", "copy", "csv", "dataclasses", "datetime", "decimal", "fractions", "functools",
          "hashlib", "heapq", "itertools", "json", "math", "operator", "random", "re", "statistics", "string",
          "textwrap", "typing", "ctypes.util", "colorsys", "bisect", "pprint", "struct", "zlib", "encodings.idna",
          "socket")


def preimport() -> None:
    """What every child would import anyway, imported once here (and shared copy-on-write after a fork)."""
    import importlib

    for name in STDLIB:
        importlib.import_module(name)
    import matplotlib
    import pyseccomp  # noqa: F401

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # builds the font list once
    import numpy  # noqa: F401
    from PIL import Image, ImageDraw, ImageEnhance, ImageFilter, ImageFont, ImageOps  # noqa: F401

    for program in child_side.PROGRAMS:  # an environment's shell (IPython) and rewriters, where they are installed
        with contextlib.suppress(Exception):  # a program that cannot load fails its own cells, not the zygote
            importlib.import_module(f"toolserver.sandbox.programs.{program}")
    Image.init()  # every image format's plugin
    plt.close(plt.figure())  # the backend and what a first figure loads, so a child need not read them
    gc.freeze()  # a child's collections skip these objects instead of writing to (and copying) every page of them


def become_unprivileged(runtime: Path, uid: int) -> None:
    """Serve as an unprivileged user, as a server that is not root does (tests of the user-namespace path)."""
    for path in [runtime, *runtime.rglob("*")]:
        os.chown(path, uid, uid)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: a uid change cleared it, and with it /proc/self


def main() -> None:
    config = json.loads(sys.argv[1])
    os.environ.update(CHILD_ENV | {"HOME": str(Path(config["runtime_dir"]) / "home")})
    preimport()
    if config.get("user_namespace") and os.geteuid() == 0:
        become_unprivileged(Path(config["runtime_dir"]), int(config["uid_base"]) - 1)
    become_subreaper()
    zygote = Zygote(config)
    for fd in (0, 1):
        widen_pipe(fd)
    zygote.children.prepare([*zygote.free_slots, *zygote.workers.free_slots])
    zygote.send({"type": "hello", "levels": self_test(zygote), "pid": os.getpid(), "root": zygote.as_root,
                 "landlock": landlock_abi()})
    zygote.serve()


if __name__ == "__main__":
    main()
