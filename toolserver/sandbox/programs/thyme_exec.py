"""Thyme's code-as-tool executor, run inside the sandbox child: `execute_code_in_sandbox` of yfzhang114/Thyme
@ b9285b7a (`swift/trainers/sandbox.py`), rewritten from its observed behaviour and checked against what the
reference itself returned (tests/data/thyme_golden.json). The confinement is ours; the exec semantics are Thyme's:
a regex blacklist on the raw code; its rewrites in its order (first-line indent, dedent, autopep8 aggressive=2,
`image_path` literal, crop-box clamping, `cv.` -> `cv2.`, `/mnt/data/temp_processed_images/` sub-directories and
prefix, `:.Nf}` -> `:.8f}`); `exec` with its builtins and separate globals/locals (on 3.11 comprehensions,
generators and functions do not see the cell's own names); a SIGALRM timer whose exception is an AssertionError
(timeout_decorator's), so a timeout in the cell reads `Code execution failed: 'Timed Out'` and user code may catch
it; its output-image discovery and text fallback; its error texts; the context it hands back, and in `carry` the
trainer's filter of what is kept between turns.

Not reproduced: the reference's diagnostics on the host's stdout (never model-visible) and its temporary chmod of
the input image (the sandbox mounts inputs read-only).
"""

from __future__ import annotations

import ast
import builtins
import cmath
import collections
import contextlib
import datetime
import glob
import importlib
import io
import itertools
import json
import math
import os
import pickle
import random
import re
import shutil
import signal
import string
import textwrap
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import autopep8
import numpy
import PIL
from PIL import Image, UnidentifiedImageError

try:  # optional upstream as well: without it the ImportError text gets its note
    import cv2
except ImportError:
    cv2 = None  # type: ignore[assignment]

DENY_PATTERNS = (r"\bsys\.", r"\bsocket\.", r"\bsubprocess\.", r"\bexec\(", r"\beval\(", r"\bcompile\(",
                 r"\b__import__\(", r"\bos\.(remove|unlink|rmdir)\b", r"\bshutil\.rmtree\b", r"\bshutil\.move\b",
                 r"\bos\.(rename|renames)\b")
MODEL_DIR = "/mnt/data/temp_processed_images/"  # where the model was taught to write its images
QUOTED_MODEL_PATH = re.compile(r"(['\"])(" + re.escape(MODEL_DIR) + r"[^'\"]*)\1")
ONE_DIGIT_FLOAT = re.compile(r":\.\d{1}f}")
ANY_IMAGE_NAME = re.compile(r"([^\s'\"]+\.(?:jpg|jpeg|png|bmp|gif|tiff))")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tiff", ".webp")
GLOB_EXTENSIONS = ("jpg", "jpeg", "png", "bmp", "gif", "tiff")  # no webp, as upstream
MIN_CROP = 64
COORD_NAMES = frozenset({"x1", "y1", "x2", "y2", "left", "top", "right", "bottom"})
BOX_NAMES = frozenset({"crop_box", "bbox", "box", "coordinates", "coords", "crop_coords", "left_crop_coords",
                       "right_crop_coords", "top_crop_coords", "bottom_crop_coords"})
CV_ALIASES = frozenset({"cv", "cv4", "cv3", "CV"})
BUILTIN_NAMES = (  # the reference's builtins in its order; no set, bool, type, getattr, ...
    "print", "len", "str", "int", "float", "list", "dict", "tuple", "range", "round", "abs", "min", "max", "sum",
    "sorted", "any", "all", "zip", "map", "filter", "True", "False", "None", "isinstance", "issubclass", "Exception",
    "ValueError", "TypeError", "AttributeError", "IndexError", "KeyError", "NotImplementedError", "enumerate", "pow",
    "divmod", "bin", "oct", "hex", "complex", "__import__", "globals", "locals", "open", "os", "shutil", "itertools",
    "re", "time", "datetime", "math", "cmath", "collections", "json", "PIL", "random", "UnidentifiedImageError")
UPSTREAM_LIMIT_S = 10  # the outer timeout text names the reference's constant, whatever timer ran


class TimeoutError(AssertionError):  # timeout_decorator's name and base: user code can see both
    """What the alarm raises: an AssertionError, so `except Exception` (the reference's and the cell's) catches it."""

    def __init__(self, value: str = "Timed Out") -> None:
        self.value = value

    def __str__(self) -> str:
        return repr(self.value)


