"""`LazyImage`: Pillow's lazy form for an image made on its first read (a node's crop delivered by reference)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from toolserver.lazyimage import LazyImage, unread

SOURCE = Image.radial_gradient("L").convert("RGB")
BOX = (10, 20, 110, 70)


def lazy(made: list[int]) -> LazyImage:
    return LazyImage("RGB", (100, 50), lambda: made.append(1) or SOURCE.crop(BOX))


@pytest.mark.parametrize("read", [
    lambda im: im.tobytes(), lambda im: im.crop((0, 0, 5, 5)), lambda im: im.save(io.BytesIO(), "PNG"),
    lambda im: np.asarray(im), lambda im: im.convert("L"), lambda im: im.resize((20, 10)), lambda im: im.copy(),
    lambda im: Image.new("RGB", (200, 200)).paste(im, (0, 0)), lambda im: im.getpixel((1, 1)),
])
def test_every_read_makes_the_pixels_once_and_they_are_the_made_ones(read):
    made: list[int] = []
    image = lazy(made)
    assert unread(image) and image.size == (100, 50) and image.getbands() == ("R", "G", "B") and not made
    read(image)
    assert not unread(image) and made == [1]
    assert image.tobytes() == SOURCE.crop(BOX).tobytes() and made == [1]
    assert not unread(SOURCE)  # a plain image is never unread


def test_a_maker_that_gives_another_size_or_mode_is_an_error():
    with pytest.raises(ValueError, match="not the RGB"):
        LazyImage("RGB", (10, 50), lambda: SOURCE.crop(BOX)).load()
    with pytest.raises(ValueError, match="made L"):
        LazyImage("RGB", (100, 50), lambda: SOURCE.crop(BOX).convert("L")).tobytes()
