"""Every output encoder is lossless where it claims to be: decode and compare pixels with the source."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from tests.conftest import photo
from toolserver import imaging
from toolserver.imaging import encode_image, encode_png

SIZES = [(1, 1), (3, 2000), (2000, 3), (7, 5), (333, 217)]


def noise(mode: str, size: tuple[int, int], seed: int = 0) -> Image.Image:
    channels = len(Image.new(mode, (1, 1)).getbands())
    shape = (size[1], size[0], channels) if channels > 1 else (size[1], size[0])
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8), mode)


def decoded(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG"
    image.load()
    return image


@pytest.mark.parametrize("encoder", ["auto", "fpng", "pillow"])
@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_png_round_trips_exactly(encoder, mode, size):
    source = noise(mode, size)
    image = decoded(encode_png(source, encoder=encoder))
    assert image.mode == mode and image.size == size
    assert image.tobytes() == source.tobytes()


def test_fpng_is_used_for_rgb_and_its_output_is_a_standard_png_of_a_real_photo():
    if not imaging.fpng_available():
        pytest.fail("fpng is a dependency of the package; it must be installed")
    source = Image.open(photo("Dragonfly_by_Bolly.jpg")).convert("RGB").crop((1000, 1000, 2000, 1750))
    fast = encode_png(source, encoder="auto")
    reference = encode_png(source, encoder="pillow")
    assert fast != reference  # a different writer ...
    assert decoded(fast).tobytes() == decoded(reference).tobytes() == source.tobytes()  # ... the same pixels


def test_without_fpng_pillow_writes_the_png(monkeypatch):
    monkeypatch.setattr(imaging, "fpng", None)
    source = noise("RGB", (40, 30))
    data = encode_png(source)
    assert decoded(data).tobytes() == source.tobytes()
    assert data == encode_png(source, encoder="pillow")


def test_a_failing_fpng_falls_back_to_pillow(monkeypatch):
    class Broken:
        @staticmethod
        def from_bytes(*_args):
            raise RuntimeError("encoder failure")

    monkeypatch.setattr(imaging, "fpng", Broken)
    source = noise("RGB", (40, 30))
    assert decoded(encode_png(source)).tobytes() == source.tobytes()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_lossy_formats_keep_size_and_decode(size):
    source = noise("RGB", size)
    for fmt, name in (("jpeg", "JPEG"), ("webp", "WEBP")):
        image = Image.open(io.BytesIO(encode_image(source, fmt)))
        assert image.format == name and image.size == size
