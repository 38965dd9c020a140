"""The line-drawing workers of OpenThinkIMG (`DrawHorizontalLineByY`, `DrawVerticalLineByX`): the points of `param`
(`worker.worker_points`, percent of the image), a dashed red line (#e6194b, 2 pt) at each point's y or x that falls
inside the image, drawn by matplotlib over the image shown with `imshow` in a default figure (6.4 x 4.8 in at
100 dpi, axes off) and saved as PNG with a tight bounding box and no padding, so the answer has the figure's size,
not the image's. matplotlib's version is pinned (pyproject) because its rendering is the pixels.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from matplotlib.figure import Figure
from PIL import Image

from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.tools.perception.worker import (
    SERVER_ERROR,
    WorkerArgs,
    fallback,
    image_answer,
    text_answer,
    worker_image,
    worker_points,
)

COLOR, WIDTH, STYLE = "#e6194b", 2, "dashed"


def draw_lines(image: Image.Image, points: Sequence[np.ndarray], horizontal: bool) -> Image.Image:
    """The worker's drawing: `image` in a default matplotlib figure, a line per point inside it, saved tight."""
    figure = Figure()
    axes = figure.subplots()
    axes.imshow(image)
    axes.axis("off")
    for point in points:
        if horizontal and 0 <= point[1] < image.height:
            axes.axhline(y=point[1], color=COLOR, linewidth=WIDTH, linestyle=STYLE)
        elif not horizontal and 0 <= point[0] < image.width:
            axes.axvline(x=point[0], color=COLOR, linewidth=WIDTH, linestyle=STYLE)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight", pad_inches=0)
    buffer.seek(0)
    with Image.open(buffer) as drawn:
        return drawn.convert("RGB")


class DrawLine(Tool):
    """A line-drawing worker; subclasses set `name`, `description` and `horizontal`."""

    Args = WorkerArgs
    raw_arguments = True
    horizontal: ClassVar[bool]

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        if not isinstance(args, dict) or "param" not in args or "image" not in args:
            return text_answer(ctx, SERVER_ERROR.format(name=self.name), "invalid_arguments")
        param = args["param"]
        if param is None:
            return fallback(ctx, "Missing 'param' or 'image' in the input parameters.", "invalid_arguments")
        try:
            image = worker_image(ctx).convert("RGB")
            points = worker_points(param, image.width, image.height)
            if not points:
                return fallback(ctx, "No valid points extracted.", "no_points")
            drawn = draw_lines(image, points, self.horizontal)
        except Exception as exc:  # the worker's own catch-all: its text, no image
            return fallback(ctx, f"Error when drawing line: {exc}", "draw_failed")
        return image_answer("Line drawn successfully.", drawn,
                            points=[[float(v) for v in point] for point in points])
