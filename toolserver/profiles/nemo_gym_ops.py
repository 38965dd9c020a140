"""The ten image operations of NeMo Gym's image tools (NVIDIA-NeMo/Gym @ 07d6b0d0, added in 4a582181, PR #2624:
`resources_servers/image_tools/base.py`, `execute_image_tool` and its helpers), written from the reference: the
same checks in the same order with the same texts, the same arithmetic (0–1000 boxes, or pixels when a value
exceeds 1000; Python's rounding, floor and ceil where it uses them), the same Pillow and SciPy calls. Not a
profile itself: `toolserver.profiles.nemo_gym` serves them.

`run(name, arguments, images)` returns the result's JSON fields and its image; every model-readable failure is
a `ValueError` (or whatever Python raises on the way, as there), whose text the tool shows after
`<tool> failed: `.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from math import ceil, floor
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from toolserver.profiles.qwen_family import agent_smart_resize
from toolserver.resample import resize_bicubic

NUMBER = r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?"
GRID = 32  # the zoom's pixel grid, and the short side a small box grows to
MIN_PIXELS, MAX_PIXELS = 262144, 1048576  # the agent config's crop_min_pixels, crop_max_pixels
MAX_BLOBS = 40
PADDING = 8  # between images side by side
RED, WHITE, MAGENTA = (255, 0, 0), (255, 255, 255), [255, 0, 255]

Result = tuple[dict[str, Any], Image.Image]


def coerce_bbox(value: Any) -> list[float] | None:
    """Four numbers (a list, or a string holding JSON or numbers), ordered as [x_min, y_min, x_max, y_max]."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = re.findall(NUMBER, value)[:4]
    if not isinstance(value, list | tuple) or len(value) != 4:
        return None
    try:
        x1, y1, x2, y2 = (float(v) for v in value)
    except (TypeError, ValueError):
        return None
    return [min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)]


def bbox_iou(a: list[float], b: list[float]) -> float:
    inter_w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    inter_h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = inter_w * inter_h
    if inter <= 0.0:
        return 0.0
    union = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1]) + max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1]) - inter
    return inter / union if union > 0.0 else 0.0


def to_pixels(bbox: list[float], width: int, height: int) -> list[float]:
    """0–1000 coordinates scaled to the image, unless any value's magnitude exceeds 1000: then pixels."""
    if max(abs(v) for v in bbox) > 1000.0:
        return list(bbox)
    return [bbox[0] / 1000.0 * width, bbox[1] / 1000.0 * height, bbox[2] / 1000.0 * width, bbox[3] / 1000.0 * height]


def grow_small_box(box: list[float], width: int, height: int) -> list[int]:
    """Floor/ceil and clamp; a box under 32 px on a side grows about its centre so its short side is 32."""
    left, top = max(0, floor(box[0])), max(0, floor(box[1]))
    right, bottom = min(width, ceil(box[2])), min(height, ceil(box[3]))
    box_h, box_w = bottom - top, right - left
    if box_h < GRID or box_w < GRID:
        cx, cy = (left + right) / 2.0, (top + bottom) / 2.0
        ratio = GRID / max(1, min(box_h, box_w))
        half_h, half_w = ceil(box_h * ratio * 0.5), ceil(box_w * ratio * 0.5)
        left, right = max(0, floor(cx - half_w)), min(width, ceil(cx + half_w))
        top, bottom = max(0, floor(cy - half_h)), min(height, ceil(cy + half_h))
    return [left, top, right, bottom]


