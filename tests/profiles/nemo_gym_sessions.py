"""The sessions NeMo Gym's goldens are recorded from (scripts/goldens/record_nemo_gym.py) and replayed against
(test_nemo_gym.py): their input images, made here from numbers alone, and the assistant turns of each session.

Each session is a list of turns the model writes; the reference's agent loop runs them in order until it ends.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

ZOOM, CROP, ROTATE, FLIP = "image_zoom_in_tool", "image_crop_tool", "image_rotate_tool", "image_flip_tool"
DIFF, SIDE, OVERLAY = "image_diff_tool", "image_side_by_side_tool", "image_overlay_tool"
COUNT, FIND, COLOR_AT = "count_objects_tool", "find_color_tool", "color_at_tool"
ANSWER = "The answer is 3."


def scene() -> Image.Image:
    """640x480: a light ground with a noisy gradient band, five blue discs, three red squares, a green bar."""
    rng = np.random.default_rng(7)
    pixels = np.full((480, 640, 3), (238, 236, 230), np.uint8)
    band = np.linspace(0, 255, 640, dtype=np.float32)[None, :, None] * np.ones((80, 1, 3), np.float32)
    pixels[380:460] = np.clip(band + rng.normal(0, 12, (80, 640, 3)), 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels, "RGB")
    draw = ImageDraw.Draw(image)
    for i, (x, y) in enumerate([(60, 60), (160, 90), (260, 50), (360, 120), (470, 70)]):
        draw.ellipse([x, y, x + 40 + 4 * i, y + 40 + 4 * i], fill=(60, 160, 220))
    for x, y in [(80, 220), (250, 250), (420, 230)]:
        draw.rectangle([x, y, x + 50, y + 50], fill=(200, 40, 30))
    draw.rectangle([560, 200, 580, 340], fill=(40, 170, 60))
    draw.text((300, 330), "NeMo 42", fill=(10, 10, 10))
    return image


def other() -> Image.Image:
    """300x200: the scene's left part, shifted and recoloured in one corner (for diff, overlay, side by side)."""
    image = scene().crop((20, 10, 320, 210))
    ImageDraw.Draw(image).rectangle([200, 120, 260, 180], fill=(250, 220, 0))
    return image


def tiny() -> Image.Image:
    """20x12, every pixel different."""
    y, x = np.mgrid[0:12, 0:20]
    return Image.fromarray(np.stack([x * 12, y * 20, (x * 7 + y * 13) % 256], -1).astype(np.uint8), "RGB")


def tall() -> Image.Image:
    """100x2000 stripes (so that images side by side come out wider than 4096 px)."""
    y = np.arange(2000)[:, None, None]
    return Image.fromarray(np.broadcast_to((y * 3 % 256).astype(np.uint8), (2000, 100, 3)).copy(), "RGB")


def large() -> Image.Image:
    """3200x2400 (so that a 45° rotation comes out wider than 4096 px)."""
    return scene().resize((3200, 2400), Image.Resampling.BILINEAR)


IMAGES = {"scene": scene, "other": other, "tiny": tiny, "tall": tall, "large": large}


def xml(name: str, **params: Any) -> str:
    """A Qwen3-Coder XML call as the task's prompt asks for it (strings bare, everything else in JSON)."""
    body = "".join(f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value)}\n</parameter>\n"
                   for key, value in params.items())
    return f"I will look closer.\n<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def as_json(name: str, arguments: Any, key: str = "name") -> str:
    return f'<tool_call>\n{json.dumps({key: name, "arguments": arguments})}\n</tool_call>'


def one(name: str, inputs: list[str] | None = None, **params: Any) -> tuple[list[str], list[str]]:
    return inputs or ["scene"], [xml(name, label="look", img_idx=0, **params), ANSWER]


