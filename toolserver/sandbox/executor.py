"""The server's side of the sandbox: starts the zygote, sends it executions and reads back their results.

Blocking and thread-safe: a tool calls `run` from its worker thread and waits for the result (the zygote
enforces the deadline; the wait here only adds a margin). One reader thread takes the zygote's answers and
hands each to its waiter. A zygote that dies fails what was in flight, and the next execution starts a new one.
The isolation level in force is the highest one the zygote's self-test found; below `min_level`, code is not
run at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgpack
from PIL import Image

from toolserver.imaging import decode_image
from toolserver.sandbox import child as child_side
from toolserver.sandbox.confine import LEVELS, Limits
from toolserver.sandbox.pipes import HEADER

log = logging.getLogger("toolserver.sandbox")
START_TIMEOUT_S = 60
MAX_KEYS_REMEMBERED = 100_000


class SandboxUnavailable(RuntimeError):
    """Code cannot be run here now: the text says why, for the model and the operator."""


@dataclass
class Execution:
    status: str  # ok, error, timeout, cpu_limit, output_too_large, disk_quota, crashed, confinement_failed, busy
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    images: list[Image.Image] = field(default_factory=list)
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    images_dropped: int = 0
    seconds: float = 0.0
    worker_started: bool = False  # a stateful worker was started for this cell (its namespace is new)
    worker_lost: bool = False  # the worker's state is gone (timeout, crash, close): the next cell starts afresh
    details: dict[str, Any] = field(default_factory=dict)  # what an environment's program reports (msgpack types)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class SandboxImage:
    """An image for the code and the names it goes by. The zygote keeps the images it was sent, so a later
    execution with the same image object (a session's pixels are immutable; sessions uploading the same bytes
    share one object) sends only its token: `key` overrides that identity with a name of the caller's."""

    names: Sequence[str]
    image: Image.Image
    key: str | None = None


@dataclass(frozen=True)
class SandboxConfig:
    runtime_dir: Path | None = None  # None: a fresh temporary directory
    uid_base: int = 61000
    slots: int = 8
    min_level: str = "restricted"
    limits: Limits = field(default_factory=Limits)
    timeout_s: float = 10.0
    max_output_bytes: int = 20_000
    max_images: int = 16
    max_pixels: int = 16_777_216
    image_cache_bytes: int = 512 << 20  # decoded images the zygote keeps for later executions
    max_result_bytes: int = 256 << 20  # one execution's whole answer (texts and images); beyond it, killed
    worker_slots: int = 16  # stateful workers alive at once; a new one beyond that ends the least recently used
    user_namespace: bool = False  # a root zygote serves as uid `uid_base - 1`, confining as any unprivileged one
    landlock: bool = True  # False: confine as on a kernel without Landlock (the tests of that path)
    cpu_policy: str = "idle"  # how far below the server code runs: `confine.lower_priority`


