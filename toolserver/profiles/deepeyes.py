"""DeepEyes' two tools (profile `deepeyes`), as `VisualToolBoxV5` at Visual-Agent/DeepEyes@6c5e796 runs them.

Both tools work on the session's first input image in its original pixels (DeepEyes keeps the unresized
`origin_multi_modal_data` for its tools), never on an earlier result:
- `image_zoom_in_tool`: `bbox_2d` in pixels; clamped to the image; refused unless left < right, top < bottom
  and long/short ≤ 100; a side under 28 px grows about the centre so the short side becomes 28 (half-sizes
  rounded up, left/top floored, right/bottom ceiled, not clamped again: Pillow fills outside with black), then
  the check runs again. A refusal reads `Error: ZOOM IN ARGUMENTS ARE INVALID`. Pillow crops the box as given
  (a float edge is rounded half to even).
- `image_rotate_tool`: Pillow's `rotate(angle)` — counter-clockwise, same canvas, nearest neighbour, black
  corners — whatever its schema's text says (DeepEyes' only rotate schema calls positive angles clockwise).
Any other failure is Python's own exception text behind `Error: ` (a missing key reads `Error: 'bbox_2d'`),
so the arithmetic here is done on the values exactly as given, in the reference's order.
The turn (at most 3 calls, an answer ends the episode, one error voids the turn) is the call format in
`toolserver/formats/deepeyes.py`.
"""

from __future__ import annotations

from math import ceil, floor
from typing import Any

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from toolserver.arguments import ArgumentStyle
from toolserver.errors import ToolFailure
from toolserver.formats.deepeyes import DEEPEYES
from toolserver.geometry import Coords
from toolserver.profiles.base import Alpha, Profile, tools_by_name
from toolserver.tools.base import Tool, ToolContext, ToolOutput

INVALID_ZOOM = "ZOOM IN ARGUMENTS ARE INVALID"
MIN_SIDE = 28
MAX_ASPECT = 100


class DeepEyesZoomArgs(BaseModel):
    # SYSTEM_PROMPT_V5's schema, its quirk kept: it requires `bbox`, a property it does not define.
    model_config = ConfigDict(json_schema_extra=lambda schema: schema.update(required=["bbox"]))

    bbox_2d: list[float] = Field(
        min_length=4, max_length=4,
        description="The bounding box of the region to zoom in, as [x1, y1, x2, y2], where (x1, y1) is the top-left "
        "corner and (x2, y2) is the bottom-right corner.",
    )
    label: str | None = Field(default=None, description="The name or label of the object in the specified bounding "
                              "box (optional).")


class DeepEyesRotateArgs(BaseModel):
    # SYSTEM_PROMPT_V1's schema, the only one DeepEyes writes for this tool (V5's executor ignores image_path).
    image_path: str = Field(description="Path or URL of the image to be rotated.")
    angle: int = Field(description="Rotation angle in degrees (e.g., 90, 180, 270). Positive values for clockwise, "
                       "negative for counterclockwise.")


class VisualToolBoxV5:
    """Named and shaped as the reference's class, so that a box of the wrong length fails with the words Python
    gives the reference (`VisualToolBoxV5.maybe_resize_bbox() missing 1 required positional argument: …`)."""

    def __init__(self, width: int, height: int):
        self.width, self.height = width, height

    @staticmethod
    def validate_bbox(left: Any, top: Any, right: Any, bottom: Any) -> bool:
        try:  # the reference turns every failure here into False
            if not (left < right and bottom > top):
                return False
            height, width = bottom - top, right - left
            return max(height, width) / min(height, width) <= MAX_ASPECT
        except Exception:
            return False

    def maybe_resize_bbox(self, left: Any, top: Any, right: Any, bottom: Any) -> list[Any] | None:
        left, top = max(0, left), max(0, top)
        right, bottom = min(self.width, right), min(self.height, bottom)
        if not self.validate_bbox(left, top, right, bottom):
            return None
        height, width = bottom - top, right - left
        if height >= MIN_SIDE and width >= MIN_SIDE:
            return [left, top, right, bottom]
        center_x, center_y = (left + right) / 2.0, (top + bottom) / 2.0
        ratio = MIN_SIDE / min(height, width)
        half_height, half_width = ceil(height * ratio * 0.5), ceil(width * ratio * 0.5)
        grown = [floor(center_x - half_width), floor(center_y - half_height),
                 ceil(center_x + half_width), ceil(center_y + half_height)]
        return grown if self.validate_bbox(*grown) else None


# Python names a function by its module in some argument errors ("<module>.VisualToolBoxV5.maybe_resize_bbox()
# argument after * must be an iterable, not int"): the reference's module, so the text is the reference's.
VisualToolBoxV5.maybe_resize_bbox.__module__ = "verl.workers.agent.envs.mm_process_engine.visual_toolbox_v5"


def first_input(ctx: ToolContext):
    entry = next((e for e in ctx.images if e.is_input), None)
    if entry is None:
        raise ToolFailure("Error: this session has no input image yet; upload one first.", "unknown_image")
    return entry


def _python_failure(exc: Exception) -> ToolFailure:
    if str(exc) == INVALID_ZOOM:
        code = "invalid_box"
    elif isinstance(exc, KeyError | TypeError | IndexError):
        code = "invalid_arguments"
    else:
        code = "tool_error"
    return ToolFailure(f"Error: {exc}", code)


class DeepEyesZoom(Tool):
    name = "image_zoom_in_tool"
    description = ("Zoom in on a specific region of an image by cropping it based on a bounding box (bbox) and an "
                   "optional object label.")
    Args = DeepEyesZoomArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        entry = first_input(ctx)
        try:
            bbox = args["bbox_2d"]
            box = VisualToolBoxV5(*entry.size).maybe_resize_bbox(*bbox)
            if not box:
                raise ValueError(INVALID_ZOOM)
            cropped = entry.pixels.crop(box)
        except Exception as exc:  # the reference's turn shows the model every failure as `Error: <text>`
            raise _python_failure(exc) from None
        return ToolOutput(text="", images=[cropped], meta={"source": entry.key, "box_original": box})


class DeepEyesRotate(Tool):
    name = "image_rotate_tool"
    description = "Rotate an image by a specified angle (clockwise or counterclockwise)."
    Args = DeepEyesRotateArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        entry = first_input(ctx)
        try:
            angle = args["angle"]
            rotated: Image.Image = entry.pixels.rotate(angle)
        except Exception as exc:
            raise _python_failure(exc) from None
        return ToolOutput(text="", images=[rotated], meta={"source": entry.key, "angle": angle})


PROFILES = (
    Profile("deepeyes", "DeepEyes (VisualToolBoxV5): image_zoom_in_tool in original pixels and image_rotate_tool "
            "on the first input image; at most 3 calls a turn, one error voids the turn, an answer ends it.",
            tools_by_name(DeepEyesZoom(), DeepEyesRotate()), coords=Coords.ABS_ORIGINAL, call_format=DEEPEYES,
            alpha=Alpha.DROP, arguments=ArgumentStyle.PYTHON, unknown_tool_template="Error: Unknown tool name: {name}"),
)
