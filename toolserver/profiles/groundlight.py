"""Groundlight's `zoom` (profile `groundlight`): a 400×400 window around a keypoint, upscaled.

The tool sees the image as the Groundlight dataset hands it over (long side shrunk to at most 1024, the
profile's view rule) and the keypoint is in that image's pixels. The window is shifted, never shrunk, to
stay inside; an image smaller than 400 on a side gives its full extent on that side. The crop's long side
becomes max(W, H, 400) of that image (the other side rounded, at least 1), LANCZOS. The dataset's resize and the
zoom run in the image's own mode (an RGBA, LA or palette upload from its bytes as uploaded: alpha premultiplied, a
palette resized NEAREST, as Pillow does); the model's side composites the result on white. Validation texts and
the "Error: Parsing arguments for tool 'zoom': …" wrapping are the reference's (groundlight/r1_vlm @ d87e650,
`src/r1_vlm/tools/zoom.py` and `src/r1_vlm/environments/tool_vision_env.py`).
"""

from __future__ import annotations

from typing import Any

from PIL import Image
from pydantic import BaseModel, Field

from toolserver.errors import ToolFailure
from toolserver.formats.groundlight import GROUNDLIGHT
from toolserver.geometry import Coords
from toolserver.imaging import in_own_mode, own_mode_source
from toolserver.models import ViewSettings
from toolserver.profiles.base import Profile, tools_by_name
from toolserver.resample import resize_bicubic
from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.tools.keypoint_zoom import WINDOW, upscale_to, window_box


def _error(message: str) -> ToolFailure:
    return ToolFailure(f"Error: Parsing arguments for tool 'zoom': {message}", "invalid_arguments")


class GroundlightZoomArgs(BaseModel):
    keypoint: list[int] = Field(
        description="the [x, y] coordinates of the point to center the zoom on. Must be within the image boundaries."
    )


class GroundlightZoom(Tool):
    name = "zoom"
    description = ("Returns the image zoomed in on the specified keypoint.\nThis is useful to see a region of "
                   "interest with higher clarity, like for reading text or identifying objects.")
    Args = GroundlightZoomArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        if not ctx.images:
            raise ToolFailure("Error: Image not found in images. This shouldn't be possible", "unknown_image")
        entry = ctx.images[0]  # the tool always zooms the input image
        keypoint = args.get("keypoint")
        pair = keypoint if isinstance(keypoint, list | tuple) and len(keypoint) == 2 else None
        if pair is None or not all(isinstance(v, int) for v in pair):
            raise _error("Error:keypoint must be a list or tuple of two integers [x, y]")
        x, y = (int(v) for v in pair)
        size = entry.view_size if entry.view_size and entry.view_size != entry.size else entry.size
        width, height = size
        if not (0 <= x < width and 0 <= y < height):
            raise _error(f"Error: keypoint [{x}, {y}] is outside the image boundaries (width={width}, height={height})")
        box = window_box(x, y, width, height)

        def zoomed(view: Image.Image) -> Image.Image:
            return upscale_to(view.crop(box), max(width, height, WINDOW))

        def shared_view(pixels: Image.Image) -> Image.Image:
            return pixels if size == pixels.size else ctx.view(entry, f"resize {width}x{height} bicubic",
                                                               lambda image: resize_bicubic(image, size))

        # The dataset's resize (Pillow's default filter: NEAREST for a palette) and the zoom run in the image's own
        # mode; the model's side composites the result on white.
        out = in_own_mode(entry.pixels, own_mode_source(entry.source_mime, lambda: entry.source_bytes),
                          lambda image: zoomed(image if size == image.size else image.resize(size)), "white",
                          on_rgb=lambda pixels: zoomed(shared_view(pixels)))
        calls_before = sum(1 for e in ctx.images if e.origin == "tool:zoom")
        sx, sy = entry.size[0] / width, entry.size[1] / height
        meta = {"source": entry.key, "view_size": [width, height], "box_view": list(box),
                "box_original": [round(box[0] * sx), round(box[1] * sy), round(box[2] * sx), round(box[3] * sy)]}
        return ToolOutput(text=f"<image_name> tool_result_{calls_before} </image_name>", images=[out], meta=meta)


PROFILES = (
    Profile("groundlight", "Groundlight r1_vlm: zoom on a keypoint, <tool> key-value calls, images <= 1024 px.",
            tools_by_name(GroundlightZoom()), coords=Coords.ABS_VIEW,
            view=ViewSettings(factor=None, max_long_side=1024), call_format=GROUNDLIGHT),
)
