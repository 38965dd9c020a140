"""Pixel-Reasoner's tools (profile `pixel-reasoner`), as verl-tool's tool server runs them
(TIGER-AI-Lab/verl-tool@980962b, `verl_tool/servers/tools/pixel_reasoner.py`).

What the reference's tools see and return:
- Its images are numbered from 1 over the whole trajectory: the inputs, then every image a call returned.
- An input reaches the tool server as the agent loop sends it: the image the model saw (the dataset's
  qwen-vl-utils resize, our profile view) JPEG-encoded at Pillow's default quality (75), then decoded.
- A result is `process_image({"image": crop})` — verl-tool's own `fetch_image`: transparency on white, then
  smart_resize with factor 28, 4..5120 tokens and no aspect-ratio check, Pillow's default (bicubic) resize —
  then JPEG-encoded at quality 75. The model, and any later call, sees the decoded JPEG; so do we: that is
  the image registered in the session.
- `crop_image` (also called `zoom_in` and `crop_image_normalized`): a box counts as normalised when all four
  values are below 1, otherwise as pixels of the target image; 0.1 of the image (at most 600 px) is added on
  every side, the result clamped to the image and truncated to integers.
- `select_frames`: each frame goes through the same crop with the box (0, 0, 1, 1). That box is not below 1
  everywhere, so it is read as pixels: each "frame" is the top-left corner of the image, 0.1 of each side
  plus one pixel (at most 601 px), enlarged to at least 4 tokens. That is what the reference returns, so it
  is what this profile returns (docs/decisions.md); the default profile's `select_frames` returns whole frames.
Texts, including every failure, are the reference's; Python's own exception texts come through as they do
there (`Error processing image: division by zero` for a box of zero width). One deviation: `select_frames`
takes at most 64 frames a call (the reference has no limit; a long list would tie up a worker).
"""

from __future__ import annotations

import io
from typing import Any

from PIL import Image
from pydantic import BaseModel, Field

from toolserver.arguments import ArgumentStyle
from toolserver.errors import ToolFailure
from toolserver.formats.pixel_reasoner import PIXEL_REASONER
from toolserver.geometry import Coords
from toolserver.memorymap import ImageEntry
from toolserver.profiles.base import Profile, tools_by_name
from toolserver.profiles.qwen_family import agent_smart_resize
from toolserver.resample import resize_bicubic
from toolserver.tools.base import Tool, ToolContext, ToolOutput

FACTOR = 28
MIN_PIXELS = 4 * 28 * 28
MAX_PIXELS = 5120 * 28 * 28
WHOLE_IMAGE = (0, 0, 1, 1)  # select_frames' crop box (read as pixels, see the module docstring)
MAX_SELECTED = 64  # ours: the reference takes any number (its prompt asks for at most 8)


class PixelCropArgs(BaseModel):
    bbox_2d: list[float] = Field(description="coordinates for bounding box of the area you want to zoom in. minimum "
                                 "value is 0 and maximum value is the width/height of the image.")
    target_image: float = Field(description="The index of the image to crop. Index from 1 to the number of images. "
                                "Choose 1 to operate on original image.")


class SelectFramesArgs(BaseModel):
    target_frames: list[int] = Field(description="List of frame indices to select from the video (no more than 8 "
                                     "frames in total).", json_schema_extra={"items": {
                                         "type": "integer", "description": "Frame index from 1 to 16."}})


def jpeg_encode(image: Image.Image) -> tuple[Image.Image, bytes]:
    """What verl-tool sends back: the image saved as JPEG with Pillow's defaults; and those bytes, opened for
    decoding. Pillow decodes on first access to the pixels: a result that is only sent (and held as its bytes)
    is never decoded here; one that is read again decodes to exactly what the model decodes."""
    if image.mode != "RGB":
        image = image.convert("RGB")
    buf = io.BytesIO()
    image.save(buf, format="JPEG")
    data = buf.getvalue()
    return Image.open(io.BytesIO(data)), data


