"""VisionThink (dvlab-research/VisionThink @ 42afd8c3): the model first sees its image downsampled and may ask once
for it at full resolution. Its verl fork as the efficient-reasoning recipe runs it (`scripts/
run_efficient_gpt4o_judge.sh`: `data.tool_call=True`, `data.use_tgt_size=True`, `rollout.use_raw_image=True`, the
default `data.max_pixels` 4194304 and `min_pixels` 262144), reproduced: the turn of
`vLLMRollout_MultiTurn_ToolCall.generate_sequences` (`verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py`),
`prepare_tool_call_inputs` and `resize_image` (`…/function_tools.py`), the texts of `verl/trainer/constants.py`, and
the two images `process_image` makes in `verl/utils/dataset/multimodal_dataset.py`.

The first view (the profile's view rule, `first_view`): the image scaled into [262144, 4194304] pixels (`int()`
sides), then each side halved (`//`), LANCZOS both times. The `resize_image` tool answers with the original
resized straight to twice the first view's size (LANCZOS), the same image at every call. Both resize the image
in its own mode and drop alpha after (`convert("RGB")` last): an RGBA, LA or palette upload is resized from its
bytes as uploaded (premultiplied alpha; a palette resized NEAREST, as Pillow does), not from intake's RGB. A
session whose inputs are views (`input_form: view`, the verl-tool bridge) has no original: there the rollout's
other mode (`use_raw_image=False`) is what runs, doubling the last image of the session.

The turn: a text with `<tool_call>…</tool_call>` is a call, else the episode ends. Every block's `{…}}` pieces (the
rollout's `\\{.*?\\}\\}`) are `json.loads`-ed, and each must hold `["arguments"]["action"] == "resize"`, the only one
of them; the function name is never read. A failure is Python's own text in the rollout's `<tool_response>` error
turn (none found reads as the `UnboundLocalError` the rollout gets). The observation is the user turn the rollout
appends right after the model's `<|im_end|>` (no newline between), the image written as it writes it (Qwen-VL's
vision tokens) unless the session asks for `<image>`. Its image limit (2) and round limit (2) are the caller's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Literal

from PIL import Image
from pydantic import BaseModel, Field

from toolserver import jsonio
from toolserver.arguments import ArgumentStyle
from toolserver.formats.base import IMAGE_TOKEN, VISION_TOKENS, Parsed, ParsedCall, RawTextFormat, TurnRule
from toolserver.geometry import Coords, ViewRule
from toolserver.imaging import own_mode_source, resize_then_rgb
from toolserver.models import ToolResult, ViewSettings
from toolserver.profiles.base import Alpha, Profile, tools_by_name
from toolserver.tools.base import Tool, ToolContext, ToolOutput

TOOL = "resize_image"
MAX_PIXELS, MIN_PIXELS = 4194304, 262144
FIRST_VIEW = ViewRule(factor=None, prescale_max_pixels=MAX_PIXELS, prescale_min_pixels=MIN_PIXELS, downsample=2)
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
JSON_PIECE = re.compile(r"\{.*?\}\}")
USER_TURN = ("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")
TOOL_CALL_MULTI_TURN_PROMPT = (
    "Please carefully analyze the content returned from the image resize tool in combination with the original "
    "question and image from the user, continue your reasoning process inside <think> and </think> and then write "
    "your final answer inside <answer> and </answer>.")
ERROR_INFO_MULTI_TURN_PROMPT = ("Please analyze the error information obtained from the function tool and adjust "
                                "your response. Countinue your reasoning process inside <think> and </think>.")
RESIZED = ("<tool_response>\nThe resized image is shown below:\n<image>\n</tool_response>\n"
           + TOOL_CALL_MULTI_TURN_PROMPT)
ERROR = "<tool_response>\nERROR occurs during the function tool call. Error Information: {error}.\n</tool_response>\n"
SYSTEM_PROMPT = (  # TOOL_AGENT_SYSTEM_PROMPT, for the caller's first turn
    'You are a helpful assistant.\n\n# Tools\n\nYou may call the function tool shown below to assist with the user '
    'query.\n\nYou are provided with the function signature within <tools></tools> XML tags:\n<tools>\n{"type": '
    '"function", "function": {"name_for_human": "resize_image", "name": "resize_image", "description": "Resize the '
    'image resolution.", "parameters": {"properties": {"action": {"description": "The action to perform. The '
    'available actions are:\\n* `resize`: Double the resolution of the current image. You should only use this tool '
    'if you are unable to obtain the critical information needed to answer the question from the current '
    'resolution.", "enum": ["resize"], "type": "string"}}, "required": ["action"], "type": "object"}, '
    '"args_format": "Format the arguments as a JSON object."}}\n</tools>\nFor each function call, return a json '
    'object with the function name and the corresponding argument within <tool_call></tool_call> XML tags:\n'
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


class VisionThinkFormat(RawTextFormat):
    name = "visionthink"
    description = ("VisionThink: a turn with <tool_call> is one resize_image call (its {…}} pieces, read as its "
                   "rollout reads them); raw-text observation appended after the model's <|im_end|>.")
    turn = TurnRule(max_calls=1)

    def parse(self, text: str) -> Parsed:
        if not TOOL_CALL.findall(text):
            return Parsed(self.name, done=True)
        return Parsed(self.name, calls=[ParsedCall(TOOL, {"turn": text})], done=False)

    def prompt(self, results: Sequence[ToolResult], image: str = VISION_TOKENS) -> str | None:
        if not results:
            return ""
        result = results[-1]
        text = result.text.replace(IMAGE_TOKEN, image) if result.ok else result.text
        return USER_TURN[0] + text + USER_TURN[1]


def first_view(image: Image.Image) -> Image.Image:
    """What the model sees first (the dataset's `process_image` with `tool_call`), for a trainer to show it: an image
    with alpha or a palette is resized in its own mode and made RGB last, as there."""
    lanczos = Image.Resampling.LANCZOS
    if image.width * image.height > MAX_PIXELS:
        factor = math.sqrt(MAX_PIXELS / (image.width * image.height))
        image = image.resize((int(image.width * factor), int(image.height * factor)), resample=lanczos)
    if image.width * image.height < MIN_PIXELS:
        factor = math.sqrt(MIN_PIXELS / (image.width * image.height))
        image = image.resize((int(image.width * factor), int(image.height * factor)), resample=lanczos)
    image = image.resize((image.width // 2, image.height // 2), resample=lanczos)
    return image if image.mode == "RGB" else image.convert("RGB")


def prepare_tool_call_inputs(json_objects: list[Any]) -> Any:
    """The rollout's check, in its order (no object at all fails as its loop leaves `action_type` unbound)."""
    for obj in json_objects:
        action_type = obj["arguments"]["action"]
        if action_type not in ["resize"]:
            raise AssertionError(f"Unknown Tool Type: {action_type}. Available function tools are: `resize`")
        if len(json_objects) != 1:
            raise AssertionError("You should only call function `resize` once per function call.")
    return action_type


def tool_calls(args: Any) -> list[Any]:
    """The JSON objects of a turn's blocks (`{…}}` pieces), or a direct call's arguments."""
    if isinstance(args, dict) and isinstance(args.get("turn"), str):
        return [jsonio.loads(piece) for content in TOOL_CALL.findall(args["turn"])
                for piece in JSON_PIECE.findall(content)]
    return [{"name": TOOL, "arguments": args}]


class ResizeArgs(BaseModel):
    action: Literal["resize"] = Field(description=(
        "The action to perform. The available actions are:\n* `resize`: Double the resolution of the current image. "
        "You should only use this tool if you are unable to obtain the critical information needed to answer the "
        "question from the current resolution."))


class ResizeImage(Tool):
    name = TOOL
    description = "Resize the image resolution."
    Args = ResizeArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        entry = next((e for e in ctx.images if e.is_input), None)
        if entry is None:
            return ToolOutput.failure("Error: this session has no input image yet; upload one first.", "unknown_image")
        try:
            prepare_tool_call_inputs(tool_calls(args))
        except Exception as exc:  # the rollout shows every failure in Python's words
            return ToolOutput.failure(ERROR.format(error=exc) + ERROR_INFO_MULTI_TURN_PROMPT, "invalid_arguments")
        if ctx.inputs_are_views:  # use_raw_image=False: the last image doubled
            last = ctx.images[-1]
            image = last.pixels.resize((last.size[0] * 2, last.size[1] * 2), Image.Resampling.LANCZOS)
            return ToolOutput(RESIZED, images=[image], meta={"source": last.key})
        width, height = FIRST_VIEW.view_size(*entry.size)
        if width < 28 or height < 28:
            return ToolOutput.failure("Error: Qwen image size should be larger than 28 * 28.", "invalid_image")
        image = resize_then_rgb(entry.pixels, own_mode_source(entry.source_mime, lambda: entry.source_bytes),
                                (width * 2, height * 2), Image.Resampling.LANCZOS)
        return ToolOutput(RESIZED, images=[image], meta={"source": entry.key, "first_view": [width, height]})


PROFILES = (
    Profile("visionthink", "VisionThink: the image first shown downsampled (halved after its pixel bounds); "
            "resize_image answers with it at twice that size, LANCZOS; its tool-call turn and texts.",
            tools_by_name(ResizeImage()), coords=Coords.ABS_VIEW, call_format=VisionThinkFormat(),
            view=ViewSettings(factor=None, prescale_max_pixels=MAX_PIXELS, prescale_min_pixels=MIN_PIXELS,
                              downsample=2),
            alpha=Alpha.DROP, arguments=ArgumentStyle.PYTHON),
)