def image_at(images: Sequence[Callable[[], Image.Image]], value: Any, parameter: str) -> tuple[int, Image.Image]:
    try:
        index = int(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{parameter} must be an integer") from exc
    if index < 0 or index >= len(images):
        raise ValueError(f"{parameter} {index} is out of range for {len(images)} image(s)")
    return index, images[index]()


def normalized_box(box: Sequence[int], width: int, height: int) -> list[int]:
    return [max(0, min(1000, round(box[0] / width * 1000))), max(0, min(1000, round(box[1] / height * 1000))),
            max(0, min(1000, round(box[2] / width * 1000))), max(0, min(1000, round(box[3] / height * 1000)))]


def normalized_point(point: Sequence[float], width: int, height: int) -> list[int]:
    return [max(0, min(1000, round(point[0] / width * 1000))), max(0, min(1000, round(point[1] / height * 1000)))]


def zoom(arguments: dict[str, Any], images: Sequence[Callable[[], Image.Image]], label: str) -> Result:
    bbox = coerce_bbox(arguments.get("bbox_2d"))
    if bbox is None:
        raise ValueError("bbox_2d must be a list of four numbers")
    index, image = image_at(images, arguments.get("img_idx", 0), "img_idx")
    left, top, right, bottom = grow_small_box(to_pixels(bbox, *image.size), *image.size)
    if right <= left or bottom <= top:
        raise ValueError(f"Invalid crop after clipping: {[left, top, right, bottom]}")
    factor = float(arguments.get("factor", 3.0))
    if not math.isfinite(factor) or factor <= 0:
        raise ValueError("factor must be a positive finite number")
    new_h, new_w = agent_smart_resize(max(1, round((bottom - top) * factor)),
                                      max(1, round((right - left) * factor)),
                                      factor=GRID, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    output = resize_bicubic(image.crop((left, top, right, bottom)), (new_w, new_h))
    return {"box": bbox, "factor": factor, "label": label, "img_idx": index}, output


def crop(arguments: dict[str, Any], images: Sequence[Callable[[], Image.Image]], label: str) -> Result:
    index, image = image_at(images, arguments.get("img_idx", 0), "img_idx")
    bbox = coerce_bbox(arguments.get("bbox_2d"))
    if bbox is None:
        raise ValueError("bbox_2d must be a list of four numbers")
    x1, y1, x2, y2 = to_pixels(bbox, image.width, image.height)
    box = [max(0, floor(x1)), max(0, floor(y1)), min(image.width, ceil(x2)), min(image.height, ceil(y2))]
    if box[2] <= box[0] or box[3] <= box[1]:
        raise ValueError(f"Invalid crop after clipping: {box}")
    output = image.crop((box[0], box[1], box[2], box[3]))
    return {"box": bbox, "size": list(output.size), "label": label, "img_idx": index}, output


def rotate(arguments: dict[str, Any], images: Sequence[Callable[[], Image.Image]], label: str) -> Result:
    index, image = image_at(images, arguments.get("img_idx", 0), "img_idx")
    try:
        degrees = float(arguments["degrees"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError("degrees must be a number") from exc
    if not math.isfinite(degrees):
        raise ValueError("degrees must be finite")
    output = image.rotate(degrees, expand=True, fillcolor=WHITE)
    return {"degrees": degrees, "size": list(output.size), "label": label, "img_idx": index}, output


def flip(arguments: dict[str, Any], images: Sequence[Callable[[], Image.Image]], label: str) -> Result:
    index, image = image_at(images, arguments.get("img_idx", 0), "img_idx")
    axis = str(arguments.get("axis", ""))
    if axis == "horizontal":
        output = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    elif axis == "vertical":
        output = image.transpose(Image.Transpose.FLIP_TOP_BOTTOM)
    else:
        raise ValueError('axis must be "horizontal" or "vertical"')
    return {"axis": axis, "size": list(output.size), "label": label, "img_idx": index}, output


def _pair(arguments: dict[str, Any],
          images: Sequence[Callable[[], Image.Image]]) -> tuple[int, Image.Image, int, Image.Image]:
    idx_a, image_a = image_at(images, arguments.get("img_idx_a"), "img_idx_a")
    idx_b, image_b = image_at(images, arguments.get("img_idx_b"), "img_idx_b")
    return idx_a, image_a, idx_b, image_b


def diff(arguments: dict[str, Any], images: Sequence[Callable[[], Image.Image]], label: str) -> Result:
    idx_a, image_a, idx_b, image_b = _pair(arguments, images)
    image_b = resize_bicubic(image_b, image_a.size)
    difference = np.abs(np.asarray(image_a, dtype=np.int16) - np.asarray(image_b, dtype=np.int16)).astype(np.uint8)
    gray = difference.max(axis=2)
    changed = gray > 30
    result: dict[str, Any] = {"mean_abs_diff": round(float(difference.mean()), 2),
                              "changed_pixel_fraction": round(float(changed.mean()), 4), "label": label,
                              "img_idx_a": idx_a, "img_idx_b": idx_b}
    if changed.any():
        ys, xs = np.nonzero(changed)
        result["changed_bbox"] = normalized_box([int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1],
                                                image_a.width, image_a.height)
    heat = np.zeros_like(difference)
    heat[..., 0] = np.clip(gray.astype(np.uint16) * 3, 0, 255).astype(np.uint8)
    return result, Image.blend(image_a, Image.fromarray(heat), 0.6)


def side_by_side(arguments: dict[str, Any], images: Sequence[Callable[[], Image.Image]], label: str) -> Result:
    raw = arguments.get("img_indices")
    if not isinstance(raw, list | tuple) or not 2 <= len(raw) <= 6:
        raise ValueError("img_indices must contain between two and six image indices")
    loaded = [image_at(images, value, "img_indices")[1] for value in raw]
    indices = [int(value) for value in raw]
    height = max(image.height for image in loaded)
    loaded = [resize_bicubic(image, (max(1, round(image.width * height / image.height)), height))
              for image in loaded]
    captions = arguments.get("labels") or []
    if not isinstance(captions, list | tuple):
        raise ValueError("labels must be an array when provided")
    output = Image.new("RGB", (sum(image.width for image in loaded) + PADDING * (len(loaded) - 1), height), WHITE)
    x = 0
    for i, image in enumerate(loaded):
        if i < len(captions):
            image = image.copy()
            ImageDraw.Draw(image).text((4, 4), str(captions[i]), fill=RED)
        output.paste(image, (x, 0))
        x += image.width + PADDING
    return {"img_indices": indices, "size": list(output.size), "label": label}, output


def overlay(arguments: dict[str, Any], images: Sequence[Callable[[], Image.Image]], label: str) -> Result:
    idx_a, image_a, idx_b, image_b = _pair(arguments, images)
    try:
        alpha = float(arguments.get("alpha", 0.5))
    except (TypeError, ValueError) as exc:
        raise ValueError("alpha must be a number") from exc
    if not 0.0 <= alpha <= 1.0:
        raise ValueError("alpha must be in the 0-1 range")
    output = Image.blend(image_a, resize_bicubic(image_b, image_a.size), alpha)
    return {"alpha": alpha, "label": label, "img_idx_a": idx_a, "img_idx_b": idx_b}, output


def _rgb(value: Any, *, required: bool) -> list[int] | None:
    if value is None and not required:
        return None
    if not isinstance(value, list | tuple) or len(value) != 3:
        raise ValueError("color must be an [R, G, B] list")
    try:
        color = [int(channel) for channel in value]
    except (TypeError, ValueError) as exc:
        raise ValueError("color must contain three integers") from exc
    if any(channel < 0 or channel > 255 for channel in color):
        raise ValueError("color channels must be in the 0-255 range")
    return color


def blobs_of(mask: Any, min_size: int) -> list[dict[str, Any]]:
    """4-connected regions of `mask` (SciPy's default structure) of at least `min_size` pixels, the first 40."""
    from scipy import ndimage

    labels, _ = ndimage.label(mask)
    found: list[dict[str, Any]] = []
    for label_id, slices in enumerate(ndimage.find_objects(labels), start=1):
        if slices is None:
            continue
        component = labels[slices] == label_id
        pixels = int(component.sum())
        if pixels < min_size:
            continue
        local_y, local_x = np.nonzero(component)
        xs, ys = local_x + int(slices[1].start or 0), local_y + int(slices[0].start or 0)
        found.append({"bbox_pixels": [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1],
                      "center_pixels": [float(xs.mean()), float(ys.mean())], "pixels": pixels})
        if len(found) >= MAX_BLOBS:
            break
    return found


def _int_argument(arguments: dict[str, Any], name: str, default: int) -> int:
    try:
        return int(arguments.get(name, default))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an integer") from exc


def blobs(name: str, arguments: dict[str, Any], images: Sequence[Callable[[], Image.Image]], label: str) -> Result:
    """`count_objects_tool` and `find_color_tool`: a colour mask (or everything unlike the border's median)."""
    index, image = image_at(images, arguments.get("img_idx", 0), "img_idx")
    array = np.asarray(image)
    tolerance = _int_argument(arguments, "tolerance", 40)
    if not 0 <= tolerance <= 255:
        raise ValueError("tolerance must be in the 0-255 range")
    color = _rgb(arguments.get("color"), required=name == "find_color_tool")
    if color is not None:
        mask = (np.abs(array.astype(np.int16) - np.asarray(color, dtype=np.int16)) <= tolerance).all(axis=2)
    else:
        border = np.concatenate([array[0], array[-1], array[:, 0], array[:, -1]], axis=0).reshape(-1, 3)
        background = np.median(border, axis=0).astype(np.int16)
        mask = (np.abs(array.astype(np.int16) - background) > tolerance).any(axis=2)
    min_size = _int_argument(arguments, "min_size", 30)
    if min_size < 1:
        raise ValueError("min_size must be positive")
    found = blobs_of(mask, min_size if name == "count_objects_tool" else 20)
    listed = [{"bbox": normalized_box(b["bbox_pixels"], image.width, image.height),
               "center": (center := normalized_point(b["center_pixels"], image.width, image.height)),
               "centroid": center, "pixels": b["pixels"]} for b in found]
    if name == "count_objects_tool":
        output = image.copy()
        draw = ImageDraw.Draw(output)
        for number, blob in enumerate(found, start=1):
            x1, y1, x2, y2 = blob["bbox_pixels"]
            draw.rectangle([x1, y1, x2, y2], outline=RED, width=2)
            draw.text((x1 + 2, y1 + 2), str(number), fill=RED)
        return {"count": len(listed), "blobs": listed, "label": label, "img_idx": index}, output
    shown = array.copy()
    shown[mask] = MAGENTA
    return ({"match_fraction": round(float(mask.mean()), 4), "count": len(listed), "blobs": listed, "label": label,
             "img_idx": index}, Image.fromarray(shown))


def color_at(arguments: dict[str, Any], images: Sequence[Callable[[], Image.Image]], label: str) -> Result:
    index, image = image_at(images, arguments.get("img_idx", 0), "img_idx")
    point = arguments.get("point_2d")
    if not isinstance(point, list | tuple) or len(point) != 2:
        raise ValueError("point_2d must be an [x, y] list")
    try:
        px, py = (float(value) for value in point)
    except (TypeError, ValueError) as exc:
        raise ValueError("point_2d must contain two numbers") from exc
    if not (0 <= px <= 1000 and 0 <= py <= 1000):
        raise ValueError("point_2d coordinates must be in the 0-1000 range")
    x = min(image.width - 1, max(0, round(px / 1000 * image.width)))
    y = min(image.height - 1, max(0, round(py / 1000 * image.height)))
    rgb = list(image.getpixel((x, y)))  # type: ignore[arg-type]  # an RGB pixel is a tuple
    patch = image.crop((max(0, x - 12), max(0, y - 12), min(image.width, x + 13), min(image.height, y + 13)))
    output = patch.resize((150, 150), Image.Resampling.NEAREST)
    return {"point_2d": [round(px), round(py)], "rgb": rgb, "label": label, "img_idx": index}, output


OPERATIONS: dict[str, Callable[[dict[str, Any], Sequence[Callable[[], Image.Image]], str], Result]] = {
    "image_zoom_in_tool": zoom, "image_crop_tool": crop, "image_rotate_tool": rotate, "image_flip_tool": flip,
    "image_diff_tool": diff, "image_side_by_side_tool": side_by_side, "image_overlay_tool": overlay,
    "color_at_tool": color_at,
}


def run(name: str, arguments: dict[str, Any], images: Sequence[Callable[[], Image.Image]]) -> Result:
    """One tool's result fields (without its saved size) and its image, from RGB images addressed by index."""
    label = str(arguments.get("label", ""))
    if name in ("count_objects_tool", "find_color_tool"):
        return blobs(name, arguments, images, label)
    return OPERATIONS[name](arguments, images, label)
