"""IMAgent's two tools (profile `imagent`): `zoom_in(image_index, bbox_2d, label)` for visual confirmation and
`lookback_reuse(image_index, reason)` for visual reflection, at most 5 calls per session.

IMAgent's code is not released; from the paper: the model gives an image index, a box and a label, or an
image index and a reason; training allowed at most 5 tool interactions; the base model is Qwen3-VL. Our
choices (docs/decisions.md): `image_index` is 0-based over every image of the session (inputs and tool
results, in order), boxes are relative 0–1000 (Qwen3-VL's convention), the minimum crop side is 32 pixels
(Qwen3-VL's), and the crop is cut from the original image. The semantics are the canonical tools'.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from toolserver.formats.hermes import HERMES
from toolserver.profiles.base import Profile, tools_by_name
from toolserver.tools.args import Coordinate
from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.tools.lookback import LookbackArgs, LookbackReuse
from toolserver.tools.zoom_in import ZoomIn, ZoomInArgs

IMAGE_INDEX = "Index of the target image (0-based, in the order the images appeared)."


class ImagentZoomArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image_index: int = Field(ge=0, description=IMAGE_INDEX)
    bbox_2d: list[Coordinate] = Field(
        min_length=4, max_length=4,
        description="Region to zoom in on, [x1, y1, x2, y2], relative coordinates from 0 to 1000.",
    )
    label: str = Field(description="The object or region of interest in the box.")


class ImagentLookbackArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image_index: int = Field(ge=0, description=IMAGE_INDEX)
    reason: str = Field(description="Why you need to look at this image again.")


class ImagentZoomIn(Tool):
    name = "zoom_in"
    description = ("Visual confirmation: crop a local region of one of the images to inspect its details. "
                   "Give the image index, the bounding box and a label for the region.")
    Args = ImagentZoomArgs

    def __init__(self) -> None:
        self._zoom = ZoomIn(min_side=32)

    def run(self, ctx: ToolContext, args: ImagentZoomArgs) -> ToolOutput:
        return self._zoom.run(ctx, ZoomInArgs(image=args.image_index, bbox_2d=args.bbox_2d, label=args.label))


class ImagentLookback(Tool):
    name = "lookback_reuse"
    description = ("Visual reflection: look at one of the images again to restore its global context when "
                   "your memory of it is uncertain. Give the image index and the reason.")
    Args = ImagentLookbackArgs

    def run(self, ctx: ToolContext, args: ImagentLookbackArgs) -> ToolOutput:
        return LookbackReuse().run(ctx, LookbackArgs(image=args.image_index, reason=args.reason))


PROFILES = (
    Profile("imagent", "IMAgent: zoom_in and lookback_reuse by image index, at most 5 calls.",
            tools_by_name(ImagentZoomIn(), ImagentLookback()), max_tool_calls=5, call_format=HERMES),
)
