"""Thyme's executor (toolserver/sandbox/programs/thyme_exec.py) against what the reference itself returned
(tests/data/thyme_golden.json, recorded by driving Thyme's own `execute_code_in_sandbox` through its trainer's
`process_round`): every recorded call is replayed in order, in-process, with the same inputs, working directory,
output directories and carried context, and must give the same executed code, paths, stdout, error, context
summary and output pixels. What the trainer does with the result (observation text, aspect-ratio check, image cap)
is not this module's and is not checked here."""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from toolserver.sandbox.programs import thyme_exec as thyme

GOLDEN = json.loads((Path(__file__).parent / "data" / "thyme_golden.json").read_text())
CASES = {case["name"]: case for case in GOLDEN["cases"]}


def make_inputs(root: Path) -> dict[str, str]:
    """The reference harness's `make_inputs()`: gradients with a 16 px checkerboard in blue."""
    folder = root / "inputs"
    folder.mkdir(parents=True)
    paths = {}
    for name, (w, h) in {"scene": (640, 480), "tiny": (50, 40), "other": (200, 100)}.items():
        y, x = np.mgrid[0:h, 0:w]
        pixels = np.zeros((h, w, 3), np.uint8)
        pixels[..., 0] = (x * 255 // max(w - 1, 1)).astype(np.uint8)
        pixels[..., 1] = (y * 255 // max(h - 1, 1)).astype(np.uint8)
        pixels[..., 2] = (((x // 16) + (y // 16)) % 2 * 255).astype(np.uint8)
        path = folder / f"{name}_{w}x{h}.png"
        Image.fromarray(pixels).save(path)
        paths[name] = str(path)
    return paths


def image_info(path: str) -> dict[str, Any]:
    with Image.open(path) as image:
        image.load()
        return {"path": path, "exists": True, "format": image.format, "mode": image.mode, "size": list(image.size),
                "pixels_sha256": hashlib.sha256(image.tobytes()).hexdigest()}


def summary(context: dict[str, Any] | None) -> dict[str, Any] | None:
    """The harness's summary: module aliases as they are, locals as type names."""
    if context is None:
        return None
    kinds = {"globals": dict, "locals": lambda names: {k: type(v).__name__ for k, v in names.items()}}
    return {key: kinds[key](value) for key, value in context.items()}


def rooted(value: Any, root: Path) -> Any:
    if isinstance(value, str):
        return value.replace("{ROOT}", str(root))
    if isinstance(value, list):
        return [rooted(item, root) for item in value]
    if isinstance(value, dict):
        return {key: rooted(item, root) for key, item in value.items()}
    return value


@pytest.mark.parametrize("name", list(CASES))
def test_calls_give_what_the_reference_gave(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = rooted(CASES[name], tmp_path)
    inputs = make_inputs(tmp_path)
    for key, expected in GOLDEN["inputs"].items():
        assert image_info(inputs[key])["pixels_sha256"] == expected["pixels_sha256"]
    Path(case["cwd"]).mkdir()
    monkeypatch.chdir(case["cwd"])  # relative image_path checks and the evaluators' './temp_processed_images/'
    ran: list[str] = []

    def recording_exec(code: str, env: dict[str, Any], scope: dict[str, Any]) -> None:
        ran.append(code)
        builtins.exec(code, env, scope)

    monkeypatch.setattr(thyme, "exec", recording_exec, raising=False)
    carried: dict[str, Any] | None = {} if case["carries"] else None  # process_round starts each sample at {}
    for call in case["calls"]:
        assert summary(carried) == call["previous_context"]
        before = len(ran)
        outcome = thyme.execute(call["code_arg"], call["input_image_path"], call["temp_output_dir"],
                                call["item_id"], carried, timeout_s=GOLDEN["timeout_s"])
        assert (ran[before] if len(ran) > before else None) == call["executed_code"]
        assert outcome.paths == call["ret_processed_paths"]
        assert outcome.print_output == call["ret_print_output"]
        assert outcome.error == call["ret_error"]
        assert summary(outcome.context) == call["ret_context"]
        assert [image_info(p) for p in outcome.paths if os.path.isfile(p)] == call["output_images"]
        if call["executed_code"] is not None:
            assert thyme.rewrite(call["code_arg"], call["input_image_path"],
                                 call["temp_output_dir"]) == call["executed_code"]
        if case["carries"]:
            carried = thyme.carry(outcome.context)


def test_glue_only_cases_are_accounted_for() -> None:
    """The reference's cases that never reach the sandbox (turn glue only) are the only ones left out."""
    assert len(GOLDEN["cases"]) - 1 + len(GOLDEN["glue_only_cases"]) == 62
    assert all(case["calls"] for case in GOLDEN["cases"])


def test_denied_patterns_are_searched_in_the_raw_text() -> None:
    assert thyme.denied("x = 1  # no SYS.exit please")
    assert thyme.denied("re.compile('a')") and thyme.denied("model.eval()")
    assert not thyme.denied("os.system('true')\nfrom subprocess import run\nshutil.copy(a, b)")


def test_carry_keeps_none_and_filters_dicts_in_place() -> None:
    assert thyme.carry(None) is None
    inner = {"f": lambda: 1, "n": 2}
    context = {"globals": {"m": "math"}, "locals": {"d": inner, "g": (i for i in range(2)), "x": 3}}
    assert thyme.carry(context) is context
    assert context == {"globals": {"m": "math"}, "locals": {"d": {"n": 2}, "x": 3}}
    assert context["locals"]["d"] is inner


def test_alarm_outside_exec_gives_the_outer_timeout_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's 'Execution timed out' text is reached only when the alarm fires outside the exec's `except`."""

    def slow_align(code: str) -> str:
        time.sleep(1)
        return code

    monkeypatch.setattr(thyme, "_align_first_line", slow_align)
    outcome = thyme.execute("print(1)", "", str(tmp_path / "out"), "item", None, timeout_s=0.2)
    assert outcome == thyme.Outcome([], "", "Sandbox for item: Execution timed out after 10 seconds.", None)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is not thyme._raise_timeout