SESSIONS: dict[str, tuple[list[str], list[str]]] = {
    # -- the zoom: boxes in 0-1000, pixels, inverted, outside, tiny, degenerate; its factor and its texts
    "zoom_normalized": one(ZOOM, bbox_2d=[312, 417, 812, 917]),
    "zoom_factor_2": one(ZOOM, bbox_2d=[100, 100, 400, 300], factor=2),
    "zoom_factor_text": (["scene"], [as_json(ZOOM, {"bbox_2d": [100, 100, 400, 300], "factor": "4", "img_idx": 0}),
                                     ANSWER]),
    "zoom_pixels": one(ZOOM, ["large"], bbox_2d=[100, 50, 1200, 400]),
    "zoom_pixels_partly_outside": one(ZOOM, bbox_2d=[500, 400, 1100, 600]),
    "zoom_inverted": one(ZOOM, bbox_2d=[800, 700, 200, 100]),
    "zoom_negative": one(ZOOM, bbox_2d=[-100, -50, 300, 200]),
    "zoom_tiny_box": one(ZOOM, bbox_2d=[500, 500, 502, 501]),
    "zoom_thin_box": one(ZOOM, bbox_2d=[0, 0, 1000, 1]),
    "zoom_tiny_image": one(ZOOM, ["tiny"], bbox_2d=[0, 0, 1000, 1000]),
    "zoom_box_as_text": (["scene"], [as_json(ZOOM, {"bbox_2d": "[10, 20, 300, 400]", "img_idx": 0}), ANSWER]),
    "zoom_box_as_numbers": one(ZOOM, bbox_2d="x 10, y 20 to 300 / 400"),
    "zoom_floats": one(ZOOM, bbox_2d=[10.6, 20.2, 300.5, 400.9], factor=1.5),
    "zoom_outside": one(ZOOM, bbox_2d=[1500, 1200, 1900, 1400]),
    "zoom_degenerate": one(ZOOM, bbox_2d=[500, 500, 500, 500]),
    "zoom_three_numbers": one(ZOOM, bbox_2d=[1, 2, 3]),
    "zoom_no_box": (["scene"], [xml(ZOOM, label="look", img_idx=0), ANSWER]),
    "zoom_factor_zero": one(ZOOM, bbox_2d=[100, 100, 400, 300], factor=0),
    "zoom_factor_negative": one(ZOOM, bbox_2d=[100, 100, 400, 300], factor=-2),
    "zoom_factor_word": one(ZOOM, bbox_2d=[100, 100, 400, 300], factor="big"),
    "zoom_factor_list": one(ZOOM, bbox_2d=[100, 100, 400, 300], factor=[2]),
    "zoom_image_out_of_range": (["scene"], [xml(ZOOM, bbox_2d=[0, 0, 500, 500], label="x", img_idx=3), ANSWER]),
    "zoom_image_index_word": (["scene"], [xml(ZOOM, bbox_2d=[0, 0, 500, 500], label="x", img_idx="first"),
                                          ANSWER]),
    # -- crop
    "crop_normalized": one(CROP, bbox_2d=[23, 162, 262, 635]),
    "crop_pixels": one(CROP, bbox_2d=[10, 20, 1100, 300]),
    "crop_inverted": one(CROP, bbox_2d=[600, 600, 100, 200]),
    "crop_one_pixel": one(CROP, bbox_2d=[500, 500, 501, 501]),
    "crop_outside": one(CROP, bbox_2d=[1001, 0, 1200, 100]),
    "crop_empty": one(CROP, bbox_2d=[300, 300, 300, 400]),
    "crop_bad_box": one(CROP, bbox_2d="none"),
    # -- rotate, flip
    "rotate_90": one(ROTATE, degrees=90),
    "rotate_odd_angle": one(ROTATE, degrees=-30.5),
    "rotate_text": (["scene"], [as_json(ROTATE, {"degrees": "45", "img_idx": 0, "label": "t"}), ANSWER]),
    "rotate_large_capped": one(ROTATE, ["large"], degrees=45),
    "rotate_word": one(ROTATE, degrees="left"),
    "rotate_missing": (["scene"], [xml(ROTATE, label="x", img_idx=0), ANSWER]),
    "rotate_infinite": (["scene"], [xml(ROTATE, degrees="Infinity", label="x", img_idx=0), ANSWER]),
    "flip_horizontal": one(FLIP, axis="horizontal"),
    "flip_vertical": one(FLIP, ["tiny"], axis="vertical"),
    "flip_diagonal": one(FLIP, axis="diagonal"),
    "flip_image_index_word": (["scene"], [xml(FLIP, axis="vertical", label="x", img_idx="first"), ANSWER]),
    # -- two images
    "diff_two": (["scene", "other"], [xml(DIFF, img_idx_a=0, img_idx_b=1, label="compare"), ANSWER]),
    "diff_same": (["scene"], [xml(DIFF, img_idx_a=0, img_idx_b=0, label="same"), ANSWER]),
    "diff_missing_b": (["scene", "other"], [xml(DIFF, img_idx_a=0, label="compare"), ANSWER]),
    "overlay_default": (["scene", "other"], [xml(OVERLAY, img_idx_a=1, img_idx_b=0, label="align"), ANSWER]),
    "overlay_alpha": (["scene", "other"], [xml(OVERLAY, img_idx_a=0, img_idx_b=1, alpha=0.3, label="a"), ANSWER]),
    "overlay_alpha_over": (["scene", "other"], [xml(OVERLAY, img_idx_a=0, img_idx_b=1, alpha=2, label="a"),
                                                ANSWER]),
    "overlay_alpha_word": (["scene", "other"], [xml(OVERLAY, img_idx_a=0, img_idx_b=1, alpha="half", label="a"),
                                                ANSWER]),
    "side_by_side_captions": (["scene", "other"], [xml(SIDE, img_indices=[0, 1], labels=["A", "B"], label="s"),
                                                   ANSWER]),
    "side_by_side_three": (["scene", "other", "tiny"], [xml(SIDE, img_indices=[2, 0, 1], label="s"), ANSWER]),
    "side_by_side_capped": (["scene", "tall"], [xml(SIDE, img_indices=[0, 0, 0, 1], label="s"), ANSWER]),
    "side_by_side_one": (["scene"], [xml(SIDE, img_indices=[0], label="s"), ANSWER]),
    "side_by_side_seven": (["scene"], [xml(SIDE, img_indices=[0] * 7, label="s"), ANSWER]),
    "side_by_side_out_of_range": (["scene", "other"], [xml(SIDE, img_indices=[0, 9], label="s"), ANSWER]),
    "side_by_side_captions_text": (["scene", "other"], [xml(SIDE, img_indices=[0, 1], labels="A", label="s"),
                                                        ANSWER]),
    # -- blobs and colours
    "count_background": one(COUNT),
    "count_colour": one(COUNT, color=[60, 160, 220], tolerance=30),
    "count_min_size": one(COUNT, tolerance=40, min_size=2000),
    "count_tolerance_over": one(COUNT, tolerance=300),
    "count_tolerance_word": one(COUNT, tolerance="some"),
    "count_min_size_zero": one(COUNT, min_size=0),
    "count_min_size_word": one(COUNT, min_size="many"),
    "count_colour_short": one(COUNT, color=[1, 2]),
    "count_colour_words": one(COUNT, color=["a", 1, 2]),
    "count_colour_over": one(COUNT, color=[300, 0, 0]),
    "find_colour": one(FIND, color=[200, 40, 30], tolerance=20),
    "find_colour_none": one(FIND, color=[0, 255, 0], tolerance=5),
    "find_colour_missing": one(FIND),
    "colour_at_centre": one(COLOR_AT, point_2d=[395, 167]),
    "colour_at_corner": one(COLOR_AT, point_2d=[1000, 1000]),
    "colour_at_origin": one(COLOR_AT, ["tiny"], point_2d=[0, 0]),
    "colour_at_outside": one(COLOR_AT, point_2d=[1001, 5]),
    "colour_at_three": one(COLOR_AT, point_2d=[1, 2, 3]),
    "colour_at_words": one(COLOR_AT, point_2d=["a", 1]),
    # -- the turn: formats, several calls, malformed markup, unknown tools, arguments that are not an object
    "json_call": (["scene"], [as_json(ZOOM, {"bbox_2d": [0, 0, 500, 500], "img_idx": 0, "label": "j"}), ANSWER]),
    "json_call_tool_name": (["scene"], [as_json(FLIP, {"axis": "vertical", "img_idx": 0}, key="tool_name"), ANSWER]),
    "two_calls_one_runs": (["scene"], [xml(FLIP, axis="horizontal", label="a", img_idx=0) + "\n"
                                       + xml(ROTATE, degrees=90, label="b", img_idx=0), ANSWER]),
    "xml_and_json_calls": (["scene"], [as_json(FLIP, {"axis": "vertical", "img_idx": 0}) + "\n"
                                       + xml(ROTATE, degrees=180, label="b", img_idx=0), ANSWER]),
    "unclosed_call": (["scene"], ["<tool_call>\n<function=image_flip_tool>\n<parameter=axis>\nvertical\n"
                                  "</parameter>\n</function>"]),
    "think_beside_call": (["scene"], ["</think>\n" + xml(FLIP, axis="vertical", label="a", img_idx=0)]),
    "bad_json_call": (["scene"], ['<tool_call>{"name": "image_flip_tool", "arguments": {</tool_call>']),
    "unknown_tool": (["scene"], [xml("image_sharpen_tool", img_idx=0)]),
    "arguments_text": (["scene"], [as_json(FLIP, "axis=vertical")]),
    "arguments_list": (["scene"], [as_json(FLIP, [1, 2])]),
    "answer_only": (["scene"], [ANSWER]),
    "no_images": ([], [xml(ZOOM, bbox_2d=[0, 0, 500, 500], label="x", img_idx=0)]),
    # -- images by index, each result the next; repeats and the call limit
    "chain": (["scene", "other"], [xml(ZOOM, bbox_2d=[100, 100, 600, 500], label="z", img_idx=0),
                                   xml(CROP, bbox_2d=[0, 0, 500, 500], label="c", img_idx=2),
                                   xml(DIFF, img_idx_a=2, img_idx_b=3, label="d"),
                                   xml(COLOR_AT, point_2d=[500, 500], label="p", img_idx=3),
                                   xml(SIDE, img_indices=[1, 2, 3, 4, 5], labels=[1, 2, 3], label="s"), ANSWER]),
    "repeat_exact": (["scene"], [xml(ROTATE, degrees=90, label="r", img_idx=0),
                                 xml(ROTATE, degrees=90, label="r", img_idx=0),
                                 xml(FLIP, axis="vertical", label="f", img_idx=0)]),
    "repeat_overlap_then_answer": (["scene"], [xml(ZOOM, bbox_2d=[100, 100, 500, 500], label="a", img_idx=0),
                                               xml(ZOOM, bbox_2d=[120, 110, 520, 480], label="b", img_idx=0),
                                               ANSWER]),
    "repeat_overlap_other_image": (["scene", "other"], [xml(ZOOM, bbox_2d=[100, 100, 500, 500], label="a",
                                                            img_idx=0),
                                                        xml(ZOOM, bbox_2d=[100, 100, 500, 500], label="a",
                                                            img_idx=1),
                                                        xml(CROP, bbox_2d=[100, 100, 500, 500], label="a",
                                                            img_idx=0), ANSWER]),
    # 20 calls, then the forced final turn; the agent's 21 model calls (max_steps) end the rollout there.
    "call_limit": (["tiny"], [xml(ROTATE, degrees=10 * k + 1, label="r", img_idx=0) for k in range(21)]),
}

