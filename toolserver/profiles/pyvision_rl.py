"""PyVision-RL (agents-x-project/PyVision-RL @ 62ca599d): the model writes Python against its image and reads
back what it printed and showed. Its environment, `MultiModalPythonTool_w_Image_Hint`
(`verl_agents/verl/workers/agent/envs/agents_x/safe_persis_python_exe_tool_w_image_hint.py`), reproduced: the
turn, the namespace kept between turns, the figure capture and the observation texts, in the Qwen2.5-VL chat
markup it trains with. The code runs in a stateful sandbox worker (`toolserver.sandbox`) per session. Its image is
the row's `process_raw_image`, `convert("RGB")`: transparency dropped (the profile's alpha rule).

The turn (`PyVisionFormat.parse`): the last `<answer>…</answer>` first (not stripped); a non-empty one ends the
episode and code beside it is not run. Then the code: the last ```` ```python ```` fence inside `<code>…</code>`,
else the last bare one, by the reference's own patterns, quirks included (the first line's indentation is eaten,
```` ```python3 ```` leaves a leading `3`, an unclosed first `<code>` runs on into the next); an empty block is no
code. Neither: the environment's format error.

In the namespace, as its header makes it: `matplotlib` (Agg), `plt`, `Image`, `io`, `base64`, `np`, the input
image as `image_clue_0` (a PNG round trip of the original, as the reference decodes it from its data URL), and
`_captured_figures`, which starts with the inputs. `plt.show()` is rewritten, as text, to a capture of the current
figure (PNG, its own dpi, no tight box), refused at an aspect ratio of 200 or more; then that figure is closed.
stdout is shown stripped and whole (its worker reads it from a `StringIO`, unbounded; here past 1 MB it is
cut with a marker, where the sandbox's default would cut at 20,000 bytes); stderr is not shown; an error shows
`str(e)` alone, and what was printed before it is not shown; a call of `input(`, `os.system(` or `subprocess(`
is refused by its pattern. Figures go to the model as Qwen2.5-VL's processor takes them: RGB on white,
`smart_resize`d to multiples of 28 within [3136, 12845056] pixels.

Deviations (docs/decisions.md): several input images are `image_clue_0`, `image_clue_1`, … in order (the
reference binds them all to `image_clue_0`, the last one winning; one image is the same either way); figures are
labelled from 1 + the figures shown so far (the reference's count also counts inputs and lost figures, which is
the same for one input image); a timed-out or crashed worker is ended and the next turn starts afresh (the
reference leaves it running and reads its late result as the next turn's).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from toolserver.formats.base import Parsed, ParsedCall, RawTextFormat, TurnRule
from toolserver.geometry import smart_resize
from toolserver.models import ToolResult
from toolserver.profiles.base import Alpha, Profile
from toolserver.sandbox.executor import SandboxImage, SandboxUnavailable
from toolserver.tools.base import Tool, ToolContext, ToolOutput

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
CODE_IN_TAG = re.compile(r"<code>\s*```python\s*(.*?)\s*```\s*</code>", re.DOTALL)
CODE_FENCE = re.compile(r"```python\s*(.*?)\s*```", re.DOTALL)
FORBIDDEN = re.compile(r"(\s|^)?(input|os\.system|subprocess)\(")
TIMEOUT_S = 30.0
MAX_STDOUT_BYTES = 1_000_000  # the reference's is unbounded (a StringIO read whole)
USER, ASSISTANT = "\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"
VISION = "<|vision_start|><|image_pad|><|vision_end|>"
NO_CODE = ("<tool_response>\n<interpreter>Error: No Python code or final answer found. There is something wrong "
           "with the format.</interpreter>\n\n</tool_response>")
TOOL_ERROR = "<tool_response>\n<interpreter>TOOL_EXECUTION_ERROR</interpreter>\n\n</tool_response>"
FIGURE_MIN_PIXELS, FIGURE_MAX_PIXELS = 4 * 28 * 28, 16384 * 28 * 28  # qwen-vl-utils' defaults

# The environment's header, run once in the session's worker after the input images are bound.
HEADER = """\
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
from PIL import Image
import io
import base64
import numpy as np
_names = sorted((n for n in globals() if n.startswith('image_clue_')), key=lambda n: int(n[11:]))
_name = _buffer = None
for _name in _names:
    _buffer = io.BytesIO()
    globals()[_name].save(_buffer, format='PNG')
    globals()[_name] = Image.open(io.BytesIO(_buffer.getvalue()))
_captured_figures = [globals()[n] for n in _names]
def _internal_capture_plt_figure():
    fig = plt.gcf()
    width_px = fig.get_figwidth() * fig.dpi
    height_px = fig.get_figheight() * fig.dpi
    aspect_ratio = max(width_px, height_px) / min(width_px, height_px)
    if aspect_ratio >= 200:
        raise RuntimeError(f"Image aspect ratio too extreme: {aspect_ratio:.2f} (must be < 200)")
    buf = io.BytesIO()
    plt.savefig(buf, format='png')
    buf.seek(0)
    _captured_figures.append(base64.b64encode(buf.read()).decode('utf-8'))
    plt.close()
