"""CodeDance's cells inside the sandbox: `execute_code_in_worker` and `worker_main_loop` of CodeDance-VL/CodeDance
@ 62f8c6f5 (`verl/tools/code_tool.py`), written from the reference and checked against its own runs
(tests/data/codedance_golden.json). The confinement is ours; what a cell does and returns is CodeDance's:

- one namespace (globals and locals alike) per session, holding `plt`, the builtins and `input_image_path`; the
  image, saved once as `input_image.jpg` (Pillow's default JPEG) in the session's directory, is opened as
  `input_image` before a cell that lacks it; a cell runs in that directory;
- a cell whose last statement is an expression has it evaluated (`display(x)` evaluates `x`): a PIL object is the
  cell's image, a 2-D or 3-D numpy array too (floats ×255, other types cast to bytes, three channels reversed from
  BGR), anything else is printed; `plt.show()` returns the current figure if it has axes (tight, 150 dpi) and closes
  it, `Image.show()` returns the image; the cell's images are the expression's, then the figures, then the shown
  images, each dropped at an aspect ratio over 200, enlarged (Lanczos) to a short side of 112 when under 56, in RGB
  or RGBA;
- only Python-level stdout and stderr are the cell's; `exit()`, `quit()` and `sys.exit()` stop the cell with its
  note; `signal.alarm` is refused; OpenCV's windows are refused; an alarm after `timeout_s` (whole seconds) raises
  `TimeoutError` where the code is;
- a cell that fails loses the session's namespace (the next one starts from the input image again).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import gc
import io
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from toolserver.sandbox.child import capped, collect, in_raw_mode, workdir

if TYPE_CHECKING:
    from toolserver.sandbox.child import Cells, Request

EXIT_NOTE = "\nNOTE: Code execution was halted by a call to exit() or quit(). Do not use exit() or quit() in your code."
GUI_TEXT = ("cv2 GUI functions (e.g. namedWindow / waitKey / destroyAllWindows) are disabled inside the execution "
            "sandbox. Use matplotlib or PIL to display images instead.")
GUI_FUNCTIONS = ("imshow", "imshowMulti", "namedWindow", "startWindowThread", "waitKey", "waitKeyEx", "pollKey",
                 "destroyAllWindows", "destroyWindow", "createTrackbar", "getTrackbarPos", "setTrackbarPos",
                 "setTrackbarMin", "setTrackbarMax", "selectROI", "selectROIs")
MAX_ASPECT_RATIO, MIN_FIGURE_PX, MIN_SIDE, TARGET_SIDE, CAPTURE_DPI = 200, 28, 56, 112, 150


class SandboxExit(Exception):
    def __init__(self, code: int = 0):
        self.code = code
        super().__init__(f"Sandboxed exit with code {code}")


@dataclass
class Outcome:
    success: bool = True
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    error_type: str | None = None
    images: list[Image.Image] = field(default_factory=list)


def run_cell(code: str, request: Request, cells: Cells) -> tuple[str | None, dict[str, Any]]:
    state, options = cells.state, request.options
    if not state:
        _start(state, cells.namespace.get(str(options.get("image_name", ""))))
    namespace = state["namespace"]
    if state["image_path"] and "input_image_path" not in namespace and "input_image" not in namespace:
        namespace["input_image_path"] = state["image_path"]
    outcome = execute(code, namespace, state["directory"], float(options.get("timeout_s", 15.0)))
    if not outcome.success:
        state["namespace"] = {}
    for image in outcome.images if outcome.success else []:
        image = in_raw_mode(image)
        collect(cells.current, {"kind": "image", "format": "raw", "mode": image.mode, "size": list(image.size),
                                "data": image.tobytes()}, image.size)
    limit = request.max_output_bytes
    return None, {"success": outcome.success, "stdout": capped(outcome.stdout, limit, "stdout"),
                  "stderr": capped(outcome.stderr, limit, "stderr"), "error": outcome.error,
                  "error_type": outcome.error_type}


def _start(state: dict[str, Any], image: Any) -> None:
    """The worker as CodeDance starts one (no windows for OpenCV), and the session's directory with its image."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import cv2

    def gui_disabled(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError(GUI_TEXT)

    for name in GUI_FUNCTIONS:
        if hasattr(cv2, name):
            setattr(cv2, name, gui_disabled)
    state["directory"] = os.path.join(workdir(), "codedance")
    os.makedirs(state["directory"], exist_ok=True)
    state["image_path"] = None
    if isinstance(image, Image.Image):
        state["image_path"] = os.path.join(state["directory"], "input_image.jpg")
        image.convert("RGB").save(state["image_path"], format="JPEG")
    state["namespace"] = {}


def encodable(image: Any) -> Image.Image | None:
    """An image as CodeDance encodes it for the model (its `_process_and_encode_image`), or None where it drops it."""
    width, height = image.size
    if min(width, height) == 0:
        return None
    limit = getattr(Image, "MAX_IMAGE_PIXELS", None)
    if limit is not None and width * height > limit:
        return None
    if max(width, height) / min(width, height) > MAX_ASPECT_RATIO:
        return None
    if width < MIN_SIDE or height < MIN_SIDE:
        scale = TARGET_SIDE / min(width, height)
        image = image.resize((int(width * scale), int(height * scale)), Image.Resampling.LANCZOS)
    if image.mode not in ("RGB", "RGBA"):
        image = image.convert("RGB")
    return image.copy()  # encoded when shown there: what the code does to it afterwards is not shown


def _array_image(value: Any) -> Image.Image | None:
    """A numpy array shown as an image, or None where CodeDance prints it instead."""
    if not (value.ndim in (2, 3) and value.size > 1):
        print(value)
        return None
    array = value
    if array.dtype != np.uint8:
        array = (array.clip(0, 1) * 255).astype(np.uint8) if np.issubdtype(array.dtype, np.floating) \
            else array.astype(np.uint8)
    if array.ndim == 3 and array.shape[2] == 3:
        array = array[:, :, ::-1]
    return encodable(Image.fromarray(array))


def _last_value(value: Any, shown: list[Image.Image]) -> None:
    kind = str(type(value))
    if "PIL" in kind:
        try:
            image = encodable(value)
            if image is not None:
                shown.append(image)
        except Exception as exc:
            print(f"ERROR: Failed to display PIL Image: {exc}\n", file=sys.stderr)
    elif "numpy.ndarray" in kind:
        try:
            image = _array_image(value)
            if image is not None:
                shown.append(image)
        except Exception as exc:
            print(f"ERROR: Failed to display numpy.ndarray as Image: {exc}\n", file=sys.stderr)
    elif value is not None:
        print(value)


def _run(code: str, namespace: dict[str, Any], shown: list[Image.Image]) -> None:
    """The cell: its statements, then its last expression's value shown or printed."""
    try:
        tree = ast.parse(code, mode="exec")
    except SyntaxError:
        exec(code, namespace, namespace)  # raises the SyntaxError as `exec` reports it
        return
    if not (tree.body and isinstance(tree.body[-1], ast.Expr)):
        exec(code, namespace, namespace)  # the point of the sandbox
        return
    last = tree.body[-1].value
    if len(tree.body) > 1:
        exec(compile(ast.Module(body=tree.body[:-1], type_ignores=[]), "<ast>", "exec"), namespace, namespace)
    if isinstance(last, ast.Call) and getattr(last.func, "id", None) == "display" and len(last.args) == 1:
        last = last.args[0]
    _last_value(eval(compile(ast.Expression(body=last), "<ast>", "eval"), namespace, namespace), shown)


@contextlib.contextmanager
def _captures(figures: list[Image.Image], shown_by_pil: list[Image.Image]) -> Any:
    """`plt.show()` and `Image.show()` as CodeDance patches them for the cell."""
    import matplotlib.pyplot as plt

    original_show, original_pil_show = plt.show, Image.Image.show

    def show_figure(*_args: Any, **_kwargs: Any) -> None:
        figure = plt.gcf()
        if not (figure and figure.get_axes()):
            return
        try:
            _keep_figure(figure, figures)
        finally:
            plt.close(figure)

    def show_image(self: Image.Image, *_args: Any, **_kwargs: Any) -> None:
        try:
            image = encodable(self)
            if image is not None:
                shown_by_pil.append(image)
        except Exception as exc:
            print(f"ERROR [capture_pil_show]: Failed to save figure via show(): {exc}\n", file=sys.stderr)

    plt.show, Image.Image.show = show_figure, show_image  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        plt.show, Image.Image.show = original_show, original_pil_show  # type: ignore[method-assign]


def _keep_figure(figure: Any, figures: list[Image.Image]) -> None:
    try:
        width_in, height_in = figure.get_size_inches()
        dpi = figure.get_dpi() or 72
        width, height = width_in * dpi, height_in * dpi
        ratio = float("inf") if min(width, height) == 0 else max(width, height) / min(width, height)
        limit = getattr(Image, "MAX_IMAGE_PIXELS", None)
        if (limit is not None and width * height > limit) or ratio > MAX_ASPECT_RATIO or width < MIN_FIGURE_PX \
                or height < MIN_FIGURE_PX:
            return
    except Exception:  # the reference shows a figure whose size it cannot check
        pass
    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", bbox_inches="tight", dpi=CAPTURE_DPI)
        buffer.seek(0)
        try:
            image = encodable(Image.open(buffer))
            if image is not None:
                figures.append(image)
        except Exception as exc:
            print(f"ERROR [capture_plt_show]: Failed to process figure {figure.number}: {exc}\n", file=sys.stderr)
    except Exception as exc:
        print(f"ERROR [capture_plt_show]: Failed to save figure {figure.number}: {exc}\n", file=sys.stderr)


def execute(code: str, namespace: dict[str, Any], directory: str, timeout_s: float) -> Outcome:
    """One cell, as CodeDance's worker runs it: never raises past the code's own `BaseException`s."""
    import matplotlib.pyplot as plt

    def on_alarm(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"Code execution timed out after {timeout_s} seconds")

    previous_handler = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(timeout_s))
    alarm = signal.alarm

    def alarm_refused(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("signal.alarm() is disabled inside the sandbox.")

    def stop(code: int = 0) -> None:
        raise SandboxExit(code)

    signal.alarm = alarm_refused  # type: ignore[assignment]
    namespace.update({"plt": plt, "__builtins__": vars(builtins)})
    exits = (getattr(builtins, "exit", None), getattr(builtins, "quit", None), sys.exit)
    builtins.exit = builtins.quit = sys.exit = stop  # type: ignore[assignment]
    _open_input(namespace)
    stdout, stderr = io.StringIO(), io.StringIO()
    figures: list[Image.Image] = []
    shown_by_pil: list[Image.Image] = []
    outcome = Outcome()
    cwd = os.getcwd()
    try:
        os.chdir(directory)
        with _captures(figures, shown_by_pil), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            _run(code, namespace, outcome.images)
            outcome.images += figures + shown_by_pil
    except SandboxExit:
        outcome.stdout = stdout.getvalue() + EXIT_NOTE
    except TimeoutError as exc:
        outcome = Outcome(False, stdout.getvalue(), stderr.getvalue(), str(exc), "TimeoutError")
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, SyntaxError) and exc.lineno is not None:
            text += f" (line {exc.lineno})"
        outcome = Outcome(False, stdout.getvalue(), stderr.getvalue(), text)
    finally:
        signal.alarm = alarm
        alarm(0)
        signal.signal(signal.SIGALRM, previous_handler)
        os.chdir(cwd)
        if exits[0] is not None:
            builtins.exit = exits[0]
        if exits[1] is not None:
            builtins.quit = exits[1]
        sys.exit = exits[2]
        plt.close("all")
        gc.collect()
    if outcome.success:
        outcome.stdout = outcome.stdout or stdout.getvalue()
        outcome.stderr = stderr.getvalue()
    return outcome


def _open_input(namespace: dict[str, Any]) -> None:
    if "input_image_path" in namespace and "input_image" not in namespace:
        path = namespace.get("input_image_path")
        with contextlib.suppress(Exception):  # the reference warns on its worker's own stderr, which no one reads
            if isinstance(path, str) and os.path.exists(path):
                namespace["input_image"] = Image.open(path)
