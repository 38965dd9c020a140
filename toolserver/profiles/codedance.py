"""CodeDance (profile `codedance`): CodeDance-VL/CodeDance @ 62f8c6f5, its one tool `execute_python_code(code)`
(`configs/tool_config.yaml`, `verl/tools/code_tool.py`'s `CodeExecuteTool`) as its sglang rollout runs it
(`verl/workers/rollout/sglang_rollout/sglang_rollout.py`, `_async_rollout_a_request`), exact. The cells run in a
stateful sandbox worker per session through CodeDance's cell runner (`toolserver.sandbox.programs.codedance`).

The turn (`CodeDanceFormat.parse`): a text holding `<tool_call>` is read by sglang's function-call parser of the
type verl picks for Qwen2.5-VL's vocabulary under the sglang CodeDance's install.sh pins (0.5.5.post3): the first
parser of its table whose tokens the vocabulary has, GLM-4.5's (`<tool_call>NAME\\n<arg_key>K</arg_key>
<arg_value>V</arg_value></tool_call>`; `code` kept as text, other values read as JSON, then as an escaped string,
then as a Python literal); every call of a known name runs, in order, and a text whose calls are all unknown or
unreadable ends the episode (so does a Qwen JSON call, which names no function there). Else the first
```` ```python ```` fence (a newline after it and before the closing fence), stripped, is the code; none, or an
empty one, ends the episode.

The observation is one tool message per call, as the rollout's chat template renders them after the assistant's
`<|im_end|>\\n`: `<|im_start|>user`, then per message `\\n<tool_response>\\n` + its parts + `\\n</tool_response>`, then
`<|im_end|>\\n<|im_start|>assistant\\n` (`prompt`, Qwen-VL's vision tokens for images). A message's parts, written one
after the other: `Code execution successful, output:\\n<stdout>`, `Stderr output:\\n```\\n<stderr>\\n````, per image
`Output image:` and the image, then its closing prompt; a failure is `Output before error:\\n<stdout>` and
`--- Execution Error (<type>) ---\\n<error>` (+ `\\n\\nStderr output:\\n<stderr>`). Each image is what the rollout's
`process_image` (qwen-vl-utils) makes of the PNG the tool encodes: RGB on white, sides multiples of 28.

The rollout's turn limit (6 generations; after the 5th one's calls it adds `TURN_LIMIT` as one more tool message) is
the caller's: a session does not count generations. Its reward (+1 a run, −0.5 a failure, 0 for no code) is each
result's `meta.reward`.

Deviations (docs/decisions.md): code that outlives its alarm (it swallows the `TimeoutError`, or sits in C) is
killed 5 s after it, not after the framework's 300 s, and reads as the framework's `Code execution timed out.`,
as does code that ends its own process; either way the worker and its namespace are gone, as they are when the
reference restarts its worker (the files the code wrote go too). A `timeout` argument that is not finite, or is
over 300 s, is 300 s. Texts past 1 MB are cut with a marker; at most the sandbox's image limit of images a cell.
`input_image_path` names the file in the sandbox. One input image: the session's first, as the reference's data
path hands it to `create` (a parquet row's bytes, so `process_image` smart-resizes it: `input_file`), saved as
`input_image.jpg`.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Sequence
from functools import partial
from typing import Any

from PIL import Image
from pydantic import BaseModel, Field

from toolserver.formats.base import CallFormat, Parsed, ParsedCall, TurnRule, raw_text_messages
from toolserver.imaging import decode_native, native_mode, own_mode_source, to_rgb
from toolserver.memorymap import ImageEntry
from toolserver.models import ToolResult
from toolserver.profiles.base import Alpha, Profile
from toolserver.profiles.qwen_family import fetch_image_view
from toolserver.sandbox.child import capped
from toolserver.sandbox.executor import Execution, SandboxImage, SandboxUnavailable
from toolserver.tools.base import Tool, ToolContext, ToolOutput

NAME = "execute_python_code"
INPUT_FILE_RULE = "codedance-input-file:fetch_image:28"
USER_PROMPT = ("\nThink with the tool's result, then answer. Determine if it adequately answers the user's question. "
               "If the information is insufficient or irrelevant, formulate a new strategy and execute a new tool call "
               "to obtain a helpful result.")
TURN_LIMIT = ("Turn limit reached. Based on the analysis so far, directly provide the final answer using the "
              "<think></think><answer></answer> format. Do not use any more tools or execute code.")
NO_CODE = "Error: No code provided to execute."
TIMED_OUT = "Code execution timed out."  # the framework's text for a worker that did not answer
DEFAULT_TIMEOUT_S, FRAMEWORK_TIMEOUT_S, KILL_AFTER_S = 15.0, 300.0, 5.0
MAX_TEXT_BYTES = 1_000_000
IMAGE_NAME = "_codedance_input_"
USER, ASSISTANT = "<|im_end|>\n<|im_start|>user", "<|im_end|>\n<|im_start|>assistant\n"
VISION = "<|vision_start|><|image_pad|><|vision_end|>"
CODE_FENCE = re.compile(r"```python\s*\n(.*?)\n```", re.DOTALL)
GLM_CALL = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
GLM_DETAIL = re.compile(r"<tool_call>(.*?)(?:\\n|\n)(.*)</tool_call>", re.DOTALL)
GLM_ARGUMENT = re.compile(r"<arg_key>(.*?)</arg_key>(?:\\n|\s)*<arg_value>(.*?)</arg_value>", re.DOTALL)


def glm_value(text: str) -> Any:
    """A GLM-4.5 argument value as sglang reads one that its schema does not type as a string."""
    try:
        return json.loads(text)
    except Exception:
        try:
            return json.loads(json.loads('{"tmp": "' + text + '"}')["tmp"])
        except Exception:
            try:
                return ast.literal_eval(text)
            except Exception:
                return text


def glm_calls(text: str) -> list[dict[str, Any]]:
    """The arguments of each known call in `text`, as sglang's GLM-4.5 detector and verl's schema read them: a
    block it cannot read drops every call of the text."""
    calls = []
    try:
        for block in GLM_CALL.findall(text):
            detail = GLM_DETAIL.search(block)
            name, body = detail.group(1), detail.group(2)  # type: ignore[union-attr]  # None: AttributeError
            arguments = {}
            for key, value in GLM_ARGUMENT.findall(body):
                key, value = key.strip(), value.strip()
                arguments[key] = value if (name, key) == (NAME, "code") else glm_value(value)
            if name == NAME:
                calls.append(json.loads(json.dumps(arguments or {}, ensure_ascii=False)))
    except Exception:
        return []
    return calls


def extract_code(text: str) -> str | None:
    found = CODE_FENCE.findall(text)
    return found[0].strip() if found else None


class CodeDanceFormat(CallFormat):
    name = "codedance"
    description = ("CodeDance: <tool_call> read as sglang's GLM-4.5 parser reads it (every known call runs), else the "
                   "first python fence; no call ends the episode; tool messages in Qwen2.5-VL's markup.")
    turn = TurnRule()

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name, done=False)
        if "<tool_call>" in text:
            out.calls = [ParsedCall(NAME, arguments) for arguments in glm_calls(text)]
        elif code := extract_code(text):
            out.calls = [ParsedCall(NAME, {"code": code})]
        out.done = not out.calls
        return out

    def observation(self, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
        """One tool message per call, its texts and images in order."""
        messages = []
        for result in results:
            [message] = raw_text_messages(result.text, [result])
            messages.append({"role": "tool", "content": message["content"]})
        return messages

    def prompt(self, results: Sequence[ToolResult], image: str = VISION) -> str | None:
        """Appended to the token stream after the assistant's text (`image`: how each image is marked)."""
        if not results:
            return ""
        body = "".join(f"\n<tool_response>\n{r.text.replace('<image>', image)}\n</tool_response>" for r in results)
        return USER + body + ASSISTANT


