"""`magnify` (canonical) and Mags-RL's `zoom`: a magnifying glass over several boxes at once.

Mags-RL (paper only; code unreleased): the model names regions of interest, each smaller than 40 % of the
image ("Each individual box must be smaller than 40% of the image area"); each valid box is cropped from the
original image and enlarged by the SMFANet super-resolution agent (x4, SMFANet's released scale used by the
paper). Invalid boxes are skipped and named; if none is valid the call fails ("a failure message").

Enlargement follows `toolserver.tools.enlarge`: the output-pixel cap may lower the scale or fall back to a
bicubic resize. Without installed weights the glass still works with bicubic resizing and says so in `meta`
(and `/readyz` and the tool listing say so too), so a rollout is never broken by a missing download.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import ToolFailure
from toolserver.geometry import CoordError, integer_box, to_original
from toolserver.tools.args import COORD_PHRASES, ImageRef
from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.tools.enlarge import check_crop_size, enlarge_all

MAX_AREA_FRACTION = 0.4
DEFAULT_SCALE: Final = 4  # Mags-RL's magnifying glass enlarges x4


class MagnifyArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef = 0
    boxes: list[list[float]] = Field(
        min_length=1,
        description="Boxes [[x1, y1, x2, y2], ...] to magnify, in {coords}; each smaller than 40% of the image.",
    )
    scale: Literal[2, 3, 4] = Field(default=DEFAULT_SCALE, description="Enlargement factor. {sr_scales}")


class Magnify(Tool):
    name = "magnify"
    lane = "heavy"
    description = ("Magnifying glass: crop one or more regions from the full-resolution image and enlarge each with "
                   "super-resolution (SMFANet). Each box must be smaller than 40% of the image area; use it to "
                   "inspect or count small objects. {sr_scales_fallback}")
    Args = MagnifyArgs
    failure_prefix = "Error: "

    def check(self, ctx: ToolContext, entry, box: list[float]) -> tuple[int, int, int, int] | str:
        """An integer original-pixel box, or why this box is skipped."""
        if len(box) != 4 or not all(isinstance(v, int | float) for v in box):
            return "not four numbers"
        x1, y1, x2, y2 = box
        if x1 >= x2 or y1 >= y2:
            return "needs x1 < x2 and y1 < y2"
        try:
            ox1, oy1, ox2, oy2 = to_original((x1, y1, x2, y2), ctx.coords, entry.size, entry.view_size)
        except CoordError as exc:
            return str(exc)
        width, height = entry.size
        if ox1 < 0 or oy1 < 0 or ox2 > width + 1e-6 or oy2 > height + 1e-6:
            return f"outside the image ({COORD_PHRASES[ctx.coords]})"
        if (ox2 - ox1) * (oy2 - oy1) >= MAX_AREA_FRACTION * width * height:
            return "covers 40% of the image area or more"
        left, top, right, bottom = integer_box((ox1, oy1, ox2, oy2))
        right, bottom = min(right, width), min(bottom, height)
        return check_crop_size(right - left, bottom - top) or (left, top, right, bottom)

    def magnify(self, ctx: ToolContext, image_ref: str | int, boxes: list[list[float]], scale: int) -> ToolOutput:
        entry = ctx.image(image_ref)
        crops, kept, problems = [], [], []
        for i, box in enumerate(boxes):
            checked = self.check(ctx, entry, box)
            if isinstance(checked, str):
                shown = [int(v) if isinstance(v, float) and v.is_integer() else v for v in box]
                problems.append(f"box {i + 1} {shown}: {checked}")
            else:
                kept.append(list(checked))
                crops.append(entry.pixels.crop(checked))
        if not crops:
            raise ToolFailure(f"{self.failure_prefix}no valid box. " + "; ".join(problems) + ". Each box must be "
                              "[x1, y1, x2, y2] inside the image and smaller than 40% of its area.", "invalid_box")
        images, methods = enlarge_all(ctx, crops, scale, fallback=True)
        keys = [ctx.observation_key(i) for i in range(len(images))]
        sizes = ", ".join(f"{k} {im.width}x{im.height}" for k, im in zip(keys, images, strict=True))
        text = f"Magnified {len(images)} of {len(boxes)} boxes: {sizes}."
        if problems:
            text += " Skipped: " + "; ".join(problems) + "."
        meta = {"source": entry.key, "boxes_original": kept, "invalid": problems,
                "magnified": all(m["method"] == "smfanet" for m in methods), "enlargements": methods}
        return ToolOutput(text=text, images=images, meta=meta)

    def run(self, ctx: ToolContext, args: MagnifyArgs) -> ToolOutput:
        return self.magnify(ctx, args.image, args.boxes, args.scale)
