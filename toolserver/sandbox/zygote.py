"""The sandbox's zygote: a single-threaded process that has numpy, Pillow and matplotlib imported already and
forks one confined child per execution, so that an execution pays for a fork, not for ≈ 0.45 s of imports.

It is its own process, started by the server (`python -m toolserver.sandbox.zygote CONFIG`), because forking
the server itself would copy a process with many threads (uvicorn's, the work pool's, torch's). It speaks
length-prefixed msgpack frames on stdin/stdout: first a `hello` with the isolation levels its self-test found,
then a `result` for each `run`. A child that outlives its deadline is killed with its whole process group (the
seccomp filter keeps the code from leaving it); so is every child once its result is in, which ends anything the
code left running. Each running child has a slot: its own uid (`uid_base + slot`) and, at the `restricted`
level, its own working directory, emptied after each run.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import selectors
import shutil
import signal
import struct
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import msgpack
from PIL import Image

from toolserver.sandbox import child as child_side
from toolserver.sandbox.confine import (
    DEVICES,
    Limits,
    die_with_parent,
    drop_user,
    enter_namespaces,
    landlock_abi,
    landlock_apply,
    landlock_ruleset,
    library_paths,
    load_seccomp,
    mapped_bytes,
    seccomp_program,
    set_limits,
)
from toolserver.sandbox.selftest import self_test

HEADER = struct.Struct(">I")
PIPE_BYTES = 1 << 20
CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "MPLBACKEND": "Agg",
             "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass
class Running:
    request_id: int
    pid: int
    slot: int
    deadline: float
    started: float
    max_bytes: int
    buffer: bytearray = field(default_factory=bytearray)
    killed: str | None = None  # why the zygote killed it


class Zygote:
    def __init__(self, config: dict[str, Any]):
        self.runtime = Path(config["runtime_dir"])
        self.uid_base = int(config["uid_base"])
        self.free_slots = list(range(int(config["slots"])))[::-1]
        self.as_root = os.geteuid() == 0
        self.landlock = landlock_abi() >= 1
        # Made once, applied by each child: the seccomp program, and the Landlock rulesets (per slot at the
        # `restricted` level, whose working directory is the slot's).
        self.seccomp = seccomp_program()
        self.scope_ruleset = landlock_ruleset([], [], files=False) if self.landlock else None
        self.file_rulesets: dict[int, int] = {}
        self.root = self.runtime / "root"
        self.running: dict[int, Running] = {}  # by the read end of the child's result pipe
        self.selector = selectors.DefaultSelector()
        self.inbox = bytearray()
        self.out = sys.stdout.buffer
        # Images by key, decoded once and inherited by every child through the fork (copy-on-write): a session's
        # image crosses the pipe once, not with every execution. Least recently used first out.
        self.images: OrderedDict[str, Image.Image] = OrderedDict()
        self.image_bytes, self.image_budget = 0, int(config.get("image_cache_bytes", 512 << 20))

    # -- children ---------------------------------------------------------------------------------
    def workdir(self, slot: int) -> Path:
        return self.runtime / "work" / str(slot)

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        readable = library_paths()
        for slot in self.free_slots:
            self.reset_workdir(slot)
            if self.landlock:
                self.file_rulesets[slot] = landlock_ruleset(readable, [str(self.workdir(slot)),
                                                                       *(f"/dev/{d}" for d in DEVICES)])

    def reset_workdir(self, slot: int) -> None:
        """Emptied, not replaced: the slot's Landlock ruleset names this very directory."""
        path = self.workdir(slot)
        path.mkdir(parents=True, mode=0o700, exist_ok=True)
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
        path.chmod(0o700)
        if self.as_root:
            os.chown(path, self.uid_base + slot, self.uid_base + slot)

    def fork(self, message: dict[str, Any], slot: int) -> tuple[int, int]:
        read_end, write_end = os.pipe()
        widen_pipe(write_end)
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_end)
            self._child(message, write_end, slot)
        os.close(write_end)
        return pid, read_end

    def _child(self, message: dict[str, Any], result_fd: int, slot: int) -> NoReturn:
        try:
            os.setsid()  # its own process group, killed whole
            devnull = os.open("/dev/null", os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.environ.clear()
            os.environ.update(CHILD_ENV)
            limits, mapped = Limits(**message.get("limits", {})), mapped_bytes()
            if message["level"] == "namespaces":
                enter_namespaces(self.root, limits, self.as_root)
                if self.scope_ruleset is not None:  # signals: a user-namespace child shares the zygote's uid
                    landlock_apply(self.scope_ruleset)
            else:
                os.chdir(self.workdir(slot))
                if slot in self.file_rulesets:
                    landlock_apply(self.file_rulesets[slot])
            os.closerange(3, result_fd)  # the rulesets too, now that they are applied
            os.closerange(result_fd + 1, 1 << 16)
            set_limits(limits, mapped)
            drop_user(self.uid_base + slot, self.as_root)
            die_with_parent()  # after the uid switch, which clears it; a zygote killed outright takes its runs
            load_seccomp(self.seccomp)
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                child_side.send(result_fd, {"status": "confinement_failed", "error": f"{type(exc).__name__}: {exc}"})
            os._exit(70)
        try:
            sys.argv = [""]
            child_side.send(result_fd, child_side.execute(child_side.Request.of(message)))
        finally:
            os._exit(0)

    def self_test(self) -> dict[str, str]:
        return self_test(self)

    # -- the loop -----------------------------------------------------------------------------------
    def send(self, message: dict[str, Any], attachment: bytearray | None = None) -> None:
        """A frame, and after it (when given) the child's message as a second frame, written from its buffer."""
        payload = msgpack.packb(message, use_bin_type=True)
        self.out.write(HEADER.pack(len(payload)) + payload)
        if attachment is not None:
            self.out.write(HEADER.pack(len(attachment)))
            self.out.write(memoryview(attachment))
        self.out.flush()

    def serve(self) -> None:
        os.set_blocking(0, False)
        self.selector.register(0, selectors.EVENT_READ, "requests")
        while True:
            timeout = min((r.deadline for r in self.running.values()), default=time.monotonic() + 1)
            for key, _ in self.selector.select(max(0.0, min(1.0, timeout - time.monotonic()))):
                if key.data == "requests":
                    if not self._read_requests():
                        self._kill_all()  # the server went away: so does every run
                        return
                else:
                    self._read_result(key.fd)
            self._enforce_deadlines()

    def _kill_all(self) -> None:
        for run in self.running.values():
            self._kill(run, "stopped")
        for run in self.running.values():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(run.pid, 0)

    def _read_requests(self) -> bool:
        try:
            chunk = os.read(0, 1 << 20)
        except BlockingIOError:
            return True
        if not chunk:
            return False  # the server went away: so do we (the children die with their process groups)
        self.inbox += chunk
        while len(self.inbox) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.inbox)
            if len(self.inbox) < HEADER.size + size:
                break
            message = msgpack.unpackb(bytes(self.inbox[HEADER.size:HEADER.size + size]), raw=False)
            del self.inbox[:HEADER.size + size]
            self._start(message)
        return True

    def _start(self, message: dict[str, Any]) -> None:
        if not self.free_slots:
            self.send({"type": "result", "id": message["id"], "status": "busy"})
            return
        missing = self._resolve_images(message)
        if missing:
            self.send({"type": "result", "id": message["id"], "status": "missing_images", "missing": missing})
            return
        slot = self.free_slots.pop()
        started = time.monotonic()
        pid, read_end = self.fork(message, slot)
        os.set_blocking(read_end, False)
        self.running[read_end] = Running(message["id"], pid, slot, started + float(message["timeout_s"]), started,
                                         int(message.get("max_result_bytes", 256 << 20)))
        self.selector.register(read_end, selectors.EVENT_READ, "child")

    def _resolve_images(self, message: dict[str, Any]) -> list[str]:
        """Each image spec as a PIL image (`resolved`), from its bytes or from the cache; the keys not cached."""
        resolved, missing = [], []
        for spec in message.get("images", []):
            key = spec.get("key")
            if "data" in spec:
                image = Image.frombytes(spec["mode"], tuple(spec["size"]), spec["data"])
                if key is not None:
                    self._remember(key, image)
            elif key in self.images:
                image = self.images[key]
                self.images.move_to_end(key)
            else:
                missing.append(str(key))
                continue
            resolved.append((spec["names"], image))
        message["resolved"] = resolved
        return missing

    def _remember(self, key: str, image: Image.Image) -> None:
        size = len(image.getbands()) * image.width * image.height
        if key in self.images or size > self.image_budget:
            return
        self.images[key] = image
        self.image_bytes += size
        while self.image_bytes > self.image_budget:
            _, old = self.images.popitem(last=False)
            self.image_bytes -= len(old.getbands()) * old.width * old.height

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

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for fd, run in list(self.running.items()):
            if now >= run.deadline:
                self._kill(run, "timeout")
                self._finish(fd)

    def _kill(self, run: Running, reason: str) -> None:
        run.killed = run.killed or reason
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.pid, signal.SIGKILL)

    def _finish(self, fd: int) -> None:
        run = self.running.pop(fd)
        self.selector.unregister(fd)
        os.close(fd)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.pid, signal.SIGKILL)  # whatever the code left running ends with its run
        _, status = os.waitpid(run.pid, 0)
        result = self._result(run, status)
        result.update({"type": "result", "id": run.request_id, "seconds": time.monotonic() - run.started})
        self.reset_workdir(run.slot)
        self.free_slots.append(run.slot)
        self.send(result, attachment=run.buffer if result.get("attached") else None)

    def _result(self, run: Running, status: int) -> dict[str, Any]:
        if run.killed:
            return {"status": run.killed}
        if run.buffer and child_side.frame_length(run.buffer) == len(run.buffer):
            return {"attached": True}  # the child's message follows as it is; the server reads and checks it
        if os.WIFSIGNALED(status):
            signal_number = os.WTERMSIG(status)
            reason = "cpu_limit" if signal_number == signal.SIGXCPU else "crashed"
            return {"status": reason, "error": f"killed by {signal.Signals(signal_number).name}"}
        return {"status": "crashed", "error": f"exited with status {os.waitstatus_to_exitcode(status)} and no result"}


