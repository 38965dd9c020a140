"""Thyme (yfzhang114/Thyme @ b9285b7a): the model writes Python in `<code>` against the image its user turn names
by path, and reads back `<sandbox_output>…</sandbox_output>` inside its own assistant turn. Its RL trainer's turn
(`process_round` in `swift/trainers/rlhf_trainer/grpo_trainer.py`) and its executor (`swift/trainers/sandbox.py`)
reproduced; the code runs in a stateful sandbox worker per session (`toolserver.sandbox.programs.thyme`, with the
executor in `thyme_exec`).

The turn (`ThymeFormat.parse`), one generation round: a bare stop string (`</code>`, `</answer>`, `<|im_end|>`) or
a text the trainer finds repetitive counts as nothing; `</answer>` ends the episode; else the first match of its
code pattern (`<code>`, an optional fence, an optional `python`, case-insensitive) is the code, stripped. With
`<code>` as a stop string (its GRPO-ATS runs) a round stops at `<code>` and the next one is the code's
continuation, which the trainer reads after a `<code>\\n` it puts back: a turn holding `</code>` but no `<code>`
is read that way. Neither code nor answer: no observation, the episode goes on.

The user turn names the image as `/mnt/data/user_images/<key>.png` (its key in the session; `generate_prompt_final_qa`
writes the path and size), a path inside the sandbox. The file is the upload in its own mode (an RGBA or LA image
keeps its alpha, as the dataset's file the reference's code opens does; a palette arrives as RGBA).
The observation is `<sandbox_output>` + what the trainer
writes + `</sandbox_output>`, appended to the assistant turn with nothing between: `<image>` per output image
(the trajectory holds at most 11), or the stdout, or the executor's error text (`Sandbox for <key>: …`). A call
past 10 s reads `Code execution failed: 'Timed Out'` (the alarm, which the code may catch); one still running 5 s
later is killed and reads `Execution timed out after 10 seconds.`, which ends the episode as the trainer's check
for that text does.

Deviations (docs/decisions.md): code runs in the sandbox, not in the trainer's process (what it can reach is the
sandbox's: host paths printed by the code are not shown); the call's directory is numbered by call, fresh each
time; the repetition check writes no log file; an observation's text past 1 MB is cut with a marker.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from toolserver.formats.base import Parsed, ParsedCall, RawTextFormat, TurnRule
from toolserver.imaging import decode_native, native_mode, own_mode_source
from toolserver.memorymap import ImageEntry
from toolserver.models import ToolResult
from toolserver.profiles.base import Profile
from toolserver.sandbox.child import capped, in_raw_mode
from toolserver.sandbox.executor import SandboxImage, SandboxUnavailable
from toolserver.tools.base import Tool, ToolContext, ToolOutput

CODE = re.compile(r"<code>\s*(?:```\s*)?(?:python\s*)?([\s\S]*?)\s*(?:```\s*)?</code>", re.IGNORECASE)
BARE_STOPS = ("</code>", "</answer>", "<|im_end|>")
TIMEOUT_S = 10.0  # the executor's alarm
KILL_AFTER_S = 5.0  # past the alarm, the worker is killed
MAX_TEXT_BYTES = 1_000_000  # the observation's text is cut past this (the trainer's is unbounded)
MAX_HELD = 10  # the trainer runs a round only while the trajectory holds at most this many images
VISION = "<|vision_start|><|image_pad|><|vision_end|>"
TIMED_OUT = "Sandbox for {key}: Execution timed out after 10 seconds."
INPUT_NAME = "_thyme_input_"  # what the sandbox binds the input images to, for the program to save as files
USER_IMAGES = "/mnt/data/user_images/"  # where the user turn says the image is


def has_repeated_content(text: str, threshold: float = 0.3, tail: int = 1000) -> bool:
    """The trainer's filter of degenerate rounds, which looks, in the last `tail` characters (at least 50), for a
    substring at most a third of them long whose occurrences cover more than `threshold` of them, trying lengths
    down to where two occurrences could no longer do so. Any length it tries qualifies once it occurs twice, and a
    substring that occurs twice has prefixes that do too: so the shortest length tried decides, in one pass.
    Rounds with `sandbox_output`, `answer` or `<code>` are never filtered."""
    if "sandbox_output" in text or "answer" in text or "<code>" in text:
        return False
    target = text[-tail:]
    n = len(target)
    tried = [length for length in range(n // 3, 0, -1) if 2 * length / n > threshold] if n >= 50 else []
    if not tried:
        return False
    length, seen = tried[-1], set()
    for start in range(n - length + 1):
        piece = target[start:start + length]
        if piece in seen:
            return True
        seen.add(piece)
    return False


def extract_code(text: str) -> str | None:
    """The round's code as the trainer reads it (a continuation after a round that stopped at `<code>` is read
    after the `<code>\\n` it puts back)."""
    searched = "<code>\n" + text if "</code>" in text and "<code>" not in text else text
    found = CODE.search(searched)
    return found.group(1).strip() if found else None


class ThymeFormat(RawTextFormat):
    name = "thyme"
    description = ("Thyme: one generation round; </answer> ends the episode, else the first <code> block runs "
                   "(a round ending at <code> continues in the next); <sandbox_output> appended to the turn.")
    turn = TurnRule(max_calls=1)

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name, done=False)
        if text.strip() in BARE_STOPS or has_repeated_content(text):
            return out
        if "</answer>" in text:
            out.done = True
            return out
        code = extract_code(text)
        if code is not None:
            out.calls.append(ParsedCall("python", {"code": code}))
        return out

    def ends(self, parsed: Parsed, results: Sequence[ToolResult]) -> bool:
        """An answer, or a call killed past its time (the trainer skips every later round of such a sample)."""
        return bool(parsed.done) or any(r.error is not None and r.error.code == "timeout" for r in results)

    def prompt(self, results: Sequence[ToolResult], image: str = VISION) -> str | None:
        """Appended to the assistant turn right after `</code>`, with nothing between."""
        body = self.last_text(results)
        return "" if body is None else body.replace("<image>", image)


OWN_MODE_RULE = "thyme-file:own-mode"


def file_image(ctx: ToolContext, entry: ImageEntry) -> Image.Image:
    """The image file the code opens, in the upload's own mode (the reference hands the code the dataset's file):
    an RGBA or LA upload keeps its alpha; a palette crosses the sandbox's pipes as RGBA (the same colours)."""
    source = own_mode_source(entry.source_mime, lambda: entry.source_bytes)
    if source is None or native_mode(source) in ("RGB", "L"):
        return entry.pixels

    def own_mode(_: Image.Image) -> Image.Image:
        own = decode_native(source)
        return own if own.mode in ("RGBA", "LA") else in_raw_mode(own)

    return ctx.view(entry, OWN_MODE_RULE, own_mode)


class ThymeArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    code: str = Field(max_length=100_000, description="Python code; `image_path` is the image's path.")


class ThymePython(Tool):
    name = "python"
    description = ("Run Python in this session's Thyme sandbox: `image_path` is the image's path; save images under "
                   "/mnt/data/temp_processed_images/ and print their paths; print() returns text.")
    Args = ThymeArgs
    raw_arguments = True
    lane = "code"

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        held = len(ctx.images)
        if held > MAX_HELD:  # the trainer does not run the round at all
            return ToolOutput("")
        inputs = [entry for entry in ctx.images if entry.is_input]
        key = user_image_key(inputs[0].key) if inputs else "1"  # the trainer's placeholder path is `…/1.jpeg`
        images = [SandboxImage([f"{INPUT_NAME}{i}"], file_image(ctx, entry)) for i, entry in enumerate(inputs)]
        files = [[f"{INPUT_NAME}{i}", user_image_key(entry.key)] for i, entry in enumerate(inputs)]
        runner = {"program": "thyme", "show_hook": False, "error_style": "message",
                  "max_output_bytes": MAX_TEXT_BYTES,
                  "options": {"key": key, "inputs": files, "user_images": USER_IMAGES, "timeout_s": TIMEOUT_S,
                              "images_held": held}}
        try:
            done = ctx.sandbox.run(str(args.get("code", "")), images, worker=ctx.session_id, runner=runner,
                                   timeout_s=TIMEOUT_S + KILL_AFTER_S) if ctx.sandbox else None
        except SandboxUnavailable:
            done = None
        if done is None:
            return ToolOutput.failure(_wrapped(f"Sandbox for {key}: Code execution failed: the sandbox is not "
                                               "available"), "sandbox_unavailable")
        if done.status == "timeout":
            return ToolOutput.failure(_wrapped(TIMED_OUT.format(key=key)), "timeout", worker_lost=True)
        if not done.ok:
            reason = done.error or done.status
            return ToolOutput.failure(_wrapped(f"Sandbox for {key}: Code execution failed: {reason}"), done.status,
                                      worker_lost=done.worker_lost)
        # capped here too: the child's process is the code's, which may have replaced the program's own cap
        text = capped(str(done.details.get("observation", "")), MAX_TEXT_BYTES, "output")
        return ToolOutput(_wrapped(text), images=done.images)


def user_image_key(key: str) -> str:
    """The image's file name in the sandbox (and its Thyme item id): its key, in file-name characters."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)


def user_image_path(key: str) -> str:
    """The path the user turn names for the session image `key`."""
    return f"{USER_IMAGES}{user_image_key(key)}.png"


USER_TURN = """<image>
{question}

### User Image Path:** "{path}"
### User Image Size:** "{size}"

### **Output Format (strict adherence required):**

<think>Your detailed reasoning process, including any code, should go here.</think>
<answer>Your final answer to the user's question goes here.</answer>
"""


def user_turn(question: str, key: str, size: tuple[int, int] | None) -> str:
    """The user turn Thyme's prompts are made with (`generate_prompt_final_qa` in `eval/utils.py`), naming the
    session image `key` by its path in the sandbox; `size` (width, height), None where it could not be read."""
    shown = f"{size[0]}x{size[1]}" if size else "Unable to determine (error reading image)"
    return USER_TURN.format(question=question, path=user_image_path(key), size=shown)


def _wrapped(text: str) -> str:
    return f"<sandbox_output>{text}</sandbox_output>"


PROFILES = (
    Profile("thyme", "Thyme's code environment: code in <code> against the image at its path, its rewrites, "
            "locals carried between rounds, <sandbox_output> inside the assistant turn, exact.",
            {"python": ThymePython()}, call_format=ThymeFormat()),
)