def jpeg_round_trip(image: Image.Image) -> Image.Image:
    """What the model gets back from verl-tool: the image saved as JPEG with Pillow's defaults, decoded."""
    decoded = jpeg_encode(image)[0]
    decoded.load()  # a view is shared by later calls: decoded once, here
    return decoded


def fetch_image(image: Image.Image) -> Image.Image:
    """verl-tool's `vision_process.fetch_image` for a PIL image: to RGB (RGBA on white), smart_resize, resize."""
    if image.mode == "RGBA":
        rgb = Image.new("RGB", image.size, (255, 255, 255))
        rgb.paste(image, mask=image.split()[3])
    else:  # RGB already: the reference's convert("RGB") is a copy of the same pixels, not made here
        rgb = image if image.mode == "RGB" else image.convert("RGB")
    width, height = rgb.size
    new_h, new_w = agent_smart_resize(height, width, factor=FACTOR, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    return resize_bicubic(rgb, (new_w, new_h))  # Pillow's default filter for RGB


def crop(image: Image.Image, bbox: Any, padding: tuple[float, float] = (0.1, 0.1)) -> tuple[Image.Image, tuple]:
    """The reference's crop: padded, clamped to [0, 1], truncated; returns the crop and its pixel box."""
    img_x, img_y = image.size
    pad_x, pad_y = min(padding[0], 600.0 / img_x), min(padding[1], 600.0 / img_y)
    if bbox[0] < 1 and bbox[1] < 1 and bbox[2] < 1 and bbox[3] < 1:
        x1, y1 = float(bbox[0]) - pad_x, float(bbox[1]) - pad_y
        x2, y2 = float(bbox[2]) + pad_x, float(bbox[3]) + pad_y
    else:
        x1, y1 = float(bbox[0]) / img_x - pad_x, float(bbox[1]) / img_y - pad_y
        x2, y2 = float(bbox[2]) / img_x + pad_x, float(bbox[3]) / img_y + pad_y
    x1, y1, x2, y2 = (min(max(0, v), 1) for v in (x1, y1, x2, y2))
    box = (int(x1 * img_x), int(y1 * img_y), int(x2 * img_x), int(y2 * img_y))
    return image.crop(box), box


def crop_encoded(source: Image.Image, bbox: Any) -> tuple[Image.Image, bytes, tuple[int, int, int, int]]:
    """What a call returns for one image: the crop through verl-tool's fetch_image as JPEG (decoded, and the
    very bytes the reference sends), and the box."""
    cropped, box = crop(source, bbox)
    decoded, data = jpeg_encode(fetch_image(cropped))
    return decoded, data, box


def crop_result(source: Image.Image, bbox: Any) -> tuple[Image.Image, tuple[int, int, int, int]]:
    """The decoded result of `crop_encoded` and its box."""
    decoded, _, box = crop_encoded(source, bbox)
    return decoded, box


def input_rule(entry: ImageEntry) -> str:
    width, height = entry.view_size or entry.size
    return f"pixel-reasoner input: bicubic to {width}x{height}, JPEG quality 75"


def source_image(ctx: ToolContext, entry: ImageEntry) -> Image.Image:
    """The image as verl-tool's server holds it: an input as the agent loop sends it, a result as returned."""
    if not entry.is_input or ctx.inputs_are_views:
        # A result is registered as the decoded JPEG already; an input uploaded as the view is what the agent
        # loop sends (its JPEG, decoded), so it is held as it is, with no second resize or JPEG round trip.
        return entry.pixels
    if entry.view_size is None:
        raise ValueError(entry.view_error or "the image has no model view")
    view_size = entry.view_size

    def compute(pixels: Image.Image) -> Image.Image:
        shown = pixels if pixels.size == view_size else resize_bicubic(pixels, view_size)
        return jpeg_round_trip(shown)

    return ctx.view(entry, input_rule(entry), compute)


def check_arguments(args: Any) -> None:
    """The reference's check before it dispatches a call (the arguments of a direct call meet it here)."""
    if not isinstance(args, dict):
        raise ToolFailure("'arguments' should be a dictionary of parameters key-value pairs, got "
                          f"{type(args)}.", "invalid_arguments")


def _to_original(box: tuple[int, int, int, int], seen: tuple[int, int], original: tuple[int, int]) -> list[int]:
    """The box in the session image's own pixels (an input's view is a resize of it), for the inspector."""
    sx, sy = original[0] / seen[0], original[1] / seen[1]
    return [round(box[0] * sx), round(box[1] * sy), round(box[2] * sx), round(box[3] * sy)]


def _int_or_as_is(value: Any) -> Any:
    try:  # the reference tries int() and keeps the value when it fails
        return int(value)
    except Exception:
        return value


class PixelCrop(Tool):
    name = "crop_image"
    description = "Zoom in on the image based on the bounding box coordinates."
    Args = PixelCropArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        check_arguments(args)
        missing = [p for p in ("bbox_2d", "target_image") if p not in args]
        target = _int_or_as_is(args["target_image"]) if "target_image" in args else None
        count = len(ctx.images)
        if missing:
            raise ToolFailure(f"Missing parameters: {', '.join(missing)}", "invalid_arguments")
        bbox = args["bbox_2d"]
        if not isinstance(bbox, list) or len(bbox) != 4:
            raise ToolFailure("Invalid bbox_2d format. It should be a list of four numbers.", "invalid_box")
        if not isinstance(target, int) or target <= 0 or target > count:
            raise ToolFailure("Invalid target_image index. It should be an integer between 1 and the number of "
                              f"previous images ({count}).", "unknown_image")
        entry = ctx.images[target - 1]
        try:
            source = source_image(ctx, entry)
            shown, data, box = crop_encoded(source, bbox)
        except Exception as exc:
            raise ToolFailure(f"Error processing image: {exc}", "tool_error") from None
        width, height = shown.size
        return ToolOutput(text=f"Here is the cropped image. (Image Size: {width}x{height})\n<image>", images=[shown],
                          encoded=[(data, "image/jpeg")],
                          meta={"source": entry.key, "box_source": list(box),
                                "box_original": _to_original(box, source.size, entry.size)})


class PixelSelectFrames(Tool):
    name = "select_frames"
    description = "Select frames from a video."
    Args = SelectFramesArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        check_arguments(args)
        if "target_frames" not in args:
            raise ToolFailure("Missing parameters: target_frames", "invalid_arguments")
        frames = args["target_frames"]
        count = len(ctx.images)
        if not isinstance(frames, list):
            raise ToolFailure("Invalid target_frames format. It should be a list of integers.", "invalid_arguments")
        if not all(isinstance(f, int) and 1 <= f <= count for f in frames):
            raise ToolFailure("Invalid target_frames indices. Each index should be an integer between 1 and the "
                              f"number of previous images ({count}).", "unknown_image")
        if len(frames) > MAX_SELECTED:
            raise ToolFailure(f"Too many target_frames ({len(frames)}): at most {MAX_SELECTED} at once.",
                              "invalid_arguments")
        try:
            results = [crop_encoded(source_image(ctx, ctx.images[f - 1]), WHOLE_IMAGE) for f in frames]
            shown = [decoded for decoded, _, _ in results]
            width, height = shown[0].size
        except Exception as exc:
            raise ToolFailure(f"Error processing frames: {exc}", "tool_error") from None
        text = (f"Here are the selected frames. (Frame Size: {width}x{height}, Numbered 1 to {len(shown)}):"
                + "<image>" * len(shown))
        return ToolOutput(text=text, images=shown, encoded=[(data, "image/jpeg") for _, data, _ in results],
                          meta={"sources": [ctx.images[f - 1].key for f in frames]})


PROFILES = (
    Profile("pixel-reasoner", "Pixel-Reasoner (verl-tool): crop_image (alias zoom_in, crop_image_normalized) and "
            "select_frames over every image so far, numbered from 1; results as JPEG at quality 75.",
            tools_by_name(PixelCrop(), PixelSelectFrames()), coords=Coords.ABS_VIEW, call_format=PIXEL_REASONER,
            arguments=ArgumentStyle.PYTHON, unknown_tool_template="Unknown action name.",
            aliases={"zoom_in": "crop_image", "crop_image_normalized": "crop_image"}, reads_originals=False),
)
