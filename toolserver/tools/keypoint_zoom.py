"""`keypoint_zoom` (canonical): Groundlight's window around a point, on the original image.

The keypoint is given in the session's coordinate convention and mapped to original pixels; a
`window`×`window` box (400 by default) is centred on it and shifted, not shrunk, to stay inside (an image
smaller than the window gives its full extent on that side); the crop is enlarged with LANCZOS so its
long side is the image's long side, and at least the window size. Points outside the image are refused.
"""

from __future__ import annotations

import math

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import ToolFailure
from toolserver.geometry import CoordError, point_to_original
from toolserver.imaging import resize_exact
from toolserver.tools.args import COORD_PHRASES, Coordinate, ImageRef
from toolserver.tools.base import Tool, ToolContext, ToolOutput

WINDOW = 400  # Groundlight's window side, in pixels


def window_box(x: int, y: int, width: int, height: int, size: int = WINDOW) -> tuple[int, int, int, int]:
    """A `size`-square box centred on (x, y), shifted (never shrunk) to stay inside; an image smaller than the
    window gives its full extent on that side."""
    left, top = x - size // 2, y - size // 2
    if left + size > width:
        left = width - size
    if top + size > height:
        top = height - size
    left, top = max(0, left), max(0, top)
    return left, top, min(left + size, width), min(top + size, height)


def upscale_to(crop: Image.Image, long_side: int) -> Image.Image:
    """The crop enlarged (LANCZOS) so its long side is `long_side`, the other side rounded, at least 1."""
    w, h = crop.size
    short = max(1, round(long_side * min(w, h) / max(w, h)))
    return resize_exact(crop, (long_side, short) if w >= h else (short, long_side), Image.Resampling.LANCZOS)


class KeypointZoomArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef = 0
    keypoint: list[Coordinate] = Field(min_length=2, max_length=2,
                                       description="The [x, y] point to zoom around, in {coords}.")


class KeypointZoom(Tool):
    name = "keypoint_zoom"
    description = ("Zoom in around a point: returns a fixed-size window centred on the keypoint (shifted to stay "
                   "inside the image), enlarged for a closer look. Useful to read text or identify small objects.")
    Args = KeypointZoomArgs

    def __init__(self, window: int = WINDOW):
        self.window = window

    def run(self, ctx: ToolContext, args: KeypointZoomArgs) -> ToolOutput:
        entry = ctx.image(args.image)
        width, height = entry.size
        try:
            px, py = point_to_original((args.keypoint[0], args.keypoint[1]), ctx.coords, entry.size, entry.view_size)
        except CoordError as exc:
            raise ToolFailure(f"Error: {exc}", "invalid_point") from None
        if not (0 <= px <= width and 0 <= py <= height):
            raise ToolFailure(
                f"Error: keypoint {args.keypoint} is outside the image `{entry.key}`; coordinates are "
                f"{COORD_PHRASES[ctx.coords]}.", "invalid_point")
        x, y = min(math.floor(px), width - 1), min(math.floor(py), height - 1)
        box = window_box(x, y, width, height, self.window)
        out = upscale_to(entry.pixels.crop(box), max(width, height, self.window))
        key, index = ctx.observation_key(), len(ctx.images)
        text = (f"Zoomed in around ({x}, {y}) of `{entry.key}` (original pixels), window {list(box)}. "
                f"The result is image `{key}` (index {index}), {out.width}x{out.height} pixels.")
        return ToolOutput(text=text, images=[out], meta={"source": entry.key, "point_original": [x, y],
                                                        "box_original": list(box), "window": self.window})
