"""`resize_exact` splits a resize into row bands on two cores and must equal Pillow's own resize bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from toolserver import imaging
from toolserver.imaging import _band_plan, resize_exact

CASES = [((400, 400), (1024, 1024)), ((200, 200), (1024, 1024)), ((400, 300), (1024, 768)), ((400, 400), (4000, 4000)),
         ((333, 217), (1000, 652)), ((400, 400), (1023, 1023)), ((1024, 768), (512, 384)), ((7, 5), (700, 500)),
         ((400, 251), (1024, 643))]


def noise(size: tuple[int, int], mode: str = "RGB") -> Image.Image:
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    shape = (size[1], size[0], channels) if channels > 1 else (size[1], size[0])
    return Image.fromarray(np.random.default_rng(size[0] * size[1]).integers(0, 256, shape, dtype=np.uint8), mode)


@pytest.mark.parametrize(("source", "target"), CASES, ids=[f"{s}->{t}" for s, t in CASES])
@pytest.mark.parametrize("resample", [Image.Resampling.LANCZOS, Image.Resampling.BICUBIC])
def test_equals_pillow_resize(source, target, resample):
    image = noise(source)
    assert resize_exact(image, target, resample).tobytes() == image.resize(target, resample).tobytes()


def test_the_split_is_really_used_for_groundlight_sizes_and_refused_where_it_cannot_be_exact():
    assert _band_plan(400, 400, 1024, 1024, 2) == [(0, 512, 0, 200), (512, 1024, 200, 400)]
    assert _band_plan(400, 300, 1024, 1024, 2) == [(0, 512, 0, 150), (512, 1024, 150, 300)]
    assert _band_plan(7, 7, 13, 13, 2) is None  # no output row between the ends maps to a whole source row
    assert _band_plan(400, 400, 4000, 4000, 2) is None  # scale 0.1 is not a binary fraction: row centres would round apart
    # A 256-row band of a 400-row source shrinks the height: Pillow would run its passes in the other order.
    assert _band_plan(400, 400, 1024, 1024, 4) is None


def test_without_a_free_helper_it_resizes_whole(monkeypatch):
    image = noise((400, 400))
    assert imaging._band_permits.acquire(blocking=False) or imaging._BAND_HELPERS == 0
    try:
        out = resize_exact(image, (1024, 1024), Image.Resampling.LANCZOS)
    finally:
        if imaging._BAND_HELPERS:
            imaging._band_permits.release()
    assert out.tobytes() == image.resize((1024, 1024), Image.Resampling.LANCZOS).tobytes()


@pytest.mark.parametrize("mode", ["RGBA", "L"])
def test_other_modes(mode):
    image = noise((400, 400), mode)
    out = resize_exact(image, (1024, 1024), Image.Resampling.LANCZOS)
    assert out.mode == mode and out.tobytes() == image.resize((1024, 1024), Image.Resampling.LANCZOS).tobytes()


@pytest.mark.parametrize(("source", "target"), CASES, ids=[f"{s}->{t}" for s, t in CASES])
def test_more_bands_on_a_bigger_machine_are_still_exact(monkeypatch, source, target):
    import threading

    monkeypatch.setattr(imaging, "_BAND_HELPERS", 3)
    monkeypatch.setattr(imaging, "_band_permits", threading.Semaphore(3))
    monkeypatch.setattr(imaging, "_band_pool", None)
    used = []
    original = imaging._band_plan
    monkeypatch.setattr(imaging, "_band_plan", lambda *a: used.append(a[4]) or original(*a))
    image = noise(source)
    out = resize_exact(image, target, Image.Resampling.LANCZOS)
    assert out.tobytes() == image.resize(target, Image.Resampling.LANCZOS).tobytes()
    if source == (200, 200) and target == (1024, 1024):
        assert used == [4]  # four bands at once: the caller and three helpers
    assert imaging._band_permits._value == 3  # every permit given back


@pytest.mark.slow
def test_random_sizes_are_exact_or_fall_back():
    rng = np.random.default_rng(7)
    split = 0
    for i in range(40):
        source = (int(rng.integers(50, 700)), int(rng.integers(50, 700)))
        target = (int(rng.integers(500, 1300)), int(rng.integers(500, 1300)))
        if i % 2:  # heights in a binary ratio (25:64, as Groundlight's 400 -> 1024), which can split exactly
            q = int(rng.integers(8, 20))
            source, target = (source[0], 25 * q), (target[0], 64 * q)
        image = noise(source)
        for resample in (Image.Resampling.LANCZOS, Image.Resampling.BICUBIC):
            assert resize_exact(image, target, resample).tobytes() == image.resize(target, resample).tobytes(), (
                source, target, resample)
        split += _band_plan(*source, *target, 2) is not None
    assert split >= 10  # many of them really ran in bands