@dataclass
class Outcome:
    paths: list[str]  # processed paths as the reference returns them (the text fallback puts stdout here)
    print_output: str | None
    error: str | None
    context: dict[str, Any] | None  # {'globals': {alias: module name}, 'locals': {name: value}}, None if not run


def denied(code: str) -> bool:
    """The reference's blacklist, searched case-insensitively in the raw extracted code."""
    return any(re.search(pattern, code, re.IGNORECASE) for pattern in DENY_PATTERNS)


def rewrite(code: str, image_path: str, temp_output_dir: str) -> str:
    """Every rewrite in the reference's order, sub-directory creation included; the string that `exec` runs."""
    return _finish(_prepare(code, image_path), temp_output_dir)


def execute(code: str, image_path: str, temp_output_dir: str, item_id: str,
            previous: dict[str, Any] | None, timeout_s: float = 10.0) -> Outcome:
    """The reference's `execute_code_in_sandbox`; `timeout_s` arms the alarm (upstream: 10 s)."""
    if denied(code):
        return Outcome([], "", f"Sandbox for {item_id}: Code contains potentially dangerous system operations such "
                               "as remove. Execution denied.", None)
    os.makedirs(temp_output_dir, exist_ok=True)
    if not os.access(temp_output_dir, os.W_OK):
        raise PermissionError(f"Temporary directory {temp_output_dir} is not writable.")
    try:
        with _alarm(timeout_s):
            return _run(code, image_path, temp_output_dir, item_id, previous)
    except TimeoutError:  # only when it fires outside the exec's own `except Exception`
        return Outcome([], "", f"Sandbox for {item_id}: Execution timed out after {UPSTREAM_LIMIT_S} seconds.", None)


def carry(context: dict[str, Any] | None) -> dict[str, Any] | None:
    """The trainer's `_remove_unpickable_values`: drops values that do not pickle, recursing into (and editing in
    place) every dict value; kept values stay the same objects. `None` (a denied or timed-out call) stays `None`,
    as process_round stores it, and the next call then starts with a fresh namespace, as it would with `{}`."""
    if context is None:
        return None
    for key, value in list(context.items()):
        if isinstance(value, dict):
            carry(value)
        elif not _pickles(value):
            del context[key]
    return context


def _pickles(value: Any) -> bool:
    try:
        return bool(pickle.dumps(value))
    except Exception:
        return False


def _raise_timeout(signum: int, frame: Any) -> None:
    raise TimeoutError()


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """timeout_decorator with use_signals=True: the main thread's ITIMER_REAL, disarmed and restored after."""
    if not seconds:
        yield
        return
    before = signal.signal(signal.SIGALRM, _raise_timeout)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before if before is not None else signal.SIG_DFL)


def _builtins() -> dict[str, Any]:
    modules = {"os": os, "shutil": shutil, "itertools": itertools, "re": re, "time": time, "datetime": datetime,
               "math": math, "cmath": cmath, "collections": collections, "json": json, "PIL": PIL, "random": random}
    known = {**vars(builtins), **modules, "UnidentifiedImageError": UnidentifiedImageError}
    return {name: known[name] for name in BUILTIN_NAMES}


def _globals() -> dict[str, Any]:
    env = {"__builtins__": _builtins(), "os": os, "random": random, "string": string, "math": math, "Image": Image,
           "UnidentifiedImageError": UnidentifiedImageError, "numpy": numpy, "np": numpy, "json": json, "re": re}
    if cv2 is not None:
        env["cv2"] = cv2
    return env


