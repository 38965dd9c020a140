"""DeepEyesV2 (Visual-Agent/DeepEyesV2 @ 0373e6e0): the model writes Python in `<code>` and reads back what it
printed, the traceback and the figures it showed. Its RL environment, `DeepEyesV2_ENV`
(`reinforcement_learning/verl/workers/agent/envs/deepeyesv2/deepeyesv2.py`), reproduced: the turn, the code's
rewrite, the observation texts and image rules, in the chat markup it trains with. The cells run in a stateful
sandbox worker per session, through the reference's code server as a program (`toolserver.sandbox.programs.
deepeyes_v2`: IPython, its traceback and figure capture, its alarm). `image_1` is the row's `process_raw_image`,
`convert("RGB")`: transparency dropped (the profile's alpha rule).

The turn (`DeepEyesV2Format.parse`): a non-empty last `<answer>…</answer>`, anywhere, ends the episode (code beside
it does not run). Else, if `<code>` occurs, the last ```` ```python ```` fence (newline after it, newline before the
closing fence) of the last `<code>…</code>` is the code; none, or an empty one, ends the episode. Else the last
`<tool_call>…</tool_call>` is a search call: JSON that does not read gets the env's error text; the rest goes to
the `search` tool, which answers as the env does, from the user's search cache (`SEARCH_CACHE`, FVQA's format:
`toolserver.profiles.deepeyes_v2_search`, docs/search-replay.md).

The code is rewritten as `fix_python_indentation` does (every line stripped, blank lines dropped, one level of
indentation after each line ending in `:`, one less before `except`/`elif`/`else`/`finally`, then autopep8 at
aggressive level 2; the code as sent if that fails), meaning changes included: that is what the model trained
under. The observation is `RETURN_CODE_PROMPT` with the cell's stdout and stderr whole, `Images:` and one `<image>`
per figure (at most 10), after `<|im_end|>\n<|im_start|>user\n` and before `<|im_end|>\n<|im_start|>assistant\n
<think>`; each figure is resized by `maybe_resize_image` (an aspect ratio over 200 tamed, the short side at least
32 px). A cell past its time is interrupted by the reference's alarm at 200 s; one that still runs a second later
is killed with the reference's `TimeOutError: code execution timed out`.

Deviations (docs/decisions.md): one worker per session (the reference's training env shares one kernel among
every trajectory of a process; its evaluation uses one per question, as here); the namespace lives in the worker
rather than being pickled between calls (values cloudpickle cannot store are kept; a function from an earlier
cell shows its source in tracebacks); a killed cell loses the session's state and the next cell starts from the
init cell's (the reference rolls back to the call before); whitespace-only code ends the episode (the reference's
env crashes on it); stdout and the traceback past 1 MB each are cut with a marker; `from matplotlib.pyplot import
show` keeps working in later cells.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Sequence
from math import ceil
from typing import Any

import autopep8
from PIL import Image

from toolserver.formats.base import Parsed, ParsedCall, RawTextFormat, TurnRule
from toolserver.models import ToolResult
from toolserver.profiles.base import Alpha, Profile
from toolserver.profiles.deepeyes_v2_search import SEARCH_ERROR, DeepEyesV2Search
from toolserver.profiles.pyvision_rl import CodeArgs
from toolserver.sandbox.child import capped
from toolserver.sandbox.executor import Execution, SandboxImage, SandboxUnavailable
from toolserver.tools.base import Tool, ToolContext, ToolOutput

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
CODE_TAG = re.compile(r"<code>(.*?)</code>", re.DOTALL)
PYTHON_FENCE = re.compile(r"```python\s*\n(.*?)\n```", re.DOTALL)
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
DEDENTING = ("except", "elif", "else", "finally")
TIMEOUT_S = 200.0  # the env's `code_timeout`; the server kills a cell still running a second later
MAX_IMAGES = 10  # the env's `max_images_per_round`
MAX_STDOUT_BYTES = 1_000_000
USER, ASSISTANT = "<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n<think>"
VISION = "<|vision_start|><|image_pad|><|vision_end|>"
RETURN_CODE_PROMPT = "Code execution result:\nstdout:\n```\n{stdout}\n```\n\nstderr:\n```\n{stderr}\n```\n\n{image}\n"
KILLED = "TimeOutError: code execution timed out"  # the server's text for a cell that gave no result
NOT_RUN = ("busy", "confinement_failed")  # the cell did not start

# The namespace as the env's `reset` leaves it: its init cell (image_1, bound by the sandbox, as the reference
# decodes it from a base64 PNG of the dataset's RGB image), and the modules the server's guard prefix imports in a
# session's first call and pickles by reference. The guard itself is not run: the reference runs it only in that
# first call, always the init cell, so model code never ran guarded.
PREAMBLE = """\
from PIL import Image
import base64
from io import BytesIO
import builtins, os, shutil, subprocess, sys
import matplotlib.pyplot as plt
if 'image_1' in globals():
    _buffer = BytesIO()
    image_1.convert('RGB').save(_buffer, format='PNG')
    _img_base64 = base64.b64encode(_buffer.getvalue()).decode()
    image_1 = Image.open(BytesIO(base64.b64decode(_img_base64)))
    del _buffer
