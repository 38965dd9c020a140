"""Argument types the canonical tools share, and the phrases their schemas use for each coordinate convention.

The `{coords}` placeholder in a field's description is filled with `COORD_PHRASES[...]` of the session's (or the
profile's) convention when the schema is served.
"""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, Field

from toolserver.geometry import Coords


class _ImageReference:
    """Marks an argument that names a session image, so adapters can find such arguments in any tool's model."""

    def __repr__(self) -> str:
        return "IMAGE_REFERENCE"


IMAGE_REFERENCE = _ImageReference()

ImageRef = Annotated[
    str | int,
    Field(description="The image: its key (e.g. `original_image`, `observation_1`) or its 0-based index."),
    IMAGE_REFERENCE,
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


def image_reference_fields(args: type[BaseModel]) -> dict[str, bool]:
    """The arguments of a tool's model that name session images: field name -> whether it is a list of them."""
    found: dict[str, bool] = {}
    for name, info in args.model_fields.items():
        if IMAGE_REFERENCE in info.metadata:
            found[name] = False
            continue
        annotation = info.annotation
        if get_origin(annotation) in (Union, UnionType):  # `list[ImageRef] | None`
            annotation = next((a for a in get_args(annotation) if get_origin(a) is list), annotation)
        if get_origin(annotation) is list and _is_reference(get_args(annotation)[0]):
            found[name] = True
    return found


def _is_reference(annotation: Any) -> bool:
    return IMAGE_REFERENCE in getattr(annotation, "__metadata__", ())