def _run(code: str, image_path: str, out_dir: str, item_id: str, previous: dict[str, Any] | None) -> Outcome:
    """Everything under the timer: namespace, rewrites, exec, discovery, context."""
    env = _globals()
    scope: dict[str, Any] = {"image_path": image_path, "temp_output_dir": out_dir}
    if previous:
        scope.update(previous.get("locals", {}))  # a carried image_path / temp_output_dir wins over the fresh one
        for alias, name in previous.get("globals", {}).items():
            with contextlib.suppress(ImportError):
                scope[alias] = importlib.import_module(name)
    code = _prepare(code, image_path)
    paths: list[str] = []
    printed: str | None = None
    error: str | None = None
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            code = _finish(code, out_dir)
            exec(code, env, scope)
        printed = captured.getvalue().strip()
        error = _processed_path(scope, previous, out_dir, item_id, paths)
        if printed:
            error = _printed_paths(printed, out_dir, item_id, paths, error)
            if not paths and out_dir not in code:  # text result, unless the code named the directory
                paths.append(printed)
    except ImportError as err:
        error = (f"Sandbox for {item_id}: Code execution failed due to ImportError. Ensure all required modules are "
                 f"available and correctly named: {err}")
        if "cv2" in str(err).lower() and not cv2:
            error += f"(Note: cv2 was not available in the sandbox host environment): {err}"
    except MemoryError as err:
        error = (f"Sandbox for {item_id}: Code execution failed due to MemoryError. The operation likely consumed "
                 f"too much memory: {err}")
    except SyntaxError as err:
        error = f"Sandbox for {item_id}: Code execution failed due to SyntaxError: {err}"
    except Exception as err:
        error = f"Sandbox for {item_id}: Code execution failed: {err}"
    return Outcome(paths, printed, error, _context(scope, env))


def _context(scope: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    """What the call hands back: names of the sandbox globals (as they are after exec) are left out."""
    modules: dict[str, str] = {}
    values: dict[str, Any] = {}
    for name, value in scope.items():
        if name == "__builtins__" or name in env:
            continue
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__
        else:
            values[name] = value
    return {"globals": modules, "locals": values}


def _processed_path(scope: dict[str, Any], previous: dict[str, Any] | None, out_dir: str, item_id: str,
                    paths: list[str]) -> str | None:
    """Route 1: a `processed_path` local, only while no earlier turn of the trajectory carried one."""
    if "processed_path" not in scope or (previous and "processed_path" in previous.get("locals", {})):
        return None
    value = scope["processed_path"]
    if isinstance(value, str) and value.startswith(out_dir) and os.path.isfile(value):
        paths.append(value)
        return None
    if isinstance(value, str) and value.startswith(out_dir) and not os.path.exists(value):
        return f"Sandbox for {item_id}: 'processed_path' variable set to '{value}', but file does not exist."
    if value is not None:
        return (f"Sandbox for {item_id}: 'processed_path' variable was '{value}', which is not a valid file path "
                f"in {out_dir}.")
    return None


def _printed_paths(printed: str, out_dir: str, item_id: str, paths: list[str], error: str | None) -> str | None:
    """Routes 2 and 3: image paths under the directory in stdout, else the directory's glob when the number of
    printed paths (or of any image-like names) equals the number of files; else the print error (maybe "")."""
    saved = [path for ext in GLOB_EXTENSIONS for path in glob.glob(os.path.join(out_dir, f"*.{ext}"))]
    found = 0
    print_error = ""
    for match in re.finditer(rf"({re.escape(out_dir)}[^\s'\"]+\.(?:jpg|jpeg|png|bmp|gif|tiff))", printed):
        found += 1
        path = match.group(1)
        if os.path.isfile(path):
            if path not in paths:
                paths.append(path)
        elif not error:
            print_error = (f"Sandbox for {item_id}: Path '{path}' found in print, but file does not exist or is not "
                           "a file.")
    if paths:
        return error
    if found == len(saved) or len(ANY_IMAGE_NAME.findall(printed)) == len(saved):
        paths.extend(saved)
        return error
    return print_error


def _prepare(code: str, image_path: str) -> str:
    """Rewrites 1-5 (before the captured stdout begins)."""
    code = _format(_align_first_line(code))
    if image_path and isinstance(image_path, str):
        code = _transform(code, partial(_fix_image_path, image_path=image_path))
    size = _image_size(image_path) if image_path and os.path.isfile(image_path) else None
    if size is not None:
        code = _transform(code, partial(_clamp_box, size=size))
    return _transform(code, _fix_cv_name)


def _finish(code: str, out_dir: str) -> str:
    """Rewrite 6: sub-directories (spaces dropped only here), the model's directory, float precision."""
    target = out_dir if out_dir.endswith("/") else out_dir + "/"
    for quoted in {match.group(2) for match in QUOTED_MODEL_PATH.finditer(code)}:
        subdir = os.path.dirname(quoted[len(MODEL_DIR):].replace(" ", ""))
        if subdir:
            os.makedirs(os.path.join(out_dir, subdir), exist_ok=True)
    return ONE_DIGIT_FLOAT.sub(":.8f}", code.replace(MODEL_DIR, target))


def _align_first_line(code: str) -> str:
    lines = code.splitlines()
    filled = list(itertools.islice((i for i, line in enumerate(lines) if line.strip()), 2))
    if len(filled) < 2:
        return code
    first, second = lines[filled[0]], lines[filled[1]]
    indent = len(second) - len(second.lstrip(" "))
    if len(first) - len(first.lstrip(" ")) != indent:
        lines[filled[0]] = " " * indent + first.lstrip(" ")
    return "\n".join(lines)  # a trailing newline is lost, as upstream


def _format(code: str) -> str:
    with contextlib.suppress(Exception):  # autopep8 failing (or the alarm inside it) leaves the code as it was
        code = textwrap.dedent(code).strip()
        code = autopep8.fix_code(code, options={"aggressive": 2})
    return code


def _transform(code: str, change: Callable[[ast.AST], bool]) -> str:
    """Applies `change` to every node; the code is unparsed (comments lost) only if something changed. Code that
    does not parse, or any error on the way, leaves it as it was."""
    try:
        tree = ast.parse(code)
        changed = [change(node) for node in ast.walk(tree)]
        return ast.unparse(tree) if any(changed) else code
    except Exception:
        return code


def _fix_image_path(node: ast.AST, image_path: str) -> bool:
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "image_path" and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)):
        return False
    literal = node.value.value
    if os.path.exists(literal) and os.path.isfile(literal) and literal.lower().endswith(IMAGE_SUFFIXES):
        return False
    node.value = ast.Constant(value=image_path)
    return True


