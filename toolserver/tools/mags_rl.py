"""Mags-RL's magnifying glass grammar (profile `mags-rl`): `<zoom>[[x1, y1, x2, y2], ...]</zoom>`.

Same behaviour as `magnify` (boxes under 40 % of the area, each valid one cropped from the original and
enlarged x4 with SMFANet), on the session's first image. Mags-RL's code is not released: coordinates
follow the session's convention (the profile's default is `abs_view`, Qwen2.5-VL-style pixels of the image
as the model saw it), and the texts are ours.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import ToolFailure
from toolserver.tools.base import ToolContext, ToolOutput
from toolserver.tools.magnify import MAGS_RL_SCALE, Magnify


class MagsZoomArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    boxes: list[list[float]] = Field(
        min_length=1,
        description="Boxes [[x1, y1, x2, y2], ...] to magnify, in {coords}; each smaller than 40% of the image.",
    )


class MagsZoom(Magnify):
    name = "zoom"
    lane = "heavy"
    description = ("Magnifying glass: crop each box from the high-resolution image and enlarge it with "
                   "super-resolution. Each box must be smaller than 40% of the image area; focus on specific "
                   "targets.")
    Args = MagsZoomArgs
    failure_prefix = "Zoom failed: "

    def run(self, ctx: ToolContext, args: MagsZoomArgs) -> ToolOutput:
        if not ctx.images:
            raise ToolFailure("Zoom failed: there is no image to zoom into.", "unknown_image")
        return self.magnify(ctx, 0, args.boxes, MAGS_RL_SCALE)
