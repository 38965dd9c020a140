"""Image-quality metrics as SR papers report them: PSNR on the Y channel of ITU-R BT.601, borders cropped.

Written here (a few lines) rather than imported: basicsr cannot be imported on a CPU-only torch, and the
usual metric libraries compute Y differently (full-range, or on floats in [0, 1]). This follows basicsr's
`calculate_psnr(..., test_y_channel=True)`: studio-swing Y in [16, 235] from 8-bit RGB, as MATLAB's
`rgb2ycbcr` does, with `crop_border` pixels dropped on every side.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

# MATLAB rgb2ycbcr, Y row, for RGB scaled to [0, 1]; the offset is 16.
_Y_WEIGHTS = np.array([65.481, 128.553, 24.966])


def y_channel(image: Image.Image | np.ndarray) -> np.ndarray:
    """BT.601 studio-swing luma (float64, 16 to 235) of an 8-bit RGB image."""
    rgb = np.asarray(image, dtype=np.float64)[..., :3] / 255.0
    return rgb @ _Y_WEIGHTS + 16.0


def psnr(a: np.ndarray, b: np.ndarray, *, peak: float = 255.0) -> float:
    """Peak signal-to-noise ratio in dB; infinite for identical inputs."""
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return math.inf if mse == 0 else 10.0 * math.log10(peak * peak / mse)


def psnr_y(a: Image.Image | np.ndarray, b: Image.Image | np.ndarray, crop_border: int = 0) -> float:
    """PSNR between the Y channels of two same-sized RGB images, ignoring `crop_border` pixels at each edge."""
    ya, yb = y_channel(a), y_channel(b)
    if crop_border:
        ya = ya[crop_border:-crop_border, crop_border:-crop_border]
        yb = yb[crop_border:-crop_border, crop_border:-crop_border]
    return psnr(ya, yb)
