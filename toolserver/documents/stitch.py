"""ARM-Thinker's page presentation (InternLM/ARM-Thinker @ 96b1baf, `verl/tools/doc_page_tools.py`): shrink to a
long side, stitch left to right on white."""

from __future__ import annotations

import math

from PIL import Image

from toolserver.resample import resize_bicubic

MAX_SIDE = 1120
GAP = 8
MAX_PIXELS = 80_000_000


def shrink_to_long_side(image: Image.Image, target: int = MAX_SIDE) -> Image.Image:
    """Long side down to `target` (never up), short side `int(target*short/long)`, bicubic."""
    w, h = image.size
    if max(w, h) <= target:
        return image
    size = (target, int(target * h / w)) if w >= h else (int(target * w / h), target)
    return resize_bicubic(image, size)


def stitch(pages: list[Image.Image], *, target: int = MAX_SIDE, gap: int = GAP,
           max_pixels: int = MAX_PIXELS) -> Image.Image:
    """Pages side by side, vertically centred, `gap` white pixels apart; the whole scaled under `max_pixels`."""
    shrunk = [shrink_to_long_side(p.convert("RGB"), target) for p in pages]
    width = sum(p.width for p in shrunk) + gap * (len(shrunk) - 1)
    height = max(p.height for p in shrunk)
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    x = 0
    for page in shrunk:
        canvas.paste(page, (x, (height - page.height) // 2))
        x += page.width + gap
    if width * height > max_pixels:
        factor = math.sqrt(max_pixels / (width * height))
        canvas = resize_bicubic(canvas, (int(width * factor), int(height * factor)))
    return canvas
