"""`zoom_in`: crop a region of an image (IMAgent's visual confirmation, ARM-Thinker's zoom), canonical form.

The box is given in the session's coordinate convention, mapped to original pixels, and the crop is
cut from the original image. Steps, each with a model-readable failure:
1. x1 < x2 and y1 < y2 (an inverted box is refused, never silently swapped);
2. clamp to the image (values past the edges are clamped, `meta.clamped` says so); a box wholly
   outside the image is refused;
3. each side shorter than `min_side` original pixels grows about its centre to `min_side`, shifted
   (not shrunk) to stay inside; an image smaller than that gives its full extent;
4. integer pixels: floor the start, ceil the end;
5. aspect ratio (long/short) above `max_aspect` is refused;
6. optional upscale: crops whose short side is under `upscale_below` are enlarged by `upscale_factor`
   (bicubic). Off in the default profile: the trainer's processor resizes crops anyway.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import ToolFailure
from toolserver.geometry import CoordError, expand_to_min_side, integer_box, to_original
from toolserver.memorymap import Derivation
from toolserver.tools.args import COORD_PHRASES, Coordinate, ImageRef, fmt_box
from toolserver.tools.base import Tool, ToolContext, ToolOutput


class ZoomInArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef
    bbox_2d: list[Coordinate] = Field(
        min_length=4,
        max_length=4,
        description="Bounding box [x1, y1, x2, y2]: (x1, y1) top-left, (x2, y2) bottom-right, in {coords}.",
    )
    label: str | None = Field(default=None, description="Optional name of the object in the box.")


class ZoomIn(Tool):
    name = "zoom_in"
    description = (
        "Zoom in on a region of an image: crops the box from the full-resolution original and returns it "
        "as a new image. Use it to read small text or inspect details."
    )
    Args = ZoomInArgs

    def __init__(self, *, min_side: int = 28, max_aspect: float = 100.0, upscale_below: int | None = None,
                 upscale_factor: float = 2.0):
        self.min_side = min_side
        self.max_aspect = max_aspect
        self.upscale_below = upscale_below
        self.upscale_factor = upscale_factor

    def crop_box(self, ctx: ToolContext, image_ref: str | int, bbox: list[float]):
        """Validate and map a box; returns (entry, integer original-pixel box, clamped?)."""
        entry = ctx.image(image_ref)
        width, height = entry.size
        x1, y1, x2, y2 = bbox
        if x1 >= x2 or y1 >= y2:
            raise ToolFailure(
                f"Error: bbox_2d must satisfy x1 < x2 and y1 < y2 (top-left, then bottom-right), got {bbox}.",
                "invalid_box",
            )
        try:
            ox1, oy1, ox2, oy2 = to_original((x1, y1, x2, y2), ctx.coords, entry.size, entry.view_size)
        except CoordError as exc:
            raise ToolFailure(f"Error: {exc}", "invalid_box") from None
        cx1, cy1 = max(0.0, ox1), max(0.0, oy1)
        cx2, cy2 = min(float(width), ox2), min(float(height), oy2)
        clamped = (cx1, cy1, cx2, cy2) != (ox1, oy1, ox2, oy2)
        if cx1 >= cx2 or cy1 >= cy2:
            raise ToolFailure(
                f"Error: bbox_2d {bbox} lies outside the image `{entry.key}`; coordinates are "
                f"{COORD_PHRASES[ctx.coords]}.",
                "invalid_box",
            )
        cx1, cx2 = expand_to_min_side(cx1, cx2, self.min_side, width)
        cy1, cy2 = expand_to_min_side(cy1, cy2, self.min_side, height)
        left, top, right, bottom = integer_box((cx1, cy1, cx2, cy2))
        left, top = max(0, left), max(0, top)
        right, bottom = min(width, right), min(height, bottom)
        w, h = right - left, bottom - top
        if max(w, h) / min(w, h) > self.max_aspect:
            raise ToolFailure(
                f"Error: the region {w}x{h} is too thin (aspect ratio above {self.max_aspect:g}); "
                "give a box with a more balanced width and height.",
                "invalid_box",
            )
        return entry, (left, top, right, bottom), clamped

    def run(self, ctx: ToolContext, args: ZoomInArgs) -> ToolOutput:
        entry, box, clamped = self.crop_box(ctx, args.image, list(args.bbox_2d))
        width, height = box[2] - box[0], box[3] - box[1]
        scale, size = 1.0, None
        if self.upscale_below and min(width, height) < self.upscale_below:
            scale = self.upscale_factor
            size = (int(width * scale), int(height * scale))
        derivation = Derivation(entry, box, size)  # the crop is this recipe exactly: a store may keep it instead
        # Only the box is read where the store can (the node's shared memory), and nothing until something reads the
        # crop where the store keeps it as this recipe and it is delivered by reference.
        crop = derivation.image(on_demand=ctx.pixels_on_demand)
        key, index = ctx.observation_key(), len(ctx.images)
        label = f' labelled "{args.label}"' if args.label else ""
        text = (
            f"Zoomed in on `{entry.key}` at {fmt_box(box)} (original pixels){label}. "
            f"The result is image `{key}` (index {index}), {crop.width}x{crop.height} pixels."
        )
        meta = {"source": entry.key, "box_original": list(box), "bbox_2d": list(args.bbox_2d),
                "coords": str(ctx.coords), "clamped": clamped, "scale": scale, "label": args.label}
        return ToolOutput(text=text, images=[crop], derived=[derivation], meta=meta)
