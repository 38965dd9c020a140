"""Image intake: formats, orientation, alpha, size limits, decompression bombs, broken files."""

import struct
import zlib

import pytest
from PIL import Image

from tests.conftest import gradient, photo, png_bytes
from toolserver.config import Settings
from toolserver.errors import ImageRejected, TooLarge
from toolserver.imaging import decode_base64, decode_image

LIMITS = {"max_bytes": 50_000_000, "max_pixels": 100_000_000}


@pytest.fixture
def settings(settings_any_store: Settings) -> Settings:
    return settings_any_store  # every test here runs with the in-memory and with the Redis session store


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF"])
def test_reads_common_formats(fmt):
    img = gradient(37, 90)
    decoded = decode_image(png_bytes(img, fmt), **LIMITS)
    assert decoded.pixels.mode == "RGB"
    assert decoded.pixels.size == (37, 90)
    if fmt in ("PNG", "BMP", "TIFF"):
        assert decoded.pixels.tobytes() == img.tobytes()  # lossless formats keep the exact pixels


def test_gif_first_frame():
    frames = [Image.new("RGB", (8, 8), c) for c in [(255, 0, 0), (0, 0, 255)]]
    buf = png_bytes(frames[0], "GIF", save_all=True, append_images=frames[1:])
    assert decode_image(buf, **LIMITS).pixels.getpixel((0, 0)) == (255, 0, 0)


def test_exif_orientation_applied():
    img = gradient(60, 20)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise on display
    decoded = decode_image(png_bytes(img, "JPEG", exif=exif.tobytes(), quality=100), **LIMITS)
    assert decoded.pixels.size == (20, 60)


def test_alpha_composited_on_white():
    img = Image.new("RGBA", (4, 4), (255, 0, 0, 0))
    img.putpixel((1, 1), (0, 0, 255, 255))
    pixels = decode_image(png_bytes(img), **LIMITS).pixels
    assert pixels.getpixel((0, 0)) == (255, 255, 255)
    assert pixels.getpixel((1, 1)) == (0, 0, 255)
    half = Image.new("LA", (2, 2), (0, 128))
    assert decode_image(png_bytes(half), **LIMITS).pixels.getpixel((0, 0)) == (127, 127, 127)


def test_real_photo_keeps_original_bytes_and_size():
    data = photo("Dragonfly_by_Bolly.jpg").read_bytes()
    decoded = decode_image(data, **LIMITS)
    assert decoded.pixels.size == (4224, 3168)
    assert decoded.source_bytes == data
    assert decoded.mime == "image/jpeg"


def test_oversized_bytes_refused():
    with pytest.raises(TooLarge, match="byte limit"):
        decode_image(png_bytes(gradient(64, 64)), max_bytes=100, max_pixels=10**9)


def _bomb_png(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims a huge size (a decompression bomb)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_decompression_bomb_refused_before_decoding():
    bomb = _bomb_png(100_000, 100_000)
    assert len(bomb) < 200
    with pytest.raises(TooLarge, match="refused before decoding"):
        decode_image(bomb, **LIMITS)


def test_truncated_image_is_named():
    data = png_bytes(gradient(200, 200), "JPEG")
    with pytest.raises(ImageRejected, match="broken or truncated"):
        decode_image(data[: len(data) // 2], **LIMITS)


@pytest.mark.parametrize("data", [b"hello, not an image", b"%PDF-1.4\n..."])
def test_non_image_rejected(data):
    with pytest.raises(ImageRejected, match="not an image"):
        decode_image(data, **LIMITS)


def test_empty_rejected():
    with pytest.raises(ImageRejected, match="empty"):
        decode_image(b"", **LIMITS)


def test_base64_forms():
    raw = png_bytes(gradient(3, 3))
    import base64
    text = base64.b64encode(raw).decode()
    assert decode_base64(text, 10**6) == raw
    assert decode_base64("data:image/png;base64," + text, 10**6) == raw
    with pytest.raises(ImageRejected, match="base64"):
        decode_base64("data:image/png," + text, 10**6)
    with pytest.raises(ImageRejected, match="not valid base64"):
        decode_base64("***", 10**6)
    with pytest.raises(TooLarge):
        decode_base64(text, 10)