# Texts whose calls and markup the reference's own parser reads (recorded beside the sessions).
PARSE_TEXTS = [
    "<tool_call>\n<function=a>\n<parameter=x>\n[1, 2]\n</parameter>\n<parameter=x>\nlast\n</parameter>\n</function>"
    "\n</tool_call>",
    '<tool_call>{"tool_name": "b", "arguments": [1]}</tool_call> <tool_call>{"name": ""}</tool_call>',
    "<tool_call><function=a></function></tool_call><think>",
    "<function=a> only",
    "no calls at all",
    "<tool_call>\n<function=image_zoom_in_tool>\n<parameter=bbox_2d>\n1, 2, 3, 4\n</parameter>\n<parameter=label>\n"
    "  a  b \n</parameter>\n<parameter=factor>\n2.5e0\n</parameter>\n<parameter=img_idx>\n\"0\"\n</parameter>\n"
    "</function>\n</tool_call>",
    '<tool_call>{"name": "x", "arguments": {"a": {"b": 1}}}</tool_call>',
    '<tool_call>{"name": "x", "arguments": "{\\"a\\": 1}"}</tool_call>',
    "<tool_call><function=x y><parameter=a>1</parameter></function></tool_call>",
    "<tool_call>\n<function=f>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n</function>\n</tool_call>",
    "<tool_call>\n<function=f>\n</function>\n</tool_call></tool_call>",
    '<tool_call>{"name": "f"}</tool_call><tool_call><function=g></function></tool_call>',
]
