"""Mags-RL's magnifying glass grammar (profile `mags-rl`): `<zoom>[[x1, y1, x2, y2], ...]</zoom>`.

Each box must be a valid box inside the image and cover less than 40 % of the image area (the paper's
prompt: "Each individual box must be smaller than 40% of the image area"). Valid boxes are cropped from the
original; if none is valid the call fails with a message (the paper: "a failure message (if invalid)").
Mags-RL's code is not released: coordinates follow the session's convention (the profile's default is
`abs_view`, Qwen2.5-VL-style pixels of the image as the model saw it), and the texts are ours.
Super-resolution of the crops comes with the SMFANet engine; until then crops are returned at native size
and `meta.magnified` is false.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import ToolFailure
from toolserver.geometry import CoordError, integer_box, to_original
from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.tools.zoom_in import COORD_PHRASES

MAX_AREA_FRACTION = 0.4


class MagsZoomArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    boxes: list[list[float]] = Field(
        min_length=1,
        description="Boxes [[x1, y1, x2, y2], ...] to magnify, in {coords}; each smaller than 40% of the image.",
    )


class MagsZoom(Tool):
    name = "zoom"
    description = ("Magnifying glass: crop each box from the high-resolution image and enlarge it. Each box must "
                   "be smaller than 40% of the image area; focus on specific targets.")
    Args = MagsZoomArgs

    def check(self, ctx: ToolContext, box: list[float]) -> tuple[int, int, int, int] | str:
        entry = ctx.images[0]
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
        return left, top, min(right, width), min(bottom, height)

    def run(self, ctx: ToolContext, args: MagsZoomArgs) -> ToolOutput:
        if not ctx.images:
            raise ToolFailure("Zoom failed: there is no image to zoom into.", "unknown_image")
        entry = ctx.images[0]
        crops, boxes, problems = [], [], []
        for i, box in enumerate(args.boxes):
            checked = self.check(ctx, box)
            if isinstance(checked, str):
                shown = [int(v) if isinstance(v, float) and v.is_integer() else v for v in box]
                problems.append(f"box {i + 1} {shown}: {checked}")
            else:
                boxes.append(list(checked))
                crops.append(entry.pixels.crop(checked))
        if not crops:
            raise ToolFailure("Zoom failed: no valid box. " + "; ".join(problems) + ". Each box must be "
                              "[x1, y1, x2, y2] inside the image and smaller than 40% of its area.", "invalid_box")
        keys = [ctx.observation_key(i) for i in range(len(crops))]
        text = f"Magnified {len(crops)} of {len(args.boxes)} boxes: {', '.join(keys)}."
        if problems:
            text += " Skipped: " + "; ".join(problems) + "."
        meta = {"source": entry.key, "boxes_original": boxes, "invalid": problems, "magnified": False,
                "method": "crop (super-resolution not installed)"}
        return ToolOutput(text=text, images=crops, meta=meta)