"""



def extract_answer(text: str) -> str | None:
    found = ANSWER.findall(text)
    return found[-1] if found else None


def extract_code(text: str) -> str | None:
    blocks = CODE_TAG.findall(text)
    fences = PYTHON_FENCE.findall(blocks[-1]) if blocks else []
    return fences[-1] if fences else None


def fix_python_indentation(code: str) -> str:
    """The reference's re-indentation and autopep8 pass, as it behaves (including what it does to a block's
    following lines, which it pulls into the block)."""
    try:
        lines, indent = [], 0
        for line in (raw.strip() for raw in code.split("\n")):
            if not line:
                continue
            if line.startswith(DEDENTING):
                indent = max(0, indent - 1)
            lines.append("    " * indent + line)
            if line.endswith(":"):
                indent += 1
        return str(autopep8.fix_code(textwrap.dedent("\n".join(lines)).strip(), options={"aggressive": 2}))
    except Exception:  # autopep8 fails on some inputs (a last line ending in `;\`): the code goes as it came
        return code


def search_call(action: str) -> ParsedCall | str:
    """What the env does with a `<tool_call>`: its error text for JSON that does not read, else the call, which
    the `search` tool answers as the env does (`toolserver.profiles.deepeyes_v2_search`)."""
    try:
        json.loads(action.strip())
    except Exception as exc:
        return f"Error: Invalid tool call format: {action.strip()}. Error: {exc}"
    return ParsedCall("search", {"action": action.strip()})


def search_failed(results: Sequence[ToolResult]) -> bool:
    return any(r.error is not None and r.error.code == SEARCH_ERROR for r in results)


class DeepEyesV2Format(RawTextFormat):
    name = "deepeyes-v2"
    description = ("DeepEyesV2: a non-empty <answer> ends the episode; else the last python fence of the last "
                   "<code> runs; raw-text observation in Qwen2.5-VL's markup.")
    turn = TurnRule(max_calls=1)

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name, done=False)
        if extract_answer(text):
            out.done = True
        elif "<code>" in text:
            code = extract_code(text)
            if code and code.strip():
                out.calls.append(ParsedCall("python", {"code": code}))
            else:
                out.done = True
        elif "<tool_call>" in text and (action := TOOL_CALL.findall(text)):
            call = search_call(action[-1])
            if isinstance(call, str):
                out.notices.append(call)
            else:
                out.calls.append(call)
        else:
            out.done = True
        return out

    def ends(self, parsed: Parsed, results: Sequence[ToolResult]) -> bool:
        return search_failed(results) or super().ends(parsed, results)

    def prompt(self, results: Sequence[ToolResult], image: str = VISION) -> str | None:
        """Appended to the token stream right after `</code>` (generation stops there, the stop string kept)."""
        if search_failed(results):  # the env's "Search error" ends the episode
            return ""
        body = self.last_text(results)
        return "" if body is None else USER + body.replace("<image>", image) + ASSISTANT


def maybe_resize_image(image: Image.Image) -> Image.Image:
    """The env's resize of each figure: an aspect ratio over 200 brought to at most 150 (at least half of what it
    was), then the short side up to 32 px, both with Lanczos."""
    width, height = image.size
    if max(height, width) / min(height, width) > 200:
        short, old_scale = min(height, width), max(height, width) / min(height, width)
        max_ratio = min(150, old_scale / 2)
        if height > width:
            size = (int(width * old_scale / max_ratio), int(short * max_ratio))
        else:
            size = (int(short * max_ratio), int(height * old_scale / max_ratio))
        image = image.resize(size, Image.Resampling.LANCZOS)
        width, height = image.size
    if min(height, width) >= 32:
        return image
    ratio = 32 / min(height, width)
    return image.resize((ceil(width * ratio), ceil(height * ratio)), Image.Resampling.LANCZOS)


class DeepEyesV2Python(Tool):
    name = "python"
    description = ("Run Python in this session's IPython namespace: the image is `image_1`; plt.show() returns "
                   "every open figure; print() and the last expression return text.")
    Args = CodeArgs
    raw_arguments = True
    lane = "code"

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        code = fix_python_indentation(str(args.get("code", "")))
        if not code.strip():
            return ToolOutput.failure("Code execution error", "no_code")
        if ctx.sandbox is None:
            return ToolOutput.failure("Code execution error", "sandbox_unavailable")
        inputs = [entry for entry in ctx.images if entry.is_input][:1]  # the init cell loads the first image only
        images = [SandboxImage(["image_1"], entry.pixels) for entry in inputs]
        runner = {"program": "deepeyes_v2", "preamble": PREAMBLE, "show_hook": False, "max_images": MAX_IMAGES,
                  "max_output_bytes": MAX_STDOUT_BYTES, "options": {"alarm_s": TIMEOUT_S}}
        try:
            done = ctx.sandbox.run(code, images, worker=ctx.session_id, runner=runner, timeout_s=TIMEOUT_S + 1)
        except SandboxUnavailable:
            return ToolOutput.failure("Code execution error", "sandbox_unavailable")
        if done.status in NOT_RUN:  # the env's text for a server that did not answer
            return ToolOutput.failure("Code execution error", done.status)
        stdout, stderr = _streams(done)
        figures = [maybe_resize_image(image) for image in done.images] if done.ok else []
        image = "Images:\n" + "<image>" * len(figures) if figures else ""
        body = RETURN_CODE_PROMPT.format(stdout=stdout, stderr=stderr, image=image).strip()
        if done.ok:
            return ToolOutput(body, images=figures)
        return ToolOutput.failure(body, done.status, worker_lost=done.worker_lost)


def _streams(done: Execution) -> tuple[str, str]:
    """The cell's stdout and stderr as the server returns them: IPython's traceback is the stderr; a cell that
    gave no result (killed at its deadline, crashed, over its limits) reads as the server's timeout."""
    if done.status == "error":  # failed outside the shell (the init cell)
        return done.stdout, done.error or ""
    if not done.ok:
        return "", KILLED
    stdout = done.stdout
    if done.stdout_dropped:
        stdout += f"\n[stdout truncated: {done.stdout_dropped} more bytes not shown]"
    # capped here too: the child's process is the code's, which may have replaced the program's own cap
    return stdout, capped(str(done.details.get("stderr", "")), MAX_STDOUT_BYTES, "stderr")


PROFILES = (
    Profile("deepeyes-v2", "DeepEyesV2's environment: code in <code>, rewritten as it rewrites it, an IPython "
            "namespace kept between turns, plt.show() figures and its observation template, exact; its <tool_call> "
            "image and text searches replayed from the search cache.",
            {"python": DeepEyesV2Python(), "search": DeepEyesV2Search()}, call_format=DeepEyesV2Format(),
            alpha=Alpha.DROP),
)