class CodeArgs(BaseModel):
    code: str = Field(max_length=100_000, description=(
        "Execute Python code with access to common libraries (PIL, cv2, matplotlib, numpy, etc.). Access input "
        "images via 'input_image' variable or 'Image.open('input_image.jpg')'. Output results using print(), "
        "plt.show(), or other display functions."))


def timeout_of(arguments: dict[str, Any]) -> float:
    """The alarm's seconds: the call's `timeout` where it reads as a positive number, else 15."""
    try:
        seconds = float(arguments.get("timeout", DEFAULT_TIMEOUT_S))
    except (ValueError, TypeError):
        seconds = DEFAULT_TIMEOUT_S
    if seconds <= 0:
        seconds = DEFAULT_TIMEOUT_S
    return seconds if math.isfinite(seconds) and seconds <= FRAMEWORK_TIMEOUT_S else FRAMEWORK_TIMEOUT_S


class ExecutePythonCode(Tool):
    name = NAME
    description = ("Executes Python code within a persistent, sandboxed virtual environment.  This tool is highly "
                   "effective for a variety of tasks, including mathematical calculations, data analysis, and image "
                   "manipulation. ")
    Args = CodeArgs
    raw_arguments = True
    lane = "code"

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        arguments = args if isinstance(args, dict) else {}
        code = arguments.get("code", "")
        if not isinstance(code, str) or not code.strip():
            return ToolOutput.failure(NO_CODE, "no_code", reward=0.0)
        if ctx.sandbox is None:
            return _framework_error("the sandbox is not available", "sandbox_unavailable")
        seconds = timeout_of(arguments)
        inputs = [entry for entry in ctx.images if entry.is_input][:1]
        images = [SandboxImage([IMAGE_NAME], ctx.view(entry, INPUT_FILE_RULE, partial(input_file, entry)))
                  for entry in inputs]
        runner = {"program": "codedance", "show_hook": False, "max_output_bytes": MAX_TEXT_BYTES,
                  "options": {"image_name": IMAGE_NAME, "timeout_s": seconds}}
        try:
            done = ctx.sandbox.run(code, images, worker=ctx.session_id, runner=runner,
                                   timeout_s=min(seconds + KILL_AFTER_S, FRAMEWORK_TIMEOUT_S))
        except SandboxUnavailable as exc:
            return _framework_error(str(exc), "sandbox_unavailable")
        if done.status in ("busy", "confinement_failed"):
            return _framework_error(done.error or done.status, done.status)
        if done.status == "error":  # the code ended its own process (SystemExit, KeyboardInterrupt)
            ctx.sandbox.close_worker(ctx.session_id)
            return ToolOutput.failure(TIMED_OUT, "timeout", reward=-0.5, worker_lost=True)
        if not done.ok:  # killed at its deadline, crashed, over a limit
            return ToolOutput.failure(TIMED_OUT, "timeout" if done.status == "timeout" else done.status,
                                      reward=-0.5, worker_lost=True)
        return _observed(done)


