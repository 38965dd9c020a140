"""OpenThinkIMG's `DrawHorizontalLineByY` worker: a dashed line at the y of each point of `param` (`lines.py`)."""

from __future__ import annotations

from toolserver.tools.perception.lines import DrawLine


class DrawHorizontalLineByY(DrawLine):
    name = "DrawHorizontalLineByY"
    description = ("Draw a dashed horizontal line across the newest image at the y of each point in param, "
                   'written x="21.5" y="28.5" (percent of the image\'s width and height); returns the image with '
                   "its lines.")
    horizontal = True
