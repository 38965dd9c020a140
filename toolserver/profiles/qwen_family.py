"""Image arithmetic shared by the Qwen-family seed profiles (ARM-Thinker, Qwen-Agent's Qwen3-VL zoom,
Pixel-Reasoner). Not a profile itself: the profiles that reproduce these systems import it.

Written from InternLM/ARM-Thinker @ 96b1baf `verl/tools/image_zoom_in_tool.py` and `image_zoom_in_tool_qwen3vl.py`,
QwenLM/Qwen-Agent @ d04611b `qwen_agent/tools/image_zoom_in_qwen3vl.py` and QwenLM/Qwen3-VL @ 9658872
`qwen-vl-utils/src/qwen_vl_utils/vision_process.py`; where those systems compute
in a particular order (clamp before expanding, floor/ceil, PIL's rounding of float crop boxes), we do
the same arithmetic in the same order so outputs match pixel for pixel.
"""

from __future__ import annotations

import math

from PIL import Image

from toolserver.geometry import smart_resize
from toolserver.resample import resize_bicubic


def fetch_image_view(pixels: Image.Image, factor: int = 28) -> Image.Image:
    """What qwen-vl-utils' `fetch_image` hands a tool: the image smart-resized (BICUBIC), default bounds.

    Raises CoordError (a ValueError) with qwen-vl-utils' text for aspect ratios above 200.
    """
    height, width = smart_resize(pixels.height, pixels.width, factor=factor,
                                 min_pixels=4 * factor * factor, max_pixels=16384 * factor * factor)
    if (width, height) == pixels.size:
        return pixels
    return resize_bicubic(pixels, (width, height))


def agent_smart_resize(height: float, width: float, factor: int = 32, min_pixels: int = 56 * 56,
                       max_pixels: int = 12845056) -> tuple[int, int]:
    """Qwen-Agent's own copy of smart_resize: no aspect-ratio check and no guard after flooring."""
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen3_expand_box(left: float, top: float, right: float, bottom: float, img_w: int, img_h: int,
                     min_side: int = 32) -> list[float]:
    """Qwen3-VL's box adjustment: clamp; if a side is under 32, grow about the centre so the short side
    becomes 32 (half-sizes rounded up, edges floored/ceiled, clamped), kept only if strictly over 32×32.

    A zero-width or zero-height box raises ZeroDivisionError, as the reference does.
    """
    left, top = max(0, left), max(0, top)
    right, bottom = min(img_w, right), min(img_h, bottom)
    height, width = bottom - top, right - left
    if height < min_side or width < min_side:
        cx, cy = (left + right) / 2.0, (top + bottom) / 2.0
        ratio = min_side / min(height, width)
        half_h, half_w = math.ceil(height * ratio * 0.5), math.ceil(width * ratio * 0.5)
        new_left, new_right = max(0, math.floor(cx - half_w)), min(img_w, math.ceil(cx + half_w))
        new_top, new_bottom = max(0, math.floor(cy - half_h)), min(img_h, math.ceil(cy + half_h))
        if new_bottom - new_top > min_side and new_right - new_left > min_side:
            return [new_left, new_top, new_right, new_bottom]
    return [left, top, right, bottom]


def qwen3_crop_and_resize(image: Image.Image, box: list[float]) -> Image.Image:
    """Crop (Pillow rounds float edges half-to-even) then smart_resize the crop with factor 32."""
    left, top, right, bottom = box
    cropped = image.crop((left, top, right, bottom))
    # The reference passes (width, height) into a (height, width) signature; the result is symmetric.
    new_w, new_h = agent_smart_resize(right - left, bottom - top, factor=32, min_pixels=256 * 32 * 32)
    return resize_bicubic(cropped, (new_w, new_h))


def arm_adjust_box(box: tuple[float, float, float, float], img_w: int, img_h: int,
                   min_side: int = 28, max_ratio: float = 100.0) -> list[int] | None:
    """ARM-Thinker's `_maybe_resize_absolute_bbox`: None when the box cannot be made valid.

    Order matters and is kept: clamp, validate (the aspect check runs *before* expansion), expand
    proportionally about the centre so the short side is 28 (shrunk to fit, then shifted inside),
    floor/ceil, validate again, and require at least 28×28.
    """

    def valid(left: float, top: float, right: float, bottom: float) -> bool:
        if not (left < right and top < bottom):
            return False
        h, w = bottom - top, right - left
        return min(h, w) != 0 and max(h, w) / min(h, w) <= max_ratio

    left, top = max(0.0, box[0]), max(0.0, box[1])
    right, bottom = min(float(img_w), box[2]), min(float(img_h), box[3])
    if not valid(left, top, right, bottom):
        return None
    h, w = bottom - top, right - left
    if h < min_side or w < min_side:
        cx, cy = (left + right) / 2, (top + bottom) / 2
        ratio = min_side / min(h, w)
        target_w, target_h = w * ratio, h * ratio
        if target_w > img_w:
            target_h, target_w = target_h * img_w / target_w, img_w
        if target_h > img_h:
            target_w, target_h = target_w * img_h / target_h, img_h
        new_left, new_top = cx - target_w / 2, cy - target_h / 2
        if new_left < 0:
            new_left = 0
        if new_left + target_w > img_w:
            new_left = img_w - target_w
        if new_top < 0:
            new_top = 0
        if new_top + target_h > img_h:
            new_top = img_h - target_h
        left, top, right, bottom = new_left, new_top, new_left + target_w, new_top + target_h
    final = [math.floor(left), math.floor(top), math.ceil(right), math.ceil(bottom)]
    if not valid(*final):
        return None
    if final[3] - final[1] < min_side or final[2] - final[0] < min_side:
        return None
    return final
