"""OpenThinkIMG's `crop` tool (its tool manager's offline worker): `param` is `[x1, y1, x2, y2]` in pixels of the
newest image (non-negative integers: a bracket, digits, commas and spaces), cropped with Pillow (a box past the image
is filled black). A text in another shape, a count other than four, an inverted box: the worker's texts, no image.

OpenThinkIMG's GRPO rollout leaves `crop` out of its tool names (a model that calls it there reads
`Tool None not found.`); its evaluation inferencer and tool server offer it, and so does this profile.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.tools.perception.worker import image_answer, text_answer, worker_image

BOX = re.compile(r"\[\s*([\d,\s]+)\s*\]")
MAX_PIXELS = 1 << 26  # a guard of ours: a box past this many pixels is refused (the worker would try to fill it)


class CropArgs(BaseModel):
    image: str = Field(description="The image to crop, by name (img_1 is the input); the newest image is used.")
    param: str = Field(description="The box to crop, [x1, y1, x2, y2] in pixels of the image.")


class Crop(Tool):
    name = "crop"
    description = "Crop the newest image to the box [x1, y1, x2, y2] (pixels); returns the crop."
    Args = CropArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        for key in ("param", "image"):  # the worker reads them in this order; a KeyError reaches the manager
            if not isinstance(args, dict) or key not in args:
                return text_answer(ctx, f"Failed to call tool crop: '{key}'", "invalid_arguments")
        param = args["param"]
        if not isinstance(param, str):
            return text_answer(ctx, "Failed to call tool crop: expected string or bytes-like object, "
                               f"got '{type(param).__name__}'", "invalid_arguments")
        match = BOX.match(param)
        if not match:
            return text_answer(ctx, f"Parameter format mismatch: {param}", "invalid_arguments")
        try:
            box = [int(v) for v in match.group(1).split(",")]
            if len(box) != 4:
                raise ValueError(f"Invalid number of coordinates: {box}")
            if (box[2] - box[0]) * (box[3] - box[1]) > MAX_PIXELS:
                return text_answer(ctx, f"Error: the box {box} is larger than {MAX_PIXELS} pixels.",
                                   "box_too_large")
            return image_answer("Image cropped successfully.", worker_image(ctx).crop((box[0], box[1], box[2], box[3])),
                                box=box)
        except ValueError as exc:
            return text_answer(ctx, f"Error processing line parameters '{param}': {exc}",
                               "invalid_arguments")
        except Exception as exc:  # what the tool manager reports of any other failure
            return text_answer(ctx, f"Failed to call tool crop: {exc}", "crop_failed")
