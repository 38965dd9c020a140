"""Inputs with transparency or a palette, for the golden cases that check where a reference drops alpha relative to
its resizes (scripts/goldens/record_*_alpha.py run the reference's own code on them; the tests upload the same PNG
bytes). Deterministic: a gradient, seeded noise, and an alpha channel that hides some colours completely."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def _rgb(width: int, height: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1),
                     rng.integers(0, 256, size=(height, width))], axis=-1).astype(np.uint8)


def _alpha(width: int, height: int, seed: int) -> np.ndarray:
    """Opaque, half and fully transparent bands, with noise: premultiplying changes what a filter mixes."""
    rng = np.random.default_rng(seed + 100)
    y, x = np.mgrid[0:height, 0:width]
    bands = np.choose((x * 3 // width) % 3, [255, 128, 0])
    return np.clip(bands + rng.integers(-40, 41, size=(height, width)) * (y % 2), 0, 255).astype(np.uint8)


def rgba(width: int, height: int, seed: int) -> Image.Image:
    return Image.fromarray(np.dstack([_rgb(width, height, seed), _alpha(width, height, seed)]), "RGBA")


def la(width: int, height: int, seed: int) -> Image.Image:
    grey = _rgb(width, height, seed)[..., 2]
    return Image.fromarray(np.dstack([grey, _alpha(width, height, seed)]), "LA")


def palette(width: int, height: int, seed: int) -> Image.Image:
    """A 64-colour palette image with one transparent index (a PNG tRNS chunk)."""
    image = Image.fromarray(_rgb(width, height, seed), "RGB").quantize(64, method=Image.Quantize.MEDIANCUT)
    image.info["transparency"] = 0
    return image


MAKERS = {"rgba": rgba, "la": la, "palette": palette}


def png(kind: str, width: int, height: int, seed: int) -> bytes:
    """The PNG bytes of an input (what the dataset stores and the tests upload)."""
    image = MAKERS[kind](width, height, seed)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", **({"transparency": 0} if kind == "palette" else {}))
    return buffer.getvalue()