del _names, _name, _buffer
"""
RUNNER = {"preamble": HEADER, "rewrites": [["plt.show()", "_internal_capture_plt_figure()"]],
          "error_style": "message", "collect": "_captured_figures", "show_hook": False, "close_on_error": True,
          "filename": "<string>", "max_output_bytes": MAX_STDOUT_BYTES}


def extract_answer(text: str) -> str | None:
    found = ANSWER.findall(text)
    return found[-1] if found else None


def extract_code(text: str) -> str | None:
    found = CODE_IN_TAG.findall(text) or CODE_FENCE.findall(text)
    return found[-1] if found else None


class PyVisionFormat(RawTextFormat):
    name = "pyvision-rl"
    description = ("PyVision-RL: the last <answer> ends the episode; else the last python fence (in <code> first) "
                   "runs; raw-text observation in Qwen2.5-VL's markup.")
    turn = TurnRule(max_calls=1)

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name, done=False)
        if extract_answer(text):
            out.done = True
            return out
        code = extract_code(text)
        if code:
            out.calls.append(ParsedCall("python", {"code": code}))
        else:
            out.notices.append(NO_CODE)
        return out

    def prompt(self, results: Sequence[ToolResult], image: str = VISION) -> str | None:
        """The text appended to the token stream right after `</code>` (generation stops there, so the
        assistant turn is not closed first); an answer appends nothing."""
        body = self.last_text(results)
        return "" if body is None else USER + body.replace("<image>", image) + ASSISTANT


class CodeArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    code: str = Field(min_length=1, max_length=100_000, description="Python code, run in the session's namespace.")


class PyVisionPython(Tool):
    name = "python"
    description = ("Run Python in this session's persistent namespace: the image is `image_clue_0`; plt.show() "
                   "returns the current figure; print() returns text.")
    Args = CodeArgs
    raw_arguments = True
    lane = "code"

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        code = str(args.get("code", ""))
        if FORBIDDEN.search(code):
            return _error("Forbidden function calls detected")
        if ctx.sandbox is None:
            return ToolOutput.failure(TOOL_ERROR, "sandbox_unavailable")
        inputs = [entry for entry in ctx.images if entry.is_input]
        images = [SandboxImage([f"image_clue_{i}"], entry.pixels) for i, entry in enumerate(inputs)]
        try:
            done = ctx.sandbox.run(code, images, worker=ctx.session_id, runner=RUNNER, timeout_s=TIMEOUT_S)
        except SandboxUnavailable:
            return ToolOutput.failure(TOOL_ERROR, "sandbox_unavailable")
        if done.status == "timeout":
            return _error("Execution timeout")
        if done.status == "error":
            return _error(done.error or "")
        if done.status != "ok":
            return ToolOutput.failure(TOOL_ERROR, done.status, worker_lost=done.worker_lost)
        text = done.stdout.strip()
        if done.stdout_dropped:
            text += f"\n[stdout truncated: {done.stdout_dropped} more bytes not shown]"
        if not done.images:
            return ToolOutput(f"<tool_response>\n<interpreter>\nText Result:\n{text}</interpreter>\n\n"
                              "</tool_response>")
        first = ctx.observations + 1
        labels = "".join(f"<image_clue_{k}><image></image_clue_{k}>" for k in range(first, first + len(done.images)))
        body = (f"<tool_response>\n<interpreter>Text Result:\n{text}\nImage Result:\n{labels}</interpreter>\n\n"
                "</tool_response>")
        return ToolOutput(body, images=[as_model_sees(image) for image in done.images])


def _error(message: str) -> ToolOutput:
    return ToolOutput.failure(f"<tool_response>\n<interpreter>Execution error: {message}</interpreter>\n\n"
                              "</tool_response>", "code_error")


def as_model_sees(figure: Image.Image) -> Image.Image:
    """qwen-vl-utils' `fetch_image` with its default bounds: RGB on white (done when the figure was taken in),
    then each side a multiple of 28 within the pixel bounds, resized with Pillow's default filter."""
    height, width = smart_resize(figure.height, figure.width, 28, FIGURE_MIN_PIXELS, FIGURE_MAX_PIXELS)
    return figure.convert("RGB").resize((width, height))


PROFILES = (
    Profile("pyvision-rl", "PyVision-RL's Python environment: code in <code>, a namespace kept between turns, "
            "plt.show() figures and the <interpreter> observation, exact.",
            {"python": PyVisionPython()}, call_format=PyVisionFormat(), alpha=Alpha.DROP),
)
