"""Pillow's bicubic resize of an RGB image, bit for bit, in about a third of its time.

Every seed system resizes with `Image.resize(size, Image.BICUBIC)`, so the pixels a model saw in training are
Pillow's: its fixed-point arithmetic (coefficients rounded to 22 bits, sums clipped to 8 bits after each pass)
and, since Pillow 13, its choice of which pass runs first. Pillow runs both passes as scalar C, and a crop
resize is most of a zoom tool's cost. No library does this exactly (Pillow-SIMD rounds its coefficients
differently and replaces Pillow), so it is written here: the same arithmetic in the same order, compiled by
numba so that LLVM vectorises it. The vertical pass adds whole rows; the horizontal pass copies 16 rows at a
time into a column-major block so that it, too, adds contiguous vectors.

`resize_bicubic` falls back to Pillow for what it does not cover (modes other than RGB, a box, a reducing
gap) and everywhere until `exact_here()` has checked this build against Pillow on this machine (a Pillow
built with fused multiply-add, as on some ARM builds, could round a coefficient differently).
"""

from __future__ import annotations

import logging
import math
import threading

import numba
import numpy as np
from PIL import Image

from toolserver.rawpixels import raw_array

log = logging.getLogger(__name__)

PRECISION_BITS = 22  # Pillow's: 32 bits less 8 for the pixel and 2 for the filter's overshoot
HALF = 1 << (PRECISION_BITS - 1)
BLOCK_ROWS = 16  # rows the horizontal pass handles at once: 16 rows × 4 lanes fill four AVX2 registers twice
LANES = BLOCK_ROWS * 4


@numba.njit(cache=True)
def _bicubic(x: float) -> float:
    a = -0.5
    if x < 0.0:
        x = -x
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


