"""ARM-Thinker's `image_zoom_in_tool`, both variants, reproduced with their validation order and texts.

Both work on the `fetch_image` view (the image smart-resized with factor 28) and crop *that*, not the
original: that is what the reference does (InternLM/ARM-Thinker @ 96b1baf, `verl/tools/image_zoom_in_tool.py`
and `verl/tools/image_zoom_in_tool_qwen3vl.py`). `meta.box_original` still
reports the region in original pixels.

Deliberate deviations (a robust server must not crash where the reference would raise):
- `bbox_2d` that is not a list (e.g. a number) gets the "must be a list of 4 numbers" text instead of a
  TypeError escaping the tool.
- EXIF orientation is applied at upload (qwen-vl-utils ignores it); for photos without an orientation
  tag the pixels are identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from PIL import Image
from pydantic import BaseModel, Field

from toolserver.errors import ToolFailure
from toolserver.formats.hermes import HERMES
from toolserver.memorymap import ImageEntry
from toolserver.profiles.base import Profile, tools_by_name
from toolserver.profiles.qwen3_vl import Qwen3Zoom, Qwen3ZoomArgs
from toolserver.profiles.qwen_family import arm_adjust_box, fetch_image_view, qwen3_crop_and_resize, qwen3_expand_box
from toolserver.resample import resize_bicubic
from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.tools.doc_pages import DocPageByIndex, DocPageSearch
from toolserver.tools.validators import validators

SUCCESS_TAIL = (
    "Continue your reasoning process within `<think>...</think>`. If needed, you can continue to call "
    "available tools within `<tool_call>...</tool_call>`. If your final response to the original question "
    "is confirmed, put your final answer or judgment within `<answer>...</answer>`."
)
FETCH_IMAGE_RULE = "qwen-vl-utils fetch_image, factor 28, default bounds, bicubic"
EXAMPLE_CALL = (
    '<tool_call>\n{{"name": "image_zoom_in_tool", "arguments": {{"image": "original_image", '
    '"bbox_2d": [100, 100, 900, 900]}}}}\n</tool_call>'
)  # the doubled braces are what the reference emits (plain string, not an f-string)


class ArmZoomArgs(BaseModel):
    image: str = Field(
        description="The image to zoom in on (e.g., `original_image`, `observation_1`, `observation_2`, ...)."
    )
    bbox_2d: list[Annotated[float, Field(ge=0, le=1000)]] = Field(
        min_length=4, max_length=4,
        description="Bounding box [x1, y1, x2, y2] with values between 0 and 1000, where (x1, y1) = top-left, "
        "(x2, y2) = bottom-right.",
    )


def check_rel1000_box(bbox: Any) -> tuple[float, float, float, float]:
    """ARM-Thinker's bbox checks 2–5, in order, with its texts."""
    if not bbox or not hasattr(bbox, "__len__") or len(bbox) != 4:
        raise ToolFailure(f"Error: bbox_2d must be a list of 4 numbers, got {bbox}.", "invalid_box")
    try:
        values = [float(v) for v in bbox]
    except (ValueError, TypeError):
        raise ToolFailure(f"Error: bbox_2d contains non-numeric values: {bbox}.", "invalid_box") from None
    for i, v in enumerate(values):
        if not (0 <= v <= 1000):
            raise ToolFailure(f"Error: bbox_2d[{i}]={v} out of range [0,1000], full bbox={bbox}.", "invalid_box")
    x1, y1, x2, y2 = values
    if x1 >= x2 or y1 >= y2:
        raise ToolFailure(f"Error: bbox_2d must satisfy x1<x2 and y1<y2, got {bbox}.", "invalid_box")
    return x1, y1, x2, y2


def view_box_to_original(box: Sequence[float], view: Image.Image, entry: ImageEntry) -> list[int]:
    sx, sy = entry.size[0] / view.width, entry.size[1] / view.height
    return [round(box[0] * sx), round(box[1] * sy), round(box[2] * sx), round(box[3] * sy)]


class ArmZoom(Tool):
    name = "image_zoom_in_tool"
    description = ("Zoom in on a region of an image using relative coordinates in [0, 1000]. For example, to "
                   "zoom in on the center 50%, use [250, 250, 750, 750].")
    Args = ArmZoomArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        image_key = args.get("image")
        if not image_key:
            raise ToolFailure("Error: image parameter is missing.", "invalid_arguments")
        bbox = args.get("bbox_2d")
        x1, y1, x2, y2 = check_rel1000_box(bbox)
        entry = ctx.find(image_key) if isinstance(image_key, str) else None
        if entry is None:
            raise ToolFailure(
                f"Error processing image zoom-in: Cannot resolve image key '{image_key}'. Current images you have "
                f"are: {ctx.keys}. You can call this tool like this: {EXAMPLE_CALL}", "unknown_image")
        try:
            view = ctx.view(entry, FETCH_IMAGE_RULE, fetch_image_view)
        except ValueError as exc:
            raise ToolFailure(f"Error processing image zoom-in: {exc}", "invalid_image") from None
        w, h = view.size
        final = arm_adjust_box((x1 / 1000 * w, y1 / 1000 * h, x2 / 1000 * w, y2 / 1000 * h), w, h)
        if final is None:
            raise ToolFailure(
                f"Error: crop failed after adjustment, original bbox={bbox}. The specified region is invalid or "
                "results in a crop smaller than 28x28 pixels. Please provide a larger valid region.", "invalid_box")
        cropped = view.crop((final[0], final[1], final[2], final[3]))
        scale = 1.0
        if min(cropped.width, cropped.height) < 224:
            scale = 2.0
            cropped = resize_bicubic(cropped, (int(cropped.width * 2.0), int(cropped.height * 2.0)))
        # Quirk kept: the reference names the result `observation_{len(imgs_map)}`, which differs from the
        # registered key when a session has several input images.
        text = (f"This is the zoom-in image `observation_{len(ctx.images)}`(zoomed in on the image {image_key}) "
                f"after your tool call.\n{SUCCESS_TAIL}")
        meta = {"source": entry.key, "view_size": [w, h], "box_view": final,
                "box_original": view_box_to_original(final, view, entry), "scale": scale,
                "registered_key": ctx.observation_key()}
        return ToolOutput(text=text, images=[cropped], meta=meta)


