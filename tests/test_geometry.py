"""smart_resize against qwen-vl-utils' documented values, and the coordinate conventions."""

import pytest

from toolserver.geometry import (
    CoordError,
    Coords,
    ViewRule,
    expand_to_min_side,
    fit_long_side,
    integer_box,
    smart_resize,
    to_original,
)


@pytest.mark.parametrize(
    ("width", "height", "expected_wh"),
    [
        (1000, 800, (1008, 812)),  # qwen-vl-utils' smart_resize (QwenLM/Qwen3-VL @ 9658872), worked by hand
        (640, 480, (644, 476)),
        (4000, 3000, (4004, 2996)),
        (5312, 2988, (4760, 2688)),  # §7: ARM-Thinker works on this view of a 5312x2988 photo
        (1, 1, (56, 56)),  # below min_pixels: ceil up to 4 tokens... 56x56 = 3136
        (37, 900, (28, 896)),
        (14, 14, (56, 56)),
    ],
)
def test_smart_resize_matches_qwen_vl_utils(width, height, expected_wh):
    h, w = smart_resize(height, width)
    assert (w, h) == expected_wh


def test_smart_resize_rounds_half_to_even():
    # 42/28 = 1.5 -> round() gives 2 (even); 70/28 = 2.5 -> 2 (even), not 3.
    assert smart_resize(42, 70, min_pixels=1) == (56, 56)


def test_smart_resize_ratio_error_text():
    with pytest.raises(CoordError, match=r"^absolute aspect ratio must be smaller than 200, got 210.0$"):
        smart_resize(10, 2100)


def test_smart_resize_factor_32_and_max_pixels():
    # MGPO's cap: 1003520 pixels. 4224x3168 -> floor(h/beta/28)*28.
    h, w = smart_resize(3168, 4224, max_pixels=1003520, min_pixels=200704)
    assert (w, h) == (1148, 840)
    assert w * h <= 1003520
    assert smart_resize(100, 100, factor=32, min_pixels=256 * 32 * 32) == (512, 512)


def test_smart_resize_never_returns_zero():
    # qwen-vl-utils 0.0.14 would return 0 here; we return the factor (documented deviation).
    assert smart_resize(30, 5000, max_pixels=28 * 28) == (28, 336)


def test_fit_long_side_only_shrinks():
    assert fit_long_side(2048, 1536, 1024) == (1024, 768)
    assert fit_long_side(300, 1024, 1024) == (300, 1024)
    assert fit_long_side(1000, 3001, 1024) == (341, 1024)


def test_view_rule_groundlight_and_default():
    assert ViewRule(factor=None, max_long_side=1024).view_size(4224, 3168) == (1024, 768)
    assert ViewRule().view_size(1000, 800) == (1008, 812)
    with pytest.raises(CoordError):
        ViewRule().view_size(8000, 20)


@pytest.mark.parametrize(
    ("coords", "box", "expected"),
    [
        (Coords.REL1000, (250, 500, 750, 1000), (1000.0, 1500.0, 3000.0, 3000.0)),
        (Coords.REL1, (0.25, 0.5, 0.75, 1.0), (1000.0, 1500.0, 3000.0, 3000.0)),
        (Coords.ABS_VIEW, (1001, 1498, 3003, 2996), (1000.0, 1500.0, 3000.0, 3000.0)),
        (Coords.ABS_ORIGINAL, (1000, 1500, 3000, 3000), (1000.0, 1500.0, 3000.0, 3000.0)),
    ],
)
def test_to_original(coords, box, expected):
    # A 4000x3000 original seen by the model at 4004x2996 (smart_resize).
    out = to_original(box, coords, (4000, 3000), (4004, 2996))
    assert out == pytest.approx(expected)


def test_abs_view_without_view_is_a_clear_error():
    with pytest.raises(CoordError, match="no model-view size"):
        to_original((0, 0, 1, 1), Coords.ABS_VIEW, (8000, 20), None)


def test_expand_to_min_side_shifts_inside():
    assert expand_to_min_side(10, 20, 28, 100) == (1.0, 29.0)
    assert expand_to_min_side(0, 5, 28, 100) == (0.0, 28.0)
    assert expand_to_min_side(95, 100, 28, 100) == (72.0, 100.0)
    assert expand_to_min_side(0, 1, 28, 10) == (0.0, 10.0)  # image smaller than the minimum
    assert expand_to_min_side(10, 50, 28, 100) == (10, 50)


def test_integer_box_covers():
    assert integer_box((1.2, 2.8, 3.1, 4.0)) == (1, 2, 4, 4)