@numba.njit(cache=True)
def _coefficients(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for the box (0, in_size): per output pixel,
    `ksize` integer weights and the input index each applies to (an index past the window carries weight 0
    and points at a valid pixel), and the first and last+1 input rows any output uses."""
    scale = float(in_size) / out_size
    filterscale = max(scale, 1.0)
    support = 2.0 * filterscale
    ksize = math.ceil(support) * 2 + 1
    weights = np.zeros((out_size, ksize), np.int32)
    index = np.empty((out_size, ksize), np.int32)
    window = np.zeros(ksize, np.float64)
    inv_filterscale = 1.0 / filterscale
    first, last = in_size, 0
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        total = 0.0
        for x in range(xmax):
            w = _bicubic((x + xmin - center + 0.5) * inv_filterscale)
            window[x] = w
            total += w
        for x in range(ksize):
            index[xx, x] = min(xmin + x, in_size - 1)
            if x < xmax:
                w = window[x] / total if total != 0.0 else window[x]
                scaled = w * (1 << PRECISION_BITS)
                weights[xx, x] = int(scaled - 0.5) if w < 0 else int(scaled + 0.5)  # C's (int): toward zero
        first, last = min(first, xmin), max(last, xmin + xmax)
    return weights, index, first, last


@numba.njit(inline="always")
def _clip8(total: int) -> int:
    return min(max(total >> PRECISION_BITS, 0), 255)


@numba.njit(cache=True, nogil=True)
def _vertical(rows: np.ndarray, weights: np.ndarray, index: np.ndarray, offset: int) -> np.ndarray:
    """Pillow's vertical pass: each output row a weighted sum of whole input rows (`rows`: (height, width*4)
    bytes, RGBX, its row i holding input row i + offset)."""
    out_h, ksize = weights.shape
    width = rows.shape[1]
    out = np.empty((out_h, width), np.uint8)
    acc = np.empty(width, np.int32)
    for yy in range(out_h):
        acc[:] = HALF
        for t in range(ksize):
            k = weights[yy, t]
            if k != 0:
                line = rows[index[yy, t] - offset]
                for j in range(width):
                    acc[j] += np.int32(line[j]) * k
        target = out[yy]
        for j in range(width):
            target[j] = _clip8(acc[j])
    return out


@numba.njit(cache=True, nogil=True)
def _horizontal(pixels: np.ndarray, weights: np.ndarray, index: np.ndarray, first: int, last: int) -> np.ndarray:
    """Pillow's horizontal pass over rows [first, last) of `pixels` ((height, width) RGBX as uint32):
    BLOCK_ROWS rows are copied column-major into `block` (an input pixel's column = BLOCK_ROWS pixels), so
    each output pixel of all those rows is a sum of ksize contiguous vectors of LANES bytes; the results go
    through `staged` and are copied back row-major."""
    out_w, ksize = weights.shape
    in_w = pixels.shape[1]
    count = last - first
    out = np.empty((count, out_w), np.uint32)
    block = np.zeros((in_w, BLOCK_ROWS), np.uint32)
    lanes = block.view(np.uint8).reshape(in_w, LANES)
    staged = np.empty((out_w, BLOCK_ROWS), np.uint32)
    staged_lanes = staged.view(np.uint8).reshape(out_w, LANES)
    acc = np.empty(LANES, np.int32)
    for start in range(0, count, BLOCK_ROWS):
        n = min(BLOCK_ROWS, count - start)
        for p in range(in_w):  # each write fills one cache line of `block`; the reads are n sequential streams
            for r in range(n):
                block[p, r] = pixels[first + start + r, p]
        # Indexed in place, never through row views: a view made per tap costs a reference count's atomic
        # increment and decrement, which took a third of the pass.
        for xx in range(out_w):
            for j in range(LANES):
                acc[j] = HALF
            for t in range(ksize):
                k = weights[xx, t]
                if k != 0:
                    column = index[xx, t]
                    for j in range(LANES):
                        acc[j] += np.int32(lanes[column, j]) * k
            for j in range(LANES):
                staged_lanes[xx, j] = _clip8(acc[j])
        for xx in range(out_w):
            for r in range(n):
                out[start + r, xx] = staged[xx, r]
    return out


def resize_rgbx(rows: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(height, width*4) RGBX bytes → (size[1], size[0]*4) RGBX bytes, as Pillow 13's `resize(size, BICUBIC)`
    of the RGB image (the X byte is not Pillow's: ignore it)."""
    in_h, in_w = rows.shape[0], rows.shape[1] // 4
    out_w, out_h = size
    v_weights, v_index, first, last = _coefficients(in_h, out_h)  # first, last: the rows the vertical pass reads

    def horizontal(rows: np.ndarray, first: int, last: int) -> np.ndarray:
        weights, index, _, _ = _coefficients(in_w, out_w)
        return _horizontal(rows.view(np.uint32), weights, index, first, last).view(np.uint8)

    # Pillow 13: "if height is being scaled down more than twice the amount the width is", vertical first
    if in_h - out_h > 0 and in_h - out_h > (in_w - out_w) * 2:
        rows = _vertical(rows, v_weights, v_index, 0)
        return horizontal(rows, 0, out_h) if out_w != in_w else rows
    if out_w != in_w:
        rows = horizontal(rows, first, last) if out_h != in_h else horizontal(rows, 0, in_h)
    else:
        first = 0
    return _vertical(rows, v_weights, v_index, first) if out_h != in_h else rows


_checked: bool | None = None
_check_lock = threading.Lock()


def exact_here() -> bool:
    """Whether this build reproduces this Pillow, checked once per process (compiling the kernels, ≈ 1-3 s
    the first time on a machine, then loaded from numba's cache): up, down and mixed scales of a noisy
    image, both pass orders, against `Image.resize`."""
    global _checked
    if _checked is not None:  # every resize asks: no lock once answered
        return _checked
    with _check_lock:
        if _checked is None:
            _checked = _self_check()
            if not _checked:
                log.warning("toolserver.resample differs from this Pillow here; bicubic resizes use Pillow")
        return _checked


def _self_check() -> bool:
    noise = np.random.default_rng(7).integers(0, 256, (61, 83, 3), dtype=np.uint8)
    image = Image.fromarray(noise, "RGB")
    for size in ((83, 40), (200, 61), (37, 150), (84, 17), (17, 60), (1, 1), (300, 301)):
        if _resize(image, size).tobytes() != image.resize(size, Image.Resampling.BICUBIC).tobytes():
            return False
    return True


def _resize(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    # The source's rows are read a chunk at a time and let go before the result is copied into an image: a 13 MP
    # photograph's resize peaks at its rows, one pass's output and the result, not twice its rows more.
    return Image.frombytes("RGB", size, resize_rgbx(raw_array(image, "RGBX", 4), size), "raw", "RGBX")


def resize_bicubic(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    """`image.resize(size, Image.Resampling.BICUBIC)`, the same pixels, faster for RGB images."""
    size = (int(size[0]), int(size[1]))
    if image.mode != "RGB" or size == image.size or min(size) < 1 or not exact_here():
        return image.resize(size, Image.Resampling.BICUBIC)
    return _resize(image, size)
