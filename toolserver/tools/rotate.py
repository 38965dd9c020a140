"""`rotate`: turn an image by an angle (degrees, counter-clockwise, as Pillow and mathematics count).

Right angles are exact pixel permutations (no resampling). Other angles resample bicubically and fill
the uncovered corners with black. With `expand` the canvas grows to hold the whole rotated image;
without it (the default, DeepEyes' behaviour) the canvas keeps its size and the corners are cut off.
"""

from __future__ import annotations

import math

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import ToolFailure
from toolserver.tools.args import ImageRef
from toolserver.tools.base import Tool, ToolContext, ToolOutput

MAX_ROTATED_PIXELS = 200_000_000  # an expanded canvas grows up to 2x: refuse what would not fit in memory


class RotateArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef
    angle: float = Field(allow_inf_nan=False, ge=-36000, le=36000,
                         description="Degrees, counter-clockwise (negative: clockwise), e.g. 90 or -90.")
    expand: bool = Field(default=False, description="Grow the canvas to hold the whole rotated image "
                         "(default false: same size, corners cut).")


class Rotate(Tool):
    name = "rotate"
    description = ("Rotate an image by an angle in degrees, counter-clockwise (use a negative angle for clockwise), "
                   "e.g. to read sideways or upside-down text. Returns the rotated image as a new image.")
    Args = RotateArgs

    def run(self, ctx: ToolContext, args: RotateArgs) -> ToolOutput:
        entry = ctx.image(args.image)
        angle = args.angle % 360.0
        width, height = entry.size
        if args.expand:
            radians = math.radians(angle)
            cos, sin = abs(math.cos(radians)), abs(math.sin(radians))
            if (width * cos + height * sin) * (width * sin + height * cos) > MAX_ROTATED_PIXELS:
                raise ToolFailure(f"Error: rotating `{entry.key}` with expand=true would make an image over "
                                  f"{MAX_ROTATED_PIXELS} pixels.", "too_large")
        # Pillow takes the exact paths itself: 0° copies; 180°, and 90°/270° when expanded or square, transpose.
        rotated = entry.pixels.rotate(angle, resample=Image.Resampling.BICUBIC, expand=args.expand)
        key, index = ctx.observation_key(), len(ctx.images)
        text = (f"Rotated `{entry.key}` by {args.angle:g} degrees counter-clockwise"
                f"{' (canvas expanded)' if args.expand else ''}. The result is image `{key}` (index {index}), "
                f"{rotated.width}x{rotated.height} pixels.")
        return ToolOutput(text=text, images=[rotated], meta={"source": entry.key, "angle": args.angle,
                                                             "expand": args.expand})