def _fix_cv_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in CV_ALIASES:
        node.value.id = "cv2"
        return True
    return False


def _image_size(path: str) -> tuple[int, int] | None:
    with contextlib.suppress(Exception), Image.open(path) as image:
        return image.size
    return None


def _box_literal(node: ast.AST) -> ast.Tuple | None:
    """The 4-tuple literal of `x1, y1, x2, y2 = (...)` (any coordinate-like name among the four) or of
    `crop_box = (...)` and its kin; list literals and slices are not looked at, as upstream (its slice case is
    dead on Python >= 3.9)."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Tuple)
            and len(node.value.elts) == 4):
        return None
    target = node.targets[0]
    if isinstance(target, ast.Tuple):
        names = [elt.id.lower() for elt in target.elts if isinstance(elt, ast.Name)]
        return node.value if len(names) == len(target.elts) == 4 and COORD_NAMES.intersection(names) else None
    return node.value if isinstance(target, ast.Name) and target.id in BOX_NAMES else None


def _number(node: ast.expr) -> Any:
    # complex counts (ast.Num did) and then fails in min(), which abandons the whole clamping pass, as upstream
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | complex):
        return node.value
    return None


def _clamp_box(node: ast.AST, size: tuple[int, int]) -> bool:
    box = _box_literal(node)
    values = [_number(elt) for elt in box.elts] if box is not None else []
    if box is None or any(value is None for value in values):
        return False
    x1, x2 = _clamp_span(min(values[0], values[2]), max(values[0], values[2]), float(size[0]))
    y1, y2 = _clamp_span(min(values[1], values[3]), max(values[1], values[3]), float(size[1]))
    final = [round(value) for value in (x1, y1, x2, y2)]
    if final == [round(value) for value in values]:
        return False
    box.elts = [ast.Constant(value=value) for value in final]
    return True


def _clamp_span(low: Any, high: Any, extent: float) -> tuple[Any, Any]:
    """One axis of the reference's clamping: inside the image, ordered, at least MIN_CROP long where it fits."""
    start = min(max(0.0, low), extent - 1.0 if extent > 0 else 0.0)
    end = min(max(0.0, high), extent)
    if start >= end and extent > 0:
        start = max(0.0, end - 1.0)
        if end <= start:
            end = min(extent, start + 1.0)
    if extent > 0 and end - start < MIN_CROP:
        if extent < MIN_CROP:
            start, end = 0.0, extent
        else:
            end = start + MIN_CROP
            if end > extent:
                end = extent
                start = max(0.0, end - MIN_CROP)
    if extent > 0 and start >= end:
        end = min(extent, start + 1.0)
    return start, end
