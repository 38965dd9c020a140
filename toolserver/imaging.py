"""Image intake and output encoding (Pillow), free of HTTP.

Intake checks the byte size, reads only the header to refuse decompression bombs before decoding,
decodes the first frame, applies EXIF orientation and composites alpha on white (as qwen-vl-utils'
`to_rgb` does for RGBA; we do it for every mode with transparency). The decoded RGB pixels are what
tools work on; the uploaded bytes are kept so GET returns exactly what was sent.
"""

from __future__ import annotations

import binascii
import functools
import io
import itertools
import math
import os
import re
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pybase64
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from toolserver.errors import ImageRejected, TooLarge

try:  # fpng writes standard PNG about 10x faster than zlib at level 1 (BENCHMARKS.md); Pillow stays the fallback
    import fpng
except ImportError:  # pragma: no cover - exercised by the tests through png_encoder="pillow"
    fpng = None

# Our own pixel limit runs before decoding; Pillow's own bomb check would fire at a different limit.
Image.MAX_IMAGE_PIXELS = None
ImageFile.LOAD_TRUNCATED_IMAGES = False
warnings.simplefilter("ignore", Image.DecompressionBombWarning)

OUTPUT_FORMATS = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
_DATA_URI = re.compile(r"^data:(?P<mime>[\w/+.-]*)?(?P<params>(;[\w=.-]+)*)?;base64,", re.IGNORECASE)


@dataclass(frozen=True)
class DecodedImage:
    pixels: Image.Image  # RGB, orientation applied
    source_bytes: bytes | None  # None: a video frame kept as pixels only (the in-memory store)
    source_format: str  # Pillow's format name, e.g. "JPEG"
    content: str | None = None  # the bytes' digest and the alpha rule (`SharedDecodes`): what the pixels are

    @property
    def mime(self) -> str:
        Image.init()  # the plugins fill Image.MIME as they load (a frame's PNG was never opened here)
        return Image.MIME.get(self.source_format, "application/octet-stream")


def decode_base64(data: str, max_bytes: int) -> bytes:
    """Plain base64 or a `data:` URI → bytes, refusing oversized payloads before decoding them."""
    match = _DATA_URI.match(data)
    payload = data[match.end() :] if match else data
    if data.startswith("data:") and not match:
        raise ImageRejected("a data: URI must be base64-encoded (data:<mime>;base64,<data>)")
    if len(payload) * 3 // 4 > max_bytes + 3:
        raise TooLarge(f"image is larger than the {max_bytes}-byte limit")
    try:
        if any(c in payload for c in " \t\r\n"):  # line-wrapped base64 (MIME style) is accepted
            payload = "".join(payload.split())
        return pybase64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageRejected(f"image data is not valid base64: {exc}") from None


def decode_image(data: bytes, *, max_bytes: int, max_pixels: int, alpha: str = "white") -> DecodedImage:
    if len(data) > max_bytes:
        raise TooLarge(f"image is {len(data)} bytes, over the {max_bytes}-byte limit")
    if not data:
        raise ImageRejected("image data is empty")
    try:
        img = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise ImageRejected("the data is not an image in a format the server reads (JPEG, PNG, WebP, GIF, BMP, "
                            "TIFF) nor a video it takes as frames (MP4/MOV, WebM, MKV)") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageRejected(f"the image data is broken or truncated: its header cannot be read ({exc})") from None
    width, height = img.size
    if width <= 0 or height <= 0:
        raise ImageRejected(f"the image has an empty size {width}x{height}")
    if width * height > max_pixels:
        raise TooLarge(
            f"image is {width}x{height} = {width * height} pixels, over the {max_pixels}-pixel limit "
            "(refused before decoding)"
        )
    source_format = img.format or "unknown"
    try:
        img.seek(0)  # first frame of animations
        img.load()
        ImageOps.exif_transpose(img, in_place=True)  # in place: no copy of the whole image when upright
        pixels = to_rgb(img, alpha)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ImageRejected(f"the image data is broken or truncated: {exc}") from None
    return DecodedImage(pixels=pixels, source_bytes=data, source_format=source_format)


def _horizontal_first(in_w: int, in_h: int, out_w: int, out_h: int) -> bool:
    """Pillow 13's pass order (Resample.c, ImagingResampleInner): vertical first only when the height
    shrinks by more than twice what the width does. The rounding between passes depends on it."""
    return not (in_h - out_h > 0 and in_h - out_h > (in_w - out_w) * 2)