# Imported by the zygote: what code commonly uses, so that a child need not read the interpreter's files (at the
# `restricted` level they may be unreadable to the sandbox's user, as under /root).
STDLIB = ("base64", "collections", "copy", "csv", "dataclasses", "datetime", "decimal", "fractions", "functools",
          "hashlib", "heapq", "itertools", "json", "math", "operator", "random", "re", "statistics", "string",
          "textwrap", "typing", "ctypes.util", "colorsys", "bisect", "pprint", "struct", "zlib", "encodings.idna",
          "socket")


def widen_pipe(fd: int) -> None:
    """A 1 MiB pipe buffer instead of 64 KiB: a 3 MB image crosses in a few reads, not fifty wake-ups."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def preimport() -> None:
    """What every child would import anyway, imported once here (and shared copy-on-write after a fork)."""
    import importlib

    for name in STDLIB:
        importlib.import_module(name)
    import matplotlib
    import pyseccomp  # noqa: F401

    matplotlib.use("Agg")
    import matplotlib.pyplot  # builds the font list once
    import numpy  # noqa: F401
    from PIL import Image, ImageDraw, ImageEnhance, ImageFilter, ImageOps  # noqa: F401


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
    zygote = Zygote(config)
    for fd in (0, 1):
        widen_pipe(fd)
    zygote.prepare()
    zygote.send({"type": "hello", "levels": zygote.self_test(), "pid": os.getpid(), "root": zygote.as_root,
                 "landlock": landlock_abi()})
    zygote.serve()


if __name__ == "__main__":
    main()
