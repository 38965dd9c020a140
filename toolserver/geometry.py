"""Coordinate conventions, the model's view of an image, and box arithmetic.

Pure functions, no I/O: every tool that takes coordinates goes through here so the four conventions
of SPEC §3 behave the same everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

# qwen-vl-utils defaults (Qwen2/2.5-VL): factor 28, 4..16384 tokens of 28x28 pixels, aspect ratio <= 200.
QWEN_FACTOR = 28
QWEN_MIN_TOKENS, QWEN_MAX_TOKENS = 4, 16384  # qwen-vl-utils 0.0.14: IMAGE_MIN/MAX_TOKEN_NUM
QWEN_MIN_PIXELS = QWEN_MIN_TOKENS * 28 * 28
QWEN_MAX_PIXELS = QWEN_MAX_TOKENS * 28 * 28
QWEN_MAX_RATIO = 200


class CoordError(ValueError):
    """A coordinate or size problem the model can fix; the message is model-readable."""


class Coords(StrEnum):
    REL1000 = "rel1000"
    REL1 = "rel1"
    ABS_VIEW = "abs_view"
    ABS_ORIGINAL = "abs_original"


def smart_resize(
    height: int,
    width: int,
    factor: int = QWEN_FACTOR,
    min_pixels: int = QWEN_MIN_PIXELS,
    max_pixels: int = QWEN_MAX_PIXELS,
) -> tuple[int, int]:
    """qwen-vl-utils `smart_resize`: returns (height, width), each a multiple of `factor`.

    Same arithmetic as qwen-vl-utils 0.0.14 (Python's half-to-even `round`, floor when shrinking, ceil
    when growing, the ratio error above 200). One deliberate difference: where 0.0.14 would return a
    side of 0 (only reachable with a tiny custom `max_pixels`), we return `factor`, as the earlier
    releases did, so a bad setting can never produce an empty image.
    """
    if height <= 0 or width <= 0:
        raise CoordError(f"image size must be positive, got {width}x{height}")
    if max(height, width) / min(height, width) > QWEN_MAX_RATIO:
        raise CoordError(
            f"absolute aspect ratio must be smaller than {QWEN_MAX_RATIO}, "
            f"got {max(height, width) / min(height, width)}"
        )
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def fit_long_side(width: int, height: int, max_long_side: int) -> tuple[int, int]:
    """Shrink (never enlarge) so the long side is at most `max_long_side` (Groundlight's pre-resize)."""
    long_side = max(width, height)
    if long_side <= max_long_side:
        return width, height
    if width >= height:
        return max_long_side, max(1, int(max_long_side * height / width))
    return max(1, int(max_long_side * width / height)), max_long_side


@dataclass(frozen=True)
class ViewRule:
    """How the trainer resized an image before the model saw it.

    `max_long_side` (if set) shrinks first; `prescale_*` (if set) is MGPO's `process_image` (scale the
    pixel count into [min, max], `int()` sides); then, if `factor` is set, Qwen `smart_resize` applies.
    """

    factor: int | None = QWEN_FACTOR
    min_pixels: int = QWEN_MIN_PIXELS
    max_pixels: int = QWEN_MAX_PIXELS
    max_long_side: int | None = None
    prescale_max_pixels: int | None = None
    prescale_min_pixels: int | None = None
    downsample: int | None = None  # VisionThink: after the prescale, each side floor-divided by this

    def view_size(self, width: int, height: int) -> tuple[int, int]:
        """(view_width, view_height) of an original of `width` x `height`; raises CoordError."""
        if self.prescale_max_pixels is not None and width * height > self.prescale_max_pixels:
            scale = math.sqrt(self.prescale_max_pixels / (width * height))
            width, height = int(width * scale), int(height * scale)
        if self.prescale_min_pixels is not None and width * height < self.prescale_min_pixels:
            scale = math.sqrt(self.prescale_min_pixels / (width * height))
            width, height = int(width * scale), int(height * scale)
        if self.downsample is not None:
            width, height = width // self.downsample, height // self.downsample
            if width < 1 or height < 1:
                raise CoordError(f"the view downsampled by {self.downsample} would be empty")
        if self.max_long_side is not None:
            width, height = fit_long_side(width, height, self.max_long_side)
        if self.factor is not None:
            height, width = smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)
        return width, height


Box = tuple[float, float, float, float]


def parse_box(values: object, name: str = "bbox_2d") -> Box:
    """Four finite numbers, or a CoordError naming what is wrong."""
    if not isinstance(values, list | tuple) or len(values) != 4:
        raise CoordError(f"{name} must be a list of 4 numbers [x1, y1, x2, y2], got {values!r}.")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise CoordError(f"{name} must contain only numbers, got {values!r}.")
        if not math.isfinite(v):
            raise CoordError(f"{name} contains a non-finite value: {values!r}.")
        out.append(float(v))
    return out[0], out[1], out[2], out[3]


def coordinate_range(coords: Coords, original: tuple[int, int], view: tuple[int, int] | None) -> tuple[float, float]:
    """(max_x, max_y) of the coordinate space of `coords` for an image."""
    if coords is Coords.REL1000:
        return 1000.0, 1000.0
    if coords is Coords.REL1:
        return 1.0, 1.0
    if coords is Coords.ABS_ORIGINAL:
        return float(original[0]), float(original[1])
    if view is None:
        raise CoordError("this image has no model-view size (see view_error); use another coordinate convention")
    return float(view[0]), float(view[1])


def to_original(
    box: Box, coords: Coords, original: tuple[int, int], view: tuple[int, int] | None
) -> Box:
    """Map a box given in `coords` to original-image pixels (floats, not clamped)."""
    max_x, max_y = coordinate_range(coords, original, view)
    sx, sy = original[0] / max_x, original[1] / max_y
    x1, y1, x2, y2 = box
    return x1 * sx, y1 * sy, x2 * sx, y2 * sy


def point_to_original(
    point: tuple[float, float], coords: Coords, original: tuple[int, int], view: tuple[int, int] | None
) -> tuple[float, float]:
    max_x, max_y = coordinate_range(coords, original, view)
    return point[0] * original[0] / max_x, point[1] * original[1] / max_y


def expand_to_min_side(lo: float, hi: float, min_side: float, limit: float) -> tuple[float, float]:
    """Grow [lo, hi] about its centre to at least `min_side`, shifted (not shrunk) to stay in [0, limit]."""
    size = hi - lo
    if size >= min_side:
        return lo, hi
    target = min(min_side, limit)
    centre = (lo + hi) / 2
    lo = centre - target / 2
    lo = min(max(lo, 0.0), limit - target)
    return lo, lo + target


def integer_box(box: Box) -> tuple[int, int, int, int]:
    """Smallest integer pixel box that covers `box` (floor the start, ceil the end)."""
    x1, y1, x2, y2 = box
    return math.floor(x1), math.floor(y1), math.ceil(x2), math.ceil(y2)
