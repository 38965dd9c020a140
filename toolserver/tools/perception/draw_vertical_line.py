"""OpenThinkIMG's `DrawVerticalLineByX` worker: a dashed line at the x of each point of `param` (`lines.py`)."""

from __future__ import annotations

from toolserver.tools.perception.lines import DrawLine


class DrawVerticalLineByX(DrawLine):
    name = "DrawVerticalLineByX"
    description = ("Draw a dashed vertical line down the newest image at the x of each point in param, "
                   'written x="21.5" y="28.5" (percent of the image\'s width and height); returns the image with '
                   "its lines.")
    horizontal = False
