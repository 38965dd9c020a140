"""Argument types the canonical tools share, and the phrases their schemas use for each coordinate convention.

The `{coords}` placeholder in a field's description is filled with `COORD_PHRASES[...]` of the session's (or the
profile's) convention when the schema is served.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from toolserver.geometry import Coords

ImageRef = Annotated[
    str | int,
    Field(description="The image: its key (e.g. `original_image`, `observation_1`) or its 0-based index."),
]
Coordinate = Annotated[float, Field(allow_inf_nan=False)]

COORD_PHRASES = {
    Coords.REL1000: "relative coordinates from 0 to 1000 on each axis",
    Coords.REL1: "relative coordinates from 0 to 1 on each axis",
    Coords.ABS_VIEW: "absolute pixel coordinates on the image as you see it",
    Coords.ABS_ORIGINAL: "absolute pixel coordinates on the original image",
}


def fmt_box(box: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(v) for v in box) + "]"
