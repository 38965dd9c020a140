"""How `super_resolution` and `magnify` enlarge a crop: SMFANet at the largest scale that fits, else a resize.

The output of one enlargement is capped at `max_output_pixels`. Of the installed SMFANet scales not above
the one asked for, the largest whose output fits the cap is used. When none fits (a large crop), or when
no weights are installed and the caller accepts a fallback, the crop is resized with bicubic interpolation
by the largest factor (up to the one asked for) that fits the cap. `meta` always says which happened.
"""

from __future__ import annotations

import math
from typing import Any

from PIL import Image

from toolserver.errors import ToolFailure
from toolserver.resample import resize_bicubic
from toolserver.sr import MIN_INPUT_SIDE
from toolserver.sr.engine import SRTimeout, SRUnavailable
from toolserver.tools.base import ToolContext


def plan_scale(width: int, height: int, requested: int, installed: list[int], max_pixels: int) -> int | None:
    """The SMFANet scale to use for a crop, or None when no installed scale <= `requested` fits the cap."""
    for scale in sorted((s for s in installed if s <= requested), reverse=True):
        if width * height * scale * scale <= max_pixels:
            return scale
    return None


def bicubic_enlarge(image: Image.Image, requested: float, max_pixels: int) -> tuple[Image.Image, float]:
    """Resize by `requested`, or by the largest smaller factor that fits `max_pixels` (never below 1)."""
    factor = min(float(requested), math.sqrt(max_pixels / (image.width * image.height)))
    if factor <= 1.0:
        return image, 1.0
    size = (max(1, round(image.width * factor)), max(1, round(image.height * factor)))
    return resize_bicubic(image, size), factor


def check_crop_size(width: int, height: int) -> str | None:
    if width < MIN_INPUT_SIDE or height < MIN_INPUT_SIDE:
        return (f"the region is {width}x{height} pixels of the original image; super-resolution needs at least "
                f"{MIN_INPUT_SIDE}x{MIN_INPUT_SIDE}")
    return None


def enlarge_all(ctx: ToolContext, crops: list[Image.Image], requested: int, *,
                fallback: bool) -> tuple[list[Image.Image], list[dict[str, Any]]]:
    """Enlarge each crop; SMFANet jobs are queued together so a GPU can batch crops of the same size.

    Without weights, `fallback` decides: resize with bicubic (magnify) or fail with the reason (super_resolution).
    """
    engine = ctx.sr
    installed = engine.scales if engine is not None else []
    max_pixels = ctx.sr_max_output_pixels
    if not installed and not fallback:
        reason = engine.unavailable_reason() if engine is not None else "super-resolution is not configured"
        raise ToolFailure(f"Error: super-resolution is unavailable on this server: {reason}.", "sr_unavailable")
    plans = [plan_scale(c.width, c.height, requested, installed, max_pixels) for c in crops]
    sr_jobs = [(i, crop, scale) for i, (crop, scale) in enumerate(zip(crops, plans, strict=True)) if scale]
    results: dict[int, tuple[Image.Image, dict[str, Any]]] = {}
    if sr_jobs:
        assert engine is not None
        try:
            done = engine.upscale_many([(crop, scale) for _, crop, scale in sr_jobs], deadline=ctx.deadline)
        except SRTimeout:
            raise ToolFailure("Error: super-resolution did not finish within the time limit; try a smaller "
                              "region or a smaller scale.", "timeout") from None
        except SRUnavailable as exc:
            raise ToolFailure(f"Error: super-resolution is unavailable on this server: {exc}.",
                              "sr_unavailable") from None
        for (i, _, _), up in zip(sr_jobs, done, strict=True):
            results[i] = (up.image, {"method": "smfanet", "scale": up.scale, "requested_scale": requested,
                                     "checkpoint": up.checkpoint, "device": up.device, "tiles": up.tiles})
    for i, crop in enumerate(crops):
        if i in results:
            continue
        image, factor = bicubic_enlarge(crop, requested, max_pixels)
        if not installed:
            why = "no SMFANet weights installed"
        else:
            why = (f"no installed SMFANet scale up to x{requested} keeps the output within "
                   f"{max_pixels} pixels")
        results[i] = (image, {"method": "bicubic", "scale": round(factor, 4), "requested_scale": requested,
                              "reason": why})
    return [results[i][0] for i in range(len(crops))], [results[i][1] for i in range(len(crops))]
