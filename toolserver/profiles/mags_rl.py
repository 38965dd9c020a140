"""Mags-RL's magnifying glass grammar (profile `mags-rl`): `<zoom>[[x1, y1, x2, y2], ...]</zoom>`.

Same behaviour as `magnify` (boxes under 40 % of the area, each valid one cropped from the original and
enlarged x4 with SMFANet), on the session's first image. Mags-RL's code is not released: coordinates
follow the session's convention (the profile's default is `abs_view`, Qwen2.5-VL-style pixels of the image
as the model saw it), and the texts are ours.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import ToolFailure
from toolserver.formats.mags_rl import MAGS_RL
from toolserver.geometry import Coords
from toolserver.profiles.base import Profile, tools_by_name
from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.tools.magnify import Magnify

SCALE = 4  # the paper's magnifying glass enlarges x4 with SMFANet


class MagsZoomArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    boxes: list[list[float]] = Field(
        min_length=1,
        description="Boxes [[x1, y1, x2, y2], ...] to magnify, in {coords}; each smaller than 40% of the image.",
    )


class MagsZoom(Tool):
    name = "zoom"
    lane = "heavy"
    description = ("Magnifying glass: crop each box from the high-resolution image and enlarge it with "
                   "super-resolution. Each box must be smaller than 40% of the image area; focus on specific "
                   "targets.")
    Args = MagsZoomArgs

    def __init__(self) -> None:
        self.glass = Magnify()  # the canonical magnifying glass, with Mags-RL's failure wording
        self.glass.failure_prefix = "Zoom failed: "

    def run(self, ctx: ToolContext, args: MagsZoomArgs) -> ToolOutput:
        if not ctx.images:
            raise ToolFailure("Zoom failed: there is no image to zoom into.", "unknown_image")
        return self.glass.magnify(ctx, 0, args.boxes, SCALE)


PROFILES = (
    Profile("mags-rl", "Mags-RL: <zoom>[[x1,y1,x2,y2],...]</zoom> magnifying glass, boxes under 40% of the image.",
            tools_by_name(MagsZoom()), coords=Coords.ABS_VIEW, max_tool_calls=1, call_format=MAGS_RL),
)