@functools.lru_cache(maxsize=256)
def _band_plan(in_w: int, in_h: int, out_w: int, out_h: int, bands: int) -> list[tuple[int, int, int, int]] | None:
    """Output rows cut into `bands` bands whose resize with a source `box` is bit-identical to the whole resize.

    Pillow computes each output row's filter from `center = box_top + (row + 0.5) * scale` with
    `scale = box_height / out_rows` (Resample.c, precompute_coeffs), and picks the order of its two passes
    from the sizes. A band reproduces the whole resize's rows exactly when its source edge is an integer
    row, its scale equals the whole scale, every row's centre comes out the same double, and its passes run
    in the same order; we check all four and return None where any fails. (Pillow is pinned: a new release
    is checked by tests/test_resize_exact.py.)
    """
    if bands < 2 or out_h < 2 * bands:
        return None
    order = _horizontal_first(in_w, in_h, out_w, out_h)
    step = out_h // math.gcd(in_h, out_h)  # output rows whose source row is an integer
    cuts = sorted({round(out_h * k / bands / step) * step for k in range(1, bands)} - {0, out_h})
    if len(cuts) != bands - 1:  # too few whole-row cut points for this many bands
        return None
    edges = [0, *cuts, out_h]
    scale = in_h / out_h
    plan = []
    for r0, r1 in itertools.pairwise(edges):
        y0, y1 = r0 * in_h // out_h, r1 * in_h // out_h
        band_scale = (y1 - y0) / (r1 - r0)
        if _horizontal_first(in_w, in_h, out_w, r1 - r0) != order:
            return None
        if band_scale != scale or any(y0 + (yy + 0.5) * band_scale != (r0 + yy + 0.5) * scale
                                      for yy in range(r1 - r0)):
            return None
        plan.append((r0, r1, y0, y1))
    return plan


_BAND_HELPERS = max(0, min(7, (os.cpu_count() or 1) - 1))  # threads that take bands beside the caller's
_band_pool: ThreadPoolExecutor | None = None
_band_pool_lock = threading.Lock()
_band_permits = threading.Semaphore(_BAND_HELPERS)


def resize_exact(img: Image.Image, size: tuple[int, int], resample: Image.Resampling) -> Image.Image:
    """`img.resize(size, resample)`, bit for bit, with idle cores resizing some of the rows.

    Large upscales (Groundlight's LANCZOS to 1024², keypoint_zoom's) are the main cost of those calls, and
    Pillow releases the GIL while it resamples, so row bands run in parallel. Only helpers that are free
    right now are used: on a busy server (every core has work) the resize runs whole in the calling thread.
    """
    global _band_pool
    if not _BAND_HELPERS or size[0] * size[1] < 250_000 or img.mode not in ("RGB", "L"):  # a palette: NEAREST
        return img.resize(size, resample)
    helpers = 0
    while helpers < _BAND_HELPERS and _band_permits.acquire(blocking=False):
        helpers += 1
    try:
        plan = None
        while helpers and plan is None:  # the most bands that split exactly, up to the free helpers + 1
            plan = _band_plan(img.width, img.height, *size, helpers + 1)
            if plan is None or len(plan) != helpers + 1:
                plan = None
                helpers -= 1
                _band_permits.release()
        if plan is None:
            return img.resize(size, resample)
        with _band_pool_lock:
            if _band_pool is None:
                _band_pool = ThreadPoolExecutor(max_workers=_BAND_HELPERS, thread_name_prefix="toolserver-band")
        bands = [_band_pool.submit(img.resize, (size[0], r1 - r0), resample, (0, y0, img.width, y1))
                 for r0, r1, y0, y1 in plan[1:]]
        r0, r1, y0, y1 = plan[0]
        out = Image.new(img.mode, size)
        out.paste(img.resize((size[0], r1 - r0), resample, (0, y0, img.width, y1)), (0, 0))
        for (r0, _, _, _), band in zip(plan[1:], bands, strict=True):
            out.paste(band.result(), (0, r0))
        return out
    finally:
        for _ in range(helpers):
            _band_permits.release()


ALPHA_RULES = ("white", "drop")


def to_rgb(img: Image.Image, alpha: str = "white") -> Image.Image:
    """RGB pixels. Transparency follows the profile's reference: `white` composites anything transparent on
    white (qwen-vl-utils does this for RGBA; we extend it to every transparent mode), `drop` is Pillow's
    `convert("RGB")`, which discards alpha and keeps the colour underneath (MGPO's `process_image`)."""
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        # 16/32-bit greyscale: scale to 8 bits instead of clipping.
        img = img.point(lambda v: v / 256).convert("L") if img.mode != "I" else img.convert("L")
    if img.mode == "RGB":
        return img
    if alpha == "drop":
        return img.convert("RGB")
    has_alpha = img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
        img.mode == "P" and "transparency" in img.info
    )
    if has_alpha:
        rgba = img.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return img.convert("RGB")


# Modes whose resize does not commute with `convert("RGB")`: alpha is premultiplied (RGBA, LA), a palette or a
# bilevel image is resized NEAREST whatever the filter, and CMYK/YCbCr/LAB/HSV convert per pixel after resampling.
# L resamples exactly as its RGB copy does; 16/32-bit and float modes keep intake's 8-bit scaling.
_RESIZE_DIFFERS = frozenset({"RGBA", "LA", "P", "PA", "1", "RGBa", "La", "RGBX", "CMYK", "YCbCr", "LAB", "HSV"})