def input_file(entry: ImageEntry, pixels: Image.Image) -> Image.Image:
    """The image the tool's `create` saves as `input_image.jpg`: its `process_image` of the row's image, which a
    parquet row holds as bytes, so qwen-vl-utils' `fetch_image` (RGBA on white, any other mode `convert("RGB")`,
    smart-resized to multiples of 28, BICUBIC): the size the model sees it at."""
    source = own_mode_source(entry.source_mime, lambda: entry.source_bytes)
    if source is not None and native_mode(source) == "RGBA":
        pixels = to_rgb(decode_native(source), "white")
    return fetch_image_view(pixels)


def _observed(done: Execution) -> ToolOutput:
    details = done.details
    stdout = capped(str(details.get("stdout", "")), MAX_TEXT_BYTES, "stdout").strip()
    stderr = capped(str(details.get("stderr", "")), MAX_TEXT_BYTES, "stderr").strip()
    if not details.get("success"):
        text = f"Output before error:\n{stdout}" if stdout else ""
        text += f"--- Execution Error ({details.get('error_type') or 'Error'}) ---\n{details.get('error')}"
        if stderr:
            text += f"\n\nStderr output:\n{stderr}"
        return ToolOutput.failure(text, "code_error", reward=-0.5)
    text = f"Code execution successful, output:\n{stdout}" if stdout else ""
    if stderr:
        text += f"Stderr output:\n```\n{stderr}\n```"
    text += "Output image:<image>" * len(done.images) + USER_PROMPT
    return ToolOutput(text, images=[fetch_image_view(to_rgb(image, "white")) for image in done.images],
                      meta={"reward": 1.0})


def _framework_error(reason: str, code: str) -> ToolOutput:
    return ToolOutput.failure(f"An unexpected exception': SandboxUnavailable: {reason}", code, reward=-0.5)


PROFILES = (
    Profile("codedance", "CodeDance's Python tool: execute_python_code in a persistent namespace with input_image, "
            "its printed text, errors and images, its rollout's turn and tool messages, exact.",
            {NAME: ExecutePythonCode()}, call_format=CodeDanceFormat(), alpha=Alpha.DROP),
)
