"""What runs inside one confined sandbox child: the session's images as PIL images under their names, the code,
and what it printed, raised and showed, sent back to the zygote as one msgpack message.

Output goes to files, not to Python objects, so that a C library's prints and a `os.write(1, ...)` are kept in
order with `print` and bounded by the file-size limit; only the first `max_output_bytes` of each are read back.
Images come back as `plt.show()` figures (PNG, as matplotlib saves them) and as whatever the code passes to
`display()` (raw pixels), at most `max_images` of at most `max_pixels` each.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import importlib
import io
import linecache
import os
import struct
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np
from PIL import Image

from toolserver.sandbox.pipes import read_message

CODE_NAME = "<code>"
STDOUT, STDERR = ".stdout", ".stderr"
FRAME = struct.Struct(">II")  # the lengths of a result's msgpack part and of its image bytes
PROGRAMS = ("deepeyes_v2", "thyme", "codedance")  # the modules of `toolserver.sandbox.programs` a runner names
RAW_MODES = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}  # the modes pixels cross the pipes in, and bytes per pixel


@dataclass
class Request:
    code: str
    images: list[tuple[list[str], Image.Image]]  # the names of each image, and the image
    max_output_bytes: int = 20_000
    max_images: int = 16
    max_pixels: int = 16_777_216
    figure_dpi: float | None = None  # None: each figure's own dpi
    figure_bbox: str | None = None  # "tight" to crop figures to their content
    # An environment's own runner (the code-as-tool profiles), as data: what its namespace runs first, how the
    # code is rewritten before it runs, how an error reads, and which list its figures are collected in.
    preamble: str = ""  # run once when the namespace is made (after the images are bound)
    rewrites: list[list[str]] = field(default_factory=list)  # literal [old, new] replacements of the code
    error_style: str = "traceback"  # or "message": `str(exc)` alone
    collect: str | None = None  # a list in the namespace: what the code appends to it is the cell's images
    show_hook: bool = True  # `plt.show()` shows every open figure (off: the preamble decides)
    close_on_error: bool = False  # an error closes every open figure
    filename: str = CODE_NAME  # what tracebacks and syntax errors call the code (`exec` of a string: "<string>")
    # An environment whose cells are more than `exec` (its own shell, rewrites, outputs): its module in
    # `toolserver.sandbox.programs`, which runs each cell, and what that module is told.
    program: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, message: dict[str, Any]) -> Request:
        fields = {k: message[k] for k in cls.__dataclass_fields__ if k in message and k != "images"}
        return cls(images=message.get("resolved", []), **fields)


@dataclass
class Collected:
    """What the execution in progress shows. A stateful worker keeps one namespace and starts a new `Collected`
    (with that cell's request) for each cell."""

    request: Request
    images: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0


class Cells:
    """A namespace that cells run in one after another (one execution is a single cell)."""

    def __init__(self, first: Request) -> None:
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self.current = Collected(first)
        self.state: dict[str, Any] = {}  # a program's own, kept between cells (its shell)
        if first.program is None:  # our own names; an environment's program makes the namespace its way
            self.namespace["images"] = []
            self.namespace["display"] = lambda obj: _keep_image(obj, self.current)
        if first.show_hook:
            _hook_matplotlib(self)
        self.preamble = first.preamble

    def start(self, request: Request) -> Collected:
        """The cell's images bound under their names (added to `images`), and a fresh `Collected`."""
        for names, image in request.images:
            self.namespace.update(dict.fromkeys(names, image))
            if "images" in self.namespace and isinstance(self.namespace["images"], list):
                self.namespace["images"].append(image)
        self.current = Collected(request)
        return self.current

    def run_preamble(self) -> None:
        """The environment's header, once (inside the first cell's error handling: a failing header is that
        cell's error)."""
        if self.preamble:
            preamble, self.preamble = self.preamble, ""
            exec(compile(preamble, "<preamble>", "exec"), self.namespace)


def _keep_image(obj: Any, collected: Collected) -> None:
    """`display(image)`: a PIL image or an array (H×W, H×W×3, H×W×4) joins the call's results."""
    if isinstance(obj, np.ndarray):
        array = obj if obj.dtype == np.uint8 else np.clip(obj, 0, 255).astype(np.uint8)
        obj = Image.fromarray(array)
    if not isinstance(obj, Image.Image):
        raise TypeError(f"display() takes a PIL image or a numpy array, not {type(obj).__name__}")
    obj = in_raw_mode(obj)
    collect(collected, {"kind": "image", "format": "raw", "mode": obj.mode, "size": list(obj.size),
                         "data": obj.tobytes()}, obj.size)


def in_raw_mode(image: Image.Image) -> Image.Image:
    """The image in one of `RAW_MODES` (with alpha where it had any, or a palette), as it crosses the pipes."""
    if image.mode in RAW_MODES:
        return image
    return image.convert("RGBA" if "A" in image.getbands() or image.mode == "P" else "RGB")


def collect(collected: Collected, item: dict[str, Any], size: tuple[int, int]) -> None:
    request = collected.request
    if len(collected.images) >= request.max_images or size[0] * size[1] > request.max_pixels:
        collected.dropped += 1
        return
    collected.images.append(item)


def _hook_matplotlib(cells: Cells) -> None:
    import matplotlib.pyplot as plt

    def show(*_args: Any, **_kwargs: Any) -> None:
        collected = cells.current
        request = collected.request
        for number in plt.get_fignums():
            figure = plt.figure(number)
            buffer = io.BytesIO()
            options: dict[str, Any] = {"format": "png"}
            if request.figure_dpi is not None:
                options["dpi"] = request.figure_dpi
            if request.figure_bbox is not None:
                options["bbox_inches"] = request.figure_bbox
            figure.savefig(buffer, **options)
            width, height = (int(v) for v in figure.get_size_inches() * (request.figure_dpi or figure.dpi))
            collect(collected, {"kind": "figure", "format": "png", "data": buffer.getvalue()}, (width, height))
        plt.close("all")

    plt.show = show


def execute(request: Request, cells: Cells | None = None) -> dict[str, Any]:
    """Runs the code (in `cells`' namespace, or a fresh one) with stdout and stderr going to files in the
    working directory; never raises."""
    cells = cells or Cells(request)
    collected = cells.start(request)
    code = request.code
    for old, new in request.rewrites:
        code = code.replace(old, new)
    before = 0
    out = os.open(STDOUT, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(STDERR, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(err, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    os.close(out)
    os.close(err)
    error, details = None, {}
    try:
        cells.run_preamble()
        kept = cells.namespace.get(request.collect) if request.collect else None
        before = len(kept) if isinstance(kept, list) else 0  # what was there before the cell is not its own
        if request.program is not None:
            error, details = load_program(request.program).run_cell(code, request, cells)
        else:
            # Tracebacks quote the code's lines, as they would from a file.
            linecache.cache[request.filename] = (len(code), None, code.splitlines(True), request.filename)
            exec(compile(code, request.filename, "exec"), cells.namespace)  # the point of the sandbox
    except BaseException as exc:  # SystemExit and KeyboardInterrupt are the code's too
        error = str(exc) if request.error_style == "message" else _user_traceback(exc, request.filename)
    if error is not None and request.close_on_error:
        with contextlib.suppress(Exception):
            import matplotlib.pyplot as plt

            plt.close("all")
    if request.collect and error is None:
        _collect_list(collected, cells.namespace.get(request.collect), before)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a full file-size limit
            stream.flush()
    stdout, stdout_more = _read_capped(STDOUT, request.max_output_bytes)
    stderr, stderr_more = _read_capped(STDERR, request.max_output_bytes)
    return {"status": "ok" if error is None else "error", "stdout": stdout, "stdout_dropped": stdout_more,
            "stderr": stderr, "stderr_dropped": stderr_more, "error": error, "images": collected.images,
            "images_dropped": collected.dropped, "details": details}


def capped(text: str, limit: int, name: str) -> str:
    """`text` within `limit` bytes of UTF-8, with the marker `run_python` uses where it was cut (a program's texts
    are bounded like the streams are)."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore") + f"\n[{name} truncated: {len(data) - limit} more bytes not shown]"


def workdir() -> str:
    """The working directory, the one place the child may write, as an absolute path it can use: through
    `/proc/self/cwd` where there is a `/proc` (the `restricted` level), since the directories above it need not be
    the child's to traverse."""
    return "/proc/self/cwd" if os.path.isdir("/proc/self/cwd") else os.getcwd()


def load_program(name: str) -> Any:
    """An environment's cell runner, by its name in `programs.PROGRAMS` (nothing else is importable this way)."""
    if name not in PROGRAMS:
        raise ValueError(f"no sandbox program {name!r}")
    return importlib.import_module(f"toolserver.sandbox.programs.{name}")


def _collect_list(collected: Collected, kept: Any, before: int) -> None:
    """What the cell appended to an environment's figure list: PIL images, PNG bytes or base64 PNG text."""
    if not isinstance(kept, list):
        return
    for item in kept[before:]:
        if isinstance(item, Image.Image):
            _keep_image(item, collected)
        elif isinstance(item, bytes | str):
            data = base64.b64decode(item) if isinstance(item, str) else item
            with contextlib.suppress(Exception):
                size = Image.open(io.BytesIO(data)).size
                collect(collected, {"kind": "figure", "format": "png", "data": data}, size)


def _user_traceback(exc: BaseException, filename: str) -> str:
    """The traceback from the code's own frames on (the runner's frames are not the model's business)."""
    frames = traceback.extract_tb(exc.__traceback__)
    first = next((i for i, frame in enumerate(frames) if frame.filename == filename), len(frames))
    exc.__traceback__ = _skip(exc.__traceback__, first)
    return "".join(traceback.format_exception(exc))


def _skip(tb: Any, count: int) -> Any:
    for _ in range(count):
        if tb is None:
            break
        tb = tb.tb_next
    return tb


def _read_capped(path: str, limit: int) -> tuple[str, int]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
            total = os.fstat(handle.fileno()).st_size
    except OSError:
        return "", 0
    kept = data[:limit]
    return kept.decode("utf-8", errors="replace"), max(0, total - len(kept))


def send(fd: int, result: dict[str, Any]) -> None:
    """The result as one message: its two lengths, the msgpack of everything but the image bytes, then the image
    bytes as they are (no copy into the msgpack; the zygote passes the message on unread). The zygote ends the
    run as soon as the message is whole, whatever the code left running (a forked process shares the pipe)."""
    blobs, offset = [], 0
    for item in result.get("images", []):
        data = item.pop("data")
        item["offset"], item["length"] = offset, len(data)
        blobs.append(data)
        offset += len(data)
    meta = msgpack.packb(result, use_bin_type=True)
    for part in (FRAME.pack(len(meta), offset), meta, *blobs):
        view = memoryview(part)
        while view:
            view = view[os.write(fd, view):]


def frame_length(buffer: bytes | bytearray) -> int | None:
    """The length of the whole message whose start is in `buffer`, once its header is."""
    if len(buffer) < FRAME.size:
        return None
    meta, blobs = FRAME.unpack_from(buffer)
    return FRAME.size + meta + blobs


def parse(frame: bytes | bytearray) -> dict[str, Any]:
    """A child's message, checked (the child is not trusted): its images' `data` as views into `frame`."""
    if frame_length(frame) != len(frame):
        raise ValueError("a result message of the wrong length")
    meta_size, _ = FRAME.unpack_from(frame)
    result = msgpack.unpackb(bytes(frame[FRAME.size:FRAME.size + meta_size]), raw=False)
    if not isinstance(result, dict) or not isinstance(result.get("status"), str):
        raise ValueError("a result message without a status")
    blobs = memoryview(frame)[FRAME.size + meta_size:]
    for item in result.get("images") or []:
        start, length = int(item["offset"]), int(item["length"])
        if not 0 <= start <= start + length <= len(blobs):
            raise ValueError("an image outside its message")
        item["data"] = blobs[start:start + length]
    return result


def serve_cells(requests_fd: int, result_fd: int, first: Request) -> None:
    """A stateful worker: runs `first`, then each cell the zygote writes to `requests_fd`, in one namespace,
    answering each on `result_fd`, until its requests end. Later cells carry code only (their images were given
    with the first), so a cell always fits the pipe and the zygote never blocks on a worker."""
    cells = Cells(first)
    request = first
    while True:
        send(result_fd, execute(request, cells))
        message = read_message(requests_fd)
        if message is None:
            return
        request = Request.of(message)