def own_mode_source(mime: str | None, load: Callable[[], bytes | None]) -> bytes | None:
    """An input's uploaded bytes where its own mode may change what a resize gives (`in_own_mode`), else None.
    A JPEG is taken as RGB without reading its bytes again (a Redis session would fetch them): JPEG holds no
    alpha nor palette, and a CMYK JPEG, the one exception, is converted before its resizes."""
    return None if mime == "image/jpeg" else load()


def decode_native(data: bytes) -> Image.Image:
    """An upload decoded as intake decodes it (first frame, EXIF orientation) but left in its own mode: the image a
    reference's dataset holds before its own `convert("RGB")` (Pillow's `Image.open` of the stored bytes)."""
    img = Image.open(io.BytesIO(data))
    img.seek(0)
    img.load()
    return ImageOps.exif_transpose(img)


def native_mode(data: bytes) -> str:
    """The mode of an upload's first frame, read from its header only."""
    return Image.open(io.BytesIO(data)).mode


def in_own_mode(rgb: Image.Image, source: bytes | None, apply: Callable[[Image.Image], Image.Image], alpha: str,
                *, on_rgb: Callable[[Image.Image], Image.Image] | None = None) -> Image.Image:
    """`apply` (crops and resizes) run on an upload in its own mode and made RGB after by the `alpha` rule, as a
    reference that resizes its dataset's image before any RGB conversion does. Where the order makes no difference
    (an RGB or L upload, a frame kept as pixels only) `on_rgb` (else `apply`) runs on intake's RGB pixels `rgb`."""
    if source is not None and native_mode(source) in _RESIZE_DIFFERS:
        native = decode_native(source)
        if native.mode in _RESIZE_DIFFERS:
            return to_rgb(apply(native), alpha)
    return (on_rgb or apply)(rgb)


def resize_then_rgb(rgb: Image.Image, source: bytes | None, size: tuple[int, int],
                    resample: Image.Resampling) -> Image.Image:
    """`image.resize(size, resample).convert("RGB")` on the image in its own mode (VisionThink's `process_image`)."""
    return in_own_mode(rgb, source, lambda image: resize_exact(image, size, resample), "drop")


PNG_ENCODERS = ("auto", "fpng", "pillow")
_FPNG_CHANNELS = {"RGB": 3, "RGBA": 4}  # fpng writes 24- and 32-bit PNGs only


def fpng_available() -> bool:
    return fpng is not None


FpngWriter = Callable[[bytes, int, int, int], bytes]  # (raw pixels, width, height, channels) -> PNG


def encode_png(img: Image.Image, *, level: int = 1, encoder: str = "auto",
               fpng_writer: FpngWriter | None = None) -> bytes:
    """Lossless PNG. fpng where it can (RGB/RGBA, installed), else Pillow's zlib at `level`.

    Both decode to the same pixels; fpng's files are a few percent larger than zlib level 1.
    `encoder="fpng"` still falls back for modes fpng cannot write, so the call never fails for a mode.
    `fpng_writer`: where fpng runs (`toolserver.encodepool`: in another process, since it holds the GIL); the
    same bytes either way.
    """
    channels = _FPNG_CHANNELS.get(img.mode)
    if encoder != "pillow" and fpng is not None and channels is not None and img.width and img.height:
        try:
            if fpng_writer is not None:
                return fpng_writer(img.tobytes(), img.width, img.height, channels)
            return fpng.from_bytes(img.tobytes(), img.width, img.height, channels)
        except Exception:  # any failure of the fast path falls back to the reference encoder
            pass
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=level)
    return buf.getvalue()


def encode_image(img: Image.Image, fmt: str, *, png_level: int = 1, jpeg_quality: int = 95,
                 webp_quality: int = 90, png_encoder: str = "auto", fpng_writer: FpngWriter | None = None) -> bytes:
    """Encode for output: lossless PNG by default (fpng when installed), JPEG or WebP by choice."""
    if fmt == "png":
        return encode_png(img, level=png_level, encoder=png_encoder, fpng_writer=fpng_writer)
    buf = io.BytesIO()
    if fmt == "jpeg":
        img.save(buf, format="JPEG", quality=jpeg_quality)
    elif fmt == "webp":
        img.save(buf, format="WEBP", quality=webp_quality)
    else:  # pragma: no cover - guarded by the settings model
        raise ValueError(f"unknown output format {fmt!r}")
    return buf.getvalue()


ARCHIVE_THUMBNAIL_SIDE = 512  # the trajectory archive's thumbnails: at most this many px a side


def archive_preview(img: Image.Image, side: int = ARCHIVE_THUMBNAIL_SIDE) -> Image.Image:
    """`img` at most `side` px a side (bilinear, Pillow's reducing gap 2; the aspect kept, at least 1 px): the
    trajectory archive's thumbnail before its JPEG. A store whose pixels go with a released session makes it then."""
    scale = min(1.0, side / max(img.size))
    if scale >= 1:
        return img
    size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
    return img.resize(size, Image.Resampling.BILINEAR, reducing_gap=2.0)
