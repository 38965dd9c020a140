"""Chain-of-Focus (xtong-zhang/Chain-of-Focus @ 431ff0dd, `eval/vstar/vllm_inference.py`): `image_zoom_in_tool`
on the image the model sees, as its inference loop runs it (`run_inference_loop`, `do_crop`,
`find_absolute_bboxes`, `check_absolute_bbox_format`, `resize_image`, with its defaults: enlarge 1.5, scale-up 2,
`min_resolution` 112).

The model sees the input smart-resized (factor 28, at least 112² and at most 3840² pixels, LANCZOS: the profile's
view), and every zoom cuts that view, never an earlier zoom. A turn holding `<tool_call>` is a call; its first
`<tool_call>…</tool_call>` block is `json.loads`-ed and `["arguments"]["bbox_2d"]` unpacked as x0, y0, x1, y1 in the
view's pixels; one within [0, W) x [0, H) (x1, y1 in (0, W] x (0, H]) with x1 > x0 and y1 > y0 is widened x1.5
about its centre, clamped to the view, `int()`-ed, cut, and resized to twice its size brought into smart_resize's
bounds, LANCZOS. The loop shows no error texts, only images: a box it refuses, a block that is not JSON or not
closed zooms the whole view (x2); a call without `arguments`, a box of another length, a cut that cannot be
resized (empty, over 200:1) shows the view itself. Either way the model gets the image and `USER_PROMPT`, in a
user turn after its own; here such a call answers `ok: false` (code `invalid_box` or `tool_error`) with that same
image and text. A text without `<tool_call>` ends the episode; `label` is read by nobody; the turn limit (6) is
the caller's. Direct calls (`/tool_calls`, MCP) give the call's `arguments` (`bbox_2d`, `label`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from PIL import Image
from pydantic import BaseModel, Field

from toolserver import jsonio
from toolserver.arguments import ArgumentStyle
from toolserver.formats.base import QWEN_USER_TURN, VISION_TOKENS, Parsed, ParsedCall, RawTextFormat, TurnRule
from toolserver.geometry import Coords, smart_resize
from toolserver.messages import image_part
from toolserver.models import ToolResult, ViewSettings
from toolserver.profiles.base import Alpha, Profile, tools_by_name
from toolserver.tools.base import Tool, ToolContext, ToolOutput

TOOL = "image_zoom_in_tool"
FACTOR, MIN_PIXELS, MAX_PIXELS = 28, 112 * 112, 3840 * 3840
ENLARGE, SCALE_UP = 1.5, 2
VIEW_RULE = f"Chain-of-Focus resize_image, factor {FACTOR}, {MIN_PIXELS} to {MAX_PIXELS} pixels, LANCZOS"
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
USER_PROMPT = ("\nThink in the mind first, and then decide whether to call tools one or more times OR provide final "
               "answer. Format strictly as: <think>...</think> <tool_call>...</tool_call> <tool_call>...</tool_call> "
               "(if any tools needed) OR <answer>...</answer> (if no tools needed).")


class ChainOfFocusFormat(RawTextFormat):
    name = "chain-of-focus"
    description = ("Chain-of-Focus: a turn with <tool_call> zooms (its first block); the image and its prompt in a "
                   "user turn, as its chat template renders them.")
    turn = TurnRule(max_calls=1)

    def parse(self, text: str) -> Parsed:
        if "<tool_call>" not in text:
            return Parsed(self.name, done=True)
        return Parsed(self.name, calls=[ParsedCall(TOOL, {"turn": text})], done=False)

    def observation(self, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
        """One user message: the image, then the prompt (the loop's order)."""
        if not results:
            return []
        result = results[-1]
        images = [image_part(img) for img in result.images]
        return [{"role": "user", "content": [*images, {"type": "text", "text": result.text}] if images
                 else result.text}]

    def prompt(self, results: Sequence[ToolResult], image: str = VISION_TOKENS) -> str | None:
        """What its chat template renders after the model's text: the end of that turn, then the user turn."""
        if not results:
            return ""
        result = results[-1]
        return QWEN_USER_TURN[0] + image * len(result.images) + result.text + QWEN_USER_TURN[1]


def view_size(width: int, height: int) -> tuple[int, int]:
    new_height, new_width = smart_resize(height, width, FACTOR, MIN_PIXELS, MAX_PIXELS)
    return new_width, new_height


def resize_view(image: Image.Image) -> Image.Image:
    """`resize_image` of the input: what the model is shown and what every zoom cuts."""
    return image.resize(view_size(*image.size), Image.Resampling.LANCZOS)


def find_box(args: Any, width: int, height: int) -> list[int] | None:
    """`find_absolute_bboxes` (a non-JSON block or a refused box: None; other failures raise, as there)."""
    if isinstance(args, dict) and isinstance(args.get("turn"), str):
        match = TOOL_CALL.search(args["turn"])
        if not match:
            return None
        try:
            data: Any = jsonio.loads(match.group(1).strip())
        except json.JSONDecodeError:
            return None
    else:  # a direct call: its arguments
        data = {"arguments": args}
    x0, y0, x1, y1 = data["arguments"]["bbox_2d"]
    if not valid_box([x0, y0, x1, y1], width, height):
        return None
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    bw, bh = (x1 - x0) * ENLARGE, (y1 - y0) * ENLARGE
    return [int(max(0, cx - bw / 2)), int(max(0, cy - bh / 2)), int(min(width, cx + bw / 2)),
            int(min(height, cy + bh / 2))]


def valid_box(bbox: list[Any], w: int, h: int) -> bool:
    """`check_absolute_bbox_format`."""
    if not all(isinstance(coord, int | float) for coord in bbox):
        return False
    x0, y0, x1, y1 = bbox
    return (0 <= x0 < w and 0 <= y0 < h and 0 < x1 <= w and 0 < y1 <= h) and not (x1 <= x0 or y1 <= y0)


def do_crop(view: Image.Image, box: list[int] | None) -> Image.Image:
    """The cut resized to twice its size within smart_resize's bounds; the whole view for no box."""
    crop = view.crop((box[0], box[1], box[2], box[3])) if box is not None else view.copy()
    new_height, new_width = smart_resize(crop.height * SCALE_UP, crop.width * SCALE_UP, FACTOR, MIN_PIXELS,
                                         MAX_PIXELS)
    return crop.resize((new_width, new_height), Image.Resampling.LANCZOS).convert("RGB")


class ZoomArgs(BaseModel):
    bbox_2d: list[float] = Field(min_length=4, max_length=4, description=(
        "The bounding box of the region to zoom in, as [x1, y1, x2, y2], where (x1, y1) is the top-left corner and "
        "(x2, y2) is the bottom-right corner."))
    label: str | None = Field(default=None, description="The name or label of the object in the specified bounding "
                              "box (optional).")


class ChainOfFocusZoom(Tool):
    name = TOOL
    description = ("Zoom in on a specific region of an image by cropping it based on a bounding box (bbox_2d) and an "
                   "optional object label.")
    Args = ZoomArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        entry = next((e for e in ctx.images if e.is_input), None)
        if entry is None:
            return ToolOutput.failure("Error: this session has no input image yet; upload one first.", "unknown_image")
        view = entry.pixels if ctx.inputs_are_views else ctx.view(entry, VIEW_RULE, resize_view)
        meta: dict[str, Any] = {"source": entry.key, "view_size": list(view.size)}
        try:
            box = find_box(args, *view.size)
        except Exception as exc:  # the loop catches it and shows the view itself
            return self._fallback(view, "tool_error", meta, reason=f"{type(exc).__name__}: {exc}")
        try:
            zoomed = do_crop(view, box)
        except Exception as exc:  # do_crop shows the view itself
            return self._fallback(view, "tool_error", meta, reason=f"{type(exc).__name__}: {exc}", box=box)
        if box is None:
            return ToolOutput(USER_PROMPT, images=[zoomed], ok=False, error_code="invalid_box",
                              meta={**meta, "reason": "no valid box: the whole view, zoomed"})
        return ToolOutput(USER_PROMPT, images=[zoomed], meta={**meta, "box": box})

    @staticmethod
    def _fallback(view: Image.Image, code: str, meta: dict[str, Any], **more: Any) -> ToolOutput:
        return ToolOutput(USER_PROMPT, images=[view.copy()], ok=False, error_code=code, meta={**meta, **more})


PROFILES = (
    Profile("chain-of-focus", "Chain-of-Focus (its V* loop): image_zoom_in_tool in pixels of the smart-resized view, "
            "widened x1.5, cut and scaled x2 (LANCZOS); a refused box zooms the whole view; its user prompt.",
            tools_by_name(ChainOfFocusZoom()), coords=Coords.ABS_VIEW, call_format=ChainOfFocusFormat(),
            view=ViewSettings(factor=FACTOR, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS), alpha=Alpha.DROP,
            arguments=ArgumentStyle.PYTHON),
)
