"""toolserver.resample reproduces Pillow's bicubic resize bit for bit: every size class (up, down, mixed, one
axis, one pixel, both pass orders of Pillow 13), noise and a real photograph, and falls back to Pillow where
it does not apply or where its self-check fails."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from toolserver import resample

PHOTO = Path(__file__).resolve().parents[2] / "shared" / "data" / "photos" / "Dragonfly_by_Bolly.jpg"


def pillow(image: Image.Image, size: tuple[int, int]) -> bytes:
    return image.resize(size, Image.Resampling.BICUBIC).tobytes()


def noise(width: int, height: int, seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB")


def test_the_kernels_are_in_use_here() -> None:
    assert resample.exact_here()


@pytest.mark.parametrize(("source", "size"), [
    ((1623, 1216), (1624, 1204)),  # Pixel-Reasoner's crop: height shrinks more than twice the width → vertical first
    ((1216, 1623), (1204, 1624)),  # horizontal first
    ((400, 300), (1000, 750)),  # 2.5x up
    ((1000, 750), (97, 61)),  # 10x down: ksize 41
    ((640, 480), (640, 241)),  # one axis only (vertical)
    ((640, 480), (333, 480)),  # one axis only (horizontal)
    ((1, 1), (5, 7)), ((7, 5), (1, 1)), ((1, 300), (3, 2)), ((300, 1), (2, 3)),
    ((17, 33), (33, 17)),  # fewer rows than one block of the horizontal pass
    ((50, 50), (49, 101)), ((50, 50), (101, 49)),  # the pass-order rule's boundary cases
])
def test_noise_matches_pillow(source: tuple[int, int], size: tuple[int, int]) -> None:
    image = noise(*source)
    assert resample.resize_bicubic(image, size).tobytes() == pillow(image, size)


def test_random_sizes_match_pillow() -> None:
    rng = np.random.default_rng(2026)
    for case in range(120):
        width, height = (int(v) for v in rng.integers(1, 260, 2))
        if case % 3:
            out = (int(rng.integers(1, 400)), int(rng.integers(1, 400)))
        else:  # near the source size, where Pillow's choice of the first pass flips
            out = (max(1, width + int(rng.integers(-4, 5))), max(1, height + int(rng.integers(-12, 13))))
        image = noise(width, height, seed=case)
        assert resample.resize_bicubic(image, out).tobytes() == pillow(image, out), (image.size, out)


@pytest.mark.skipif(not PHOTO.is_file(), reason="the shared photographs are not beside this checkout")
def test_a_photograph_matches_pillow() -> None:
    with Image.open(PHOTO) as photo:
        image = photo.convert("RGB")
    crop = image.crop((1200, 900, 2823, 2116))
    for size in ((1624, 1204), (1000, 750), (512, 384), (2434, 1824)):
        assert resample.resize_bicubic(crop, size).tobytes() == pillow(crop, size)


@pytest.mark.parametrize("mode", ["L", "RGBA", "LA", "I;16", "P"])
def test_other_modes_are_pillows_own(mode: str) -> None:
    image = noise(40, 30).convert(mode)
    out = resample.resize_bicubic(image, (61, 17))
    assert out.mode == image.resize((61, 17), Image.Resampling.BICUBIC).mode
    assert out.tobytes() == pillow(image, (61, 17))


def test_same_size_is_a_copy() -> None:
    image = noise(20, 10)
    out = resample.resize_bicubic(image, (20, 10))
    assert out is not image and out.tobytes() == image.tobytes()


def test_concurrent_resizes_agree() -> None:
    images = [noise(300, 200, seed=s) for s in range(4)]
    expected = [pillow(im, (451, 170)) for im in images]
    results: list[bytes | None] = [None] * 16

    def work(i: int) -> None:
        results[i] = resample.resize_bicubic(images[i % 4], (451, 170)).tobytes()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected[i % 4] for i in range(16)]


def test_a_failed_self_check_falls_back_to_pillow(monkeypatch: pytest.MonkeyPatch) -> None:
    real = resample.resize_rgbx

    def off_by_one(rows: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        out = real(rows, size).copy()
        out[0, 0] ^= 1
        return out

    monkeypatch.setattr(resample, "resize_rgbx", off_by_one)
    assert resample._self_check() is False
    monkeypatch.setattr(resample, "_checked", False)
    image = noise(64, 48)
    assert resample.resize_bicubic(image, (100, 70)).tobytes() == pillow(image, (100, 70))
