"""Raw pixels a chunk at a time: the same bytes as `Image.tobytes()`, written to a file or filled into an array."""

from __future__ import annotations

import os

import numpy as np
import pytest
from PIL import Image

from tests.conftest import PHOTOS
from toolserver.rawpixels import CHUNK_BYTES, raw_array, raw_chunks, write_raw

BRIDGE = PHOTOS / "Bridge_by_Sander_Klootwijk.jpg"


@pytest.mark.parametrize("size", [(1, 1), (97, 61), (1100, 700), (5000, 3)])
@pytest.mark.parametrize(("mode", "layout"), [("RGB", "RGBX"), ("RGB", "RGB"), ("RGBA", "RGBA"), ("L", "L"),
                                              ("1", "1"), ("I;16", "I;16")])
def test_chunks_join_to_tobytes_and_each_is_whole_rows_of_about_a_chunk(size, mode, layout):
    image = Image.open(BRIDGE).convert("RGB").resize(size).convert(mode)
    chunks = list(raw_chunks(image, layout))
    assert b"".join(chunks) == image.tobytes("raw", layout)
    row = len(image.tobytes("raw", layout)) // size[1]
    assert all(len(c) % row == 0 and len(c) <= max(CHUNK_BYTES, size[0] * 4) for c in chunks)
    assert len(chunks) >= len(image.tobytes("raw", layout)) // max(CHUNK_BYTES, size[0] * 4)


def test_an_empty_image_has_no_chunks():
    assert list(raw_chunks(Image.new("RGB", (0, 5)), "RGBX")) == []


def test_written_and_filled_as_tobytes(tmp_path):
    image = Image.open(BRIDGE).convert("RGB").resize((1300, 900))
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        assert write_raw(fd, image, "RGBX", b"HEAD") == 4 + 1300 * 900 * 4
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"HEAD" + image.tobytes("raw", "RGBX")
    rows = raw_array(image, "RGBX", 4)
    assert rows.shape == (900, 1300 * 4)
    assert np.array_equal(rows, np.frombuffer(image.tobytes("raw", "RGBX"), np.uint8).reshape(900, -1))
    with pytest.raises(RuntimeError, match="not"):  # a layout of another size than asked
        raw_array(image, "RGB", 4)
