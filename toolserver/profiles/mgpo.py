"""MGPO's grounding crop (profile `mgpo`): a box in model-input pixels, cut from the original image.

The model-input size is what MGPO's trainer feeds Qwen2.5-VL: `process_image` (scale to at most
1,003,520 and at least 200,704 pixels, `int()` sides, NEAREST), then the processor's smart_resize. The
mapping to the original is done in float32, as MGPO's torch arithmetic does (on a 5312×2988 photo a full
box crops 5312×2987). The crop goes through `process_image` again. An invalid box returns the original
(processed) image with MGPO's "Not providing correct coordinates…" text, `ok:false`.
Deviation: integers too large for the arithmetic are invalid boxes (the reference raises OverflowError).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from PIL import Image
from pydantic import BaseModel, Field

from toolserver.formats.mgpo import MGPO
from toolserver.geometry import Coords
from toolserver.models import ViewSettings
from toolserver.profiles.base import Alpha, Profile, tools_by_name
from toolserver.tools.base import Tool, ToolContext, ToolOutput

MAX_PIXELS = 1003520
MIN_PIXELS = 200704
PROCESS_RULE = f"MGPO process_image, {MAX_PIXELS} to {MIN_PIXELS} pixels, nearest"
VALID_TEXT = "Based on the provided coordinates, return the sub-image:"
INVALID_TEXT = "Not providing correct coordinates or invalid coordinate values, return the original image:"


def process_image(image: Image.Image, max_pixels: int = MAX_PIXELS, min_pixels: int = MIN_PIXELS) -> Image.Image:
    if image.width * image.height > max_pixels:
        factor = math.sqrt(max_pixels / (image.width * image.height))
        image = image.resize((int(image.width * factor), int(image.height * factor)), Image.Resampling.NEAREST)
    if image.width * image.height < min_pixels:
        factor = math.sqrt(min_pixels / (image.width * image.height))
        image = image.resize((int(image.width * factor), int(image.height * factor)), Image.Resampling.NEAREST)
    return image


def valid_box(bbox: Any, input_w: int, input_h: int) -> bool:
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(isinstance(v, int) for v in bbox):
        return False
    x1, y1, x2, y2 = bbox
    if any(abs(v) > 2**31 for v in bbox):
        return False
    return (x1 < x2 and y1 < y2 and x1 >= 0 and y1 >= 0 and x2 <= input_w and y2 <= input_h
            and (x2 - x1) > 28 and (y2 - y1) > 28 and max((x2 - x1) / (y2 - y1), (y2 - y1) / (x2 - x1)) < 100)


def to_original_f32(value: int, input_size: int, original_size: int) -> int:
    """int(value / input_size * original_size) with torch's float32 arithmetic."""
    reciprocal = np.float32(1.0) / np.float32(input_size)
    return int(np.float32(np.float32(value) * reciprocal) * np.float32(original_size))


class MgpoGroundingArgs(BaseModel):
    bbox_2d: list[int] = Field(min_length=4, max_length=4,
                               description="[x1, y1, x2, y2] of the key image area, in pixels of the image you see.")
    label: str = Field(description="What the area contains.")


class MgpoGrounding(Tool):
    name = "grounding"
    description = ("Crop the key image area relevant to the question from the original high-resolution image "
                   "and enlarge it for improved clarity.")
    Args = MgpoGroundingArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        entry = ctx.images[0]
        input_w, input_h = entry.view_size or entry.size
        bbox: Any = args.get("bbox_2d")
        if not (valid_box(bbox, input_w, input_h) and isinstance(args.get("label"), str)):
            return ToolOutput(text=INVALID_TEXT, images=[ctx.view(entry, PROCESS_RULE, process_image)], ok=False,
                              error_code="invalid_box", meta={"source": entry.key, "input_size": [input_w, input_h]})
        ori_w, ori_h = entry.size
        x1, y1, x2, y2 = bbox
        box = (to_original_f32(x1, input_w, ori_w), to_original_f32(y1, input_h, ori_h),
               to_original_f32(x2, input_w, ori_w), to_original_f32(y2, input_h, ori_h))
        w, h = box[2] - box[0], box[3] - box[1]
        whole = w >= h * 150 or h >= w * 150
        processed = ctx.view(entry, PROCESS_RULE, process_image) if whole else process_image(entry.pixels.crop(box))
        return ToolOutput(text=VALID_TEXT, images=[processed],
                          meta={"source": entry.key, "input_size": [input_w, input_h], "box_original": list(box),
                                "label": args.get("label")})


PROFILES = (
    Profile("mgpo", "MGPO: one grounding crop from a fenced-JSON bbox_2d in model-input pixels.",
            tools_by_name(MgpoGrounding()), coords=Coords.ABS_VIEW,
            view=ViewSettings(prescale_max_pixels=MAX_PIXELS, prescale_min_pixels=MIN_PIXELS),
            max_tool_calls=1, call_format=MGPO, alpha=Alpha.DROP),
)
