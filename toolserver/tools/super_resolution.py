"""`super_resolution`: enlarge an image, or a box of it, with SMFANet (x2, x3 or x4).

The box follows the session's coordinate convention and is cut from the original image (clamped to it,
never expanded: the point is to see the region asked for). The region must be at least 8x8 original pixels,
SMFANet's minimum. Scale: the one asked for, or by default the largest installed; either way capped by the
server's output-pixel limit (`toolserver.tools.enlarge`). Without installed weights the call fails with the
reason, since the model asked for super-resolution specifically.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import ToolFailure
from toolserver.tools.args import Coordinate, ImageRef, fmt_box
from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.tools.enlarge import check_crop_size, enlarge_all
from toolserver.tools.zoom_in import ZoomIn

# Box mapping and clamping as zoom_in does it, without the minimum-size expansion or the aspect limit.
_BOXES = ZoomIn(min_side=1, max_aspect=math.inf)


class SuperResolutionArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef
    bbox_2d: list[Coordinate] | None = Field(
        default=None, min_length=4, max_length=4,
        description="Optional region [x1, y1, x2, y2] to enlarge, in {coords}; the whole image when omitted.",
    )
    scale: Literal[2, 3, 4] | None = Field(
        default=None, description="Enlargement factor; by default the largest available. {sr_scales}",
    )


def describe(method: dict, size: tuple[int, int]) -> str:
    if method["method"] == "smfanet":
        how = f"x{method['scale']} with SMFANet super-resolution"
    else:
        how = f"x{method['scale']:g} with bicubic resizing ({method['reason']})"
    return f"{how}, {size[0]}x{size[1]} pixels"


class SuperResolution(Tool):
    name = "super_resolution"
    lane = "heavy"
    description = ("Enlarge an image, or a region of it, with a super-resolution network (SMFANet) that restores "
                   "fine detail better than plain resizing. Use it on small or blurry details. {sr_scales}")
    Args = SuperResolutionArgs

    def run(self, ctx: ToolContext, args: SuperResolutionArgs) -> ToolOutput:
        if args.bbox_2d is None:
            entry = ctx.image(args.image)
            box = (0, 0, *entry.size)
        else:
            entry, box, _clamped = _BOXES.crop_box(ctx, args.image, list(args.bbox_2d))
        too_small = check_crop_size(box[2] - box[0], box[3] - box[1])
        if too_small:
            raise ToolFailure(f"Error: {too_small}. Give a larger region.", "invalid_box")
        installed = ctx.sr.scales if ctx.sr is not None else []
        if args.scale is not None and installed and args.scale not in installed:
            raise ToolFailure(f"Error: scale {args.scale} is not available on this server; available scales: "
                              f"{', '.join(str(s) for s in installed)}.", "unsupported_scale")
        requested = args.scale or (max(installed) if installed else 4)
        crop = entry.pixels.crop(box) if box != (0, 0, *entry.size) else entry.pixels
        (image,), (method,) = enlarge_all(ctx, [crop], requested, fallback=False)
        key, index = ctx.observation_key(), len(ctx.images)
        text = (f"Enlarged `{entry.key}` at {fmt_box(box)} (original pixels) {describe(method, image.size)}. "
                f"The result is image `{key}` (index {index}).")
        return ToolOutput(text=text, images=[image], meta={"source": entry.key, "box_original": list(box),
                                                            **method})