class Sandbox:
    def __init__(self, config: SandboxConfig, on_execution: Callable[[str], None] | None = None):
        self.config = config
        self.on_execution = on_execution  # told each execution's outcome (the server's metrics)
        self.levels: dict[str, str] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._pending: dict[int, Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # starting the zygote, and writing to it
        self._slots = threading.BoundedSemaphore(config.slots)
        self._sent: OrderedDict[str, None] = OrderedDict()  # keys of the images the zygote was sent
        self._tokens: dict[int, tuple[weakref.ref[Image.Image], str]] = {}
        self._runtime: tempfile.TemporaryDirectory[str] | None = None
        self.started = False
        self.outcomes: dict[str, int] = {}
        self.workers: set[str] = set()  # the stateful workers this server believes alive
        self.live = 0

    # -- life ---------------------------------------------------------------------------------------
    @property
    def level(self) -> str | None:
        """The isolation level in force: the highest one that works here, if it is at least `min_level`."""
        working = [level for level in LEVELS if self.levels.get(level) == "ok"]
        if not working or LEVELS.index(working[-1]) < LEVELS.index(self.config.min_level):
            return None
        return working[-1]

    def describe(self) -> dict[str, Any]:
        if not self.started:
            return {"isolation": None, "required": self.config.min_level, "state": "starts on first use"}
        return {"isolation": self.level, "required": self.config.min_level, "levels": self.levels,
                "live_executions": self.live, "workers": len(self.workers), "executions": dict(self.outcomes),
                "slots": self.config.slots, "worker_slots": self.config.worker_slots,
                "cpu_policy": self.config.cpu_policy, "disk_mb": self.config.limits.disk_bytes >> 20}

    def start(self) -> None:
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            runtime = self._runtime_dir()
            config = {"runtime_dir": str(runtime), "uid_base": self.config.uid_base, "slots": self.config.slots,
                      "user_namespace": self.config.user_namespace, "landlock": self.config.landlock,
                      "image_cache_bytes": self.config.image_cache_bytes, "worker_slots": self.config.worker_slots}
            self._process = subprocess.Popen([sys.executable, "-m", "toolserver.sandbox.zygote", json.dumps(config)],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
            assert self._process.stdout is not None
            hello = _read_frame(self._process.stdout)
            if hello is None or hello.get("type") != "hello":
                raise SandboxUnavailable("the sandbox's zygote did not start")
            self.levels = dict(hello["levels"])
            self._sent.clear()  # a new zygote holds no images, and no workers
            self.workers.clear()
            self.started = True
            log.info("sandbox started", extra={"levels": self.levels, "isolation": self.level})
            threading.Thread(target=self._read_results, args=(self._process,), daemon=True,
                             name="toolserver-sandbox-reader").start()

    def _runtime_dir(self) -> Path:
        if self.config.runtime_dir is not None:
            self.config.runtime_dir.mkdir(parents=True, exist_ok=True)
            return self.config.runtime_dir
        if self._runtime is None:
            self._runtime = tempfile.TemporaryDirectory(prefix="toolserver-sandbox-")
            os.chmod(self._runtime.name, 0o755)  # the sandbox's users traverse it to their working directories
        return Path(self._runtime.name)

    def stop(self) -> None:
        with self._lock:
            process, self._process = self._process, None
        if process is not None:
            if process.stdin:
                process.stdin.close()  # the zygote ends when its input does; its children die with their groups
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._runtime is not None:
            self._runtime.cleanup()
            self._runtime = None

    def _read_results(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        while (message := _read_frame(process.stdout)) is not None:
            if message.get("attached"):  # the child's own message follows, unread by the zygote
                message["child"] = _read_raw(process.stdout)
                if message["child"] is None:
                    break
            waiter = self._pending.pop(int(message.get("id", -1)), None)
            if waiter is not None:
                waiter.set_result(message)
        failure = SandboxUnavailable("the sandbox's zygote exited; the execution was lost (retry)")
        for request_id in list(self._pending):
            waiter = self._pending.pop(request_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_exception(failure)

    # -- executions -----------------------------------------------------------------------------------
    def run(self, code: str, images: Sequence[SandboxImage] = (), *, timeout_s: float | None = None,
            figure_dpi: float | None = None, figure_bbox: str | None = None, level: str | None = None,
            worker: str | None = None, runner: Mapping[str, Any] | None = None) -> Execution:
        """Runs `code` with each image bound to its names (and all of them, in order, as `images`). `worker`: run
        it as the next cell of that stateful worker (started with this cell, and given the images, if it does not
        exist; kept with its namespace until `close_worker`, a timeout or a crash). `runner`: an environment's
        own runner (`child.Request`: preamble, rewrites, error_style, collect, show_hook). `level`: a level below
        the one in force, for tests that cover every level the host allows."""
        self.start()
        if self.level is None:
            raise SandboxUnavailable(self.unavailable_reason())
        if level is not None and self.levels.get(level) != "ok":
            raise SandboxUnavailable(f"isolation level {level!r} does not work here: {self.levels.get(level)}")
        timeout = self.config.timeout_s if timeout_s is None else timeout_s
        message = {"type": "run", "level": level or self.level, "code": code, "timeout_s": timeout,
                   "limits": dataclasses.asdict(self.config.limits), "max_output_bytes": self.config.max_output_bytes,
                   "max_images": self.config.max_images, "max_pixels": self.config.max_pixels,
                   "max_result_bytes": self.config.max_result_bytes, "figure_dpi": figure_dpi,
                   "figure_bbox": figure_bbox, "worker": worker, "cpu_policy": self.config.cpu_policy,
                   **(runner or {})}
        with self._slots:
            self.live += 1
            try:
                reply = self._execute(message, images, timeout)
                if reply.get("status") == "missing_images":  # the zygote let them go: send them again
                    reply = self._execute(message, images, timeout, resend=True)
            finally:
                self.live -= 1
        execution = self._execution(reply)
        if worker is not None and execution.worker_lost:
            self.workers.discard(worker)
        elif worker is not None:
            self.workers.add(worker)
        self.outcomes[execution.status] = self.outcomes.get(execution.status, 0) + 1
        if self.on_execution is not None:
            self.on_execution(execution.status)
        return execution

    def _execute(self, message: dict[str, Any], images: Sequence[SandboxImage], timeout: float,
                 resend: bool = False) -> dict[str, Any]:
        request_id = next(self._ids)
        waiter: Future[dict[str, Any]] = Future()
        self._pending[request_id] = waiter
        try:
            self._send({**message, "id": request_id, "images": [self._spec(image, resend) for image in images]})
            return waiter.result(timeout + 30)
        finally:
            self._pending.pop(request_id, None)

    def _spec(self, image: SandboxImage, resend: bool) -> dict[str, Any]:
        """An image for the zygote: by key alone when it was sent before, else with its pixels."""
        key = image.key or self._token(image.image)
        spec: dict[str, Any] = {"names": list(image.names), "key": key}
        if key in self._sent and not resend:
            self._sent.move_to_end(key)
            return spec
        pixels = child_side.in_raw_mode(image.image)
        self._sent[key] = None
        while len(self._sent) > MAX_KEYS_REMEMBERED:
            self._sent.popitem(last=False)
        return {**spec, "mode": pixels.mode, "size": list(pixels.size), "data": pixels.tobytes()}

    def _token(self, image: Image.Image) -> str:
        """A name for this image object while it lives (PIL images are unhashable, so by id, checked by a weak
        reference: an id reused by a later object gets a new token)."""
        with self._lock:
            known = self._tokens.get(id(image))
            if known is not None and known[0]() is image:
                return known[1]
            token = f"object-{next(self._ids)}"
            self._tokens[id(image)] = (weakref.ref(image, functools.partial(self._forget, id(image))), token)
            return token

    def _forget(self, ident: int, dead: weakref.ref[Image.Image]) -> None:
        known = self._tokens.get(ident)
        if known is not None and known[0] is dead:
            del self._tokens[ident]

    def close_worker(self, worker: str) -> None:
        """Ends a stateful worker (a session ended); nothing if there is none."""
        if worker not in self.workers:
            return
        self.workers.discard(worker)
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(SandboxUnavailable):
                self._send({"type": "close", "worker": worker})

    def _send(self, message: dict[str, Any]) -> None:
        payload = msgpack.packb(message, use_bin_type=True)
        with self._lock:
            process = self._process
            if process is None or process.stdin is None:
                raise SandboxUnavailable("the sandbox is stopped")
            try:
                process.stdin.write(HEADER.pack(len(payload)) + payload)
                process.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise SandboxUnavailable("the sandbox's zygote exited; retry") from exc

    def _execution(self, reply: dict[str, Any]) -> Execution:
        if reply.get("attached"):
            try:
                reply = {**reply, **child_side.parse(reply.pop("child"))}
            except (ValueError, TypeError, KeyError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
                reply = {**reply, "status": "crashed",
                         "error": "the code's process sent a result that could not be read"}
        images, dropped = [], int(reply.get("images_dropped") or 0)
        for item in reply.get("images") or []:
            image = self._decode(item)
            if image is None:
                dropped += 1
            else:
                images.append(image)
        return Execution(status=str(reply.get("status")), stdout=str(reply.get("stdout") or ""),
                         stderr=str(reply.get("stderr") or ""), error=reply.get("error"), images=images,
                         stdout_dropped=int(reply.get("stdout_dropped") or 0),
                         stderr_dropped=int(reply.get("stderr_dropped") or 0), images_dropped=dropped,
                         seconds=float(reply.get("seconds") or 0.0), worker_started=bool(reply.get("worker_started")),
                         worker_lost=bool(reply.get("worker_lost")),
                         details=reply["details"] if isinstance(reply.get("details"), dict) else {})

    def _decode(self, item: dict[str, Any]) -> Image.Image | None:
        """An image the code produced, checked as an upload would be (the child is not trusted)."""
        data = item.get("data")
        if not isinstance(data, bytes | memoryview):
            return None
        if item.get("format") == "png":
            try:
                return decode_image(bytes(data), max_bytes=len(data), max_pixels=self.config.max_pixels).pixels
            except Exception:
                return None
        mode, size = item.get("mode"), item.get("size")
        if mode not in child_side.RAW_MODES or not isinstance(size, list) or len(size) != 2:
            return None
        width, height = int(size[0]), int(size[1])
        if width <= 0 or height <= 0 or width * height > self.config.max_pixels:
            return None
        if len(data) != width * height * child_side.RAW_MODES[mode]:
            return None
        return Image.frombytes(mode, (width, height), data)

    def unavailable_reason(self) -> str:
        found = "; ".join(f"{level}: {why}" for level, why in self.levels.items())
        working = [level for level in LEVELS if self.levels.get(level) == "ok"]
        best = repr(working[-1]) if working else "none"
        return (f"code execution is off on this server: it requires isolation level {self.config.min_level!r} "
                f"and the best this host allows is {best} ({found})")


def _read_raw(stream: IO[bytes]) -> bytes | None:
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    payload = stream.read(size)
    return payload if len(payload) == size else None


def _read_frame(stream: IO[bytes]) -> dict[str, Any] | None:
    payload = _read_raw(stream)
    if payload is None:
        return None
    message = msgpack.unpackb(payload, raw=False)
    return message if isinstance(message, dict) else None