class ArmZoomQwen3Args(Qwen3ZoomArgs):
    # Qwen-Agent's arguments; ARM-Thinker's config adds the range to the box description.
    bbox_2d: list[float] = Field(
        min_length=4, max_length=4,
        description=f"{Qwen3ZoomArgs.model_fields['bbox_2d'].description}. Values should be in the range [0, 1000].",
    )


def arm_sorted_images(ctx: ToolContext) -> list[ImageEntry]:
    """ARM-Thinker's index order: `original_image`, then `observation_N` by N, every other key last."""

    def order(entry: ImageEntry) -> tuple[int, int]:
        if entry.key == "original_image":
            return (0, 0)
        if entry.key.startswith("observation_"):
            try:
                return (1, int(entry.key.split("_")[1]))
            except ValueError:
                return (2, 0)
        return (2, 0)

    return sorted(ctx.images, key=order)


class ArmZoomQwen3(Tool):
    name = "image_zoom_in_tool"
    description = Qwen3Zoom.description
    Args = ArmZoomQwen3Args
    raw_arguments = True

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        img_idx = args.get("img_idx")
        if img_idx is None:
            raise ToolFailure("Error: img_idx parameter is missing.", "invalid_arguments")
        try:
            img_idx = int(img_idx)
        except (ValueError, TypeError, OverflowError):
            raise ToolFailure(f"Error: img_idx must be an integer, got {img_idx}.", "invalid_arguments") from None
        bbox = args.get("bbox_2d")
        x1, y1, x2, y2 = check_rel1000_box(bbox)
        images = arm_sorted_images(ctx)
        if not images:
            raise ToolFailure(f"Cannot resolve image at index {img_idx}. No images found in response_store.",
                              "unknown_image")
        if img_idx < 0 or img_idx >= len(images):
            raise ToolFailure(f"Cannot resolve image at index {img_idx}. Available indices: 0 to {len(images) - 1}.",
                              "unknown_image")
        entry = images[img_idx]
        try:
            view = ctx.view(entry, FETCH_IMAGE_RULE, fetch_image_view)
            w, h = view.size
            box = qwen3_expand_box(x1 / 1000.0 * w, y1 / 1000.0 * h, x2 / 1000.0 * w, y2 / 1000.0 * h, w, h)
            cropped = qwen3_crop_and_resize(view, box)
        except ValueError as exc:
            raise ToolFailure(str(exc), "invalid_box") from None
        except Exception as exc:
            raise ToolFailure(f"Error processing image zoom-in: {exc}", "tool_error") from None
        text = (f"This is the zoom-in image from image at index {img_idx}. "
                f"The returned image is at index {len(ctx.images)}.")
        meta = {"source": entry.key, "view_size": [w, h], "box_view": box,
                "box_original": view_box_to_original(box, view, entry), "label": args.get("label", "")}
        return ToolOutput(text=text, images=[cropped], meta=meta)


# ARM-Thinker's NOT_ALLOWED_TOOL_CALL_MESSAGE, sent once the turn budget is spent.
ARM_LIMIT_MESSAGE = (
    "\n\n**Important Requirement:**\nYou have reached the maximum number of tool calls and are not allowed to "
    "call any more tools. Please reason on the current situation and **must** give your final answer or judgment "
    "within `<answer>...</answer>`."
)

PROFILES = (
    Profile("arm-thinker", "ARM-Thinker: image_zoom_in_tool by image key on the fetch_image view (rel 0-1000), "
            "document page retrieval and the instruction-following validators.",
            tools_by_name(ArmZoom(), DocPageSearch(arm_literal=True), DocPageByIndex(arm_literal=True),
                          *validators(strict=False, arm_errors=True)),
            limit_message=ARM_LIMIT_MESSAGE, call_format=HERMES),
    Profile("arm-thinker-qwen3vl", "ARM-Thinker's Qwen3-VL variant: image_zoom_in_tool with img_idx and label.",
            tools_by_name(ArmZoomQwen3(), *validators(strict=False, arm_errors=True)),
            limit_message=ARM_LIMIT_MESSAGE, call_format=HERMES),
)
