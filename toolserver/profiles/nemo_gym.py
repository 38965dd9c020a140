"""NeMo Gym's image tools (profile `nemo-gym`): NVIDIA-NeMo/Gym @ 07d6b0d0 (added in 4a582181, PR #2624), the ten
tools of `resources_servers/image_tools/base.py` as its image-tools agent runs them
(`responses_api_agents/image_tools_agent/app.py`, config `configs/image_tools_agent.yaml`), exact: their schemas as
the task's system prompt shows them (`resources_servers/image_tools/data/example.jsonl`), their checks, texts and
arithmetic (`toolserver.profiles.nemo_gym_ops`), and the turn's state.

- Images are addressed by `img_idx`: the inputs in order, then each tool's image as the next index (the result
  says which, `new_img_indices`). A tool's image is saved as a JPEG at quality 95 (at most 4096 px a side) and
  read back as that JPEG by later calls; the model is shown it re-encoded as the agent sends it, a JPEG at
  Pillow's default quality (75): the session keeps the first, the result delivers the second.
- Boxes are 0–1000 unless a value's magnitude exceeds 1000 (then pixels); the zoom grows a box under 32 px to a
  32 px short side, magnifies by `factor` (3.0), snaps to the 32 px grid within [512², 1024²] pixels, bicubic.
- A call the session already made gets `You already requested this exact tool call…`; a zoom or crop box of the
  same tool and image overlapping an earlier one by IoU ≥ 0.5 gets `This region heavily overlaps…`; after either,
  the next call is refused (`No more tool calls are allowed…`). After 20 calls the next one is answered with the
  forced final prompt, and the one after that refused. Every failure ends the episode (`NemoGymFormat.ends`).
- The agent's rewards (+0.02 a call, −0.02 a repeat, −0.05 a failure; its 0.20 cap) are the caller's: each
  result reports its own as `meta.reward` (and a repeat as `meta.repeat`, an overlap's `meta.iou`).

Deviations (docs/decisions.md): an unknown tool name is answered before the state checks (there the forced final
turn and the refusal after a repeat come first); input images are read upright (their EXIF orientation applied,
as for every profile); the state is read from the session's call log, so it is lost if that log drops records.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from PIL import Image
from pydantic import BaseModel, Field

from toolserver.arguments import ArgumentStyle
from toolserver.formats.nemo_gym import INVALID_REWARD, NEMO_GYM, render_system_prompt
from toolserver.memorymap import ImageEntry
from toolserver.profiles import nemo_gym_ops as ops
from toolserver.profiles.base import Alpha, Profile, tools_by_name
from toolserver.schema import strict_only
from toolserver.tools.base import Tool, ToolContext, ToolOutput

MAX_TOOL_CALLS = 20  # the agent config's max_tool_calls (its class default is 4; the shipped config says 20)
IOU_THRESHOLD = 0.5
SAVE_QUALITY, MAX_SIDE = 95, 4096  # crop_jpeg_quality, and `_save_image_output`'s cap
SUCCESS_REWARD, REPEAT_REWARD = 0.02, -0.02
BOX_TOOLS = ("image_zoom_in_tool", "image_crop_tool")
FORCED_FINAL = ("This is your FINAL turn. Based on the original images and any image tool results already "
                "provided, answer the original question now. Do not call any more tools.")
NO_MORE_CALLS = "No more tool calls are allowed. A final answer was required."
NO_IMAGES = "Image tools are unavailable because no source images were provided."
NOT_AN_OBJECT = "Tool arguments must be an object."
EXACT_REPEAT = "You already requested this exact tool call. Use the evidence you have and provide the final answer."
OVERLAP = ("This region heavily overlaps a previous {tool} result (IoU={iou:.2f}). Use the evidence you have and "
           "provide the final answer.")
IDX = "Zero-based index of the image to {}."


def _d(text: str, strict: dict[str, Any] | None = None) -> Any:
    return Field(description=text, json_schema_extra=strict)


def _opt(text: str, strict: dict[str, Any] | None = None) -> Any:
    return Field(default=None, description=text, json_schema_extra=strict)


# The reference's arrays have untyped items. Their strict form (ours: the system prompt shows the verbatim one) gives
# the items the type the description states, and the length where it states one, as OpenAI's strict subset needs.
def _numbers(count: int) -> dict[str, Any]:
    return strict_only(items={"type": "number"}, minItems=count, maxItems=count)


RGB = strict_only(items={"type": "integer"}, minItems=3, maxItems=3)


class _Args(BaseModel):
    """A tool's arguments as its schema shows them (the tool reads them raw, as the reference does)."""


class ZoomArgs(_Args):
    bbox_2d: list[Any] = _d("Bounding box of the region to inspect, formatted as [x1, y1, x2, y2]. Coordinates must "
                            "be normalized integers in the 0-1000 range, where (0,0) is the top-left of the image and "
                            "(1000,1000) is the bottom-right. Use a tight box around the relevant region.", _numbers(4))
    factor: float | None = _opt("Magnification factor applied to the cropped region. Default 3. Use 2 for context, "
                                "4-6 for very fine detail.")
    label: str = _d("Short natural-language description of the region being zoomed into.")
    img_idx: int = _d("Zero-based index of the image to inspect. Use 0 when there is only one image.")


class RotateArgs(_Args):
    degrees: float = _d("Counter-clockwise rotation angle in degrees (e.g. 90, 180, 45).")
    label: str = _d('Short description of why the rotation helps (e.g. "candidate B turned upright").')
    img_idx: int = _d(IDX.format("rotate"))


class FlipArgs(_Args):
    axis: str = _d('Mirror axis: "horizontal" (left-right mirror) or "vertical" (top-bottom mirror).')
    label: str = _d("Short description of the comparison the flip enables.")
    img_idx: int = _d(IDX.format("flip"))


class DiffArgs(_Args):
    img_idx_a: int = _d("Zero-based index of the first image.")
    img_idx_b: int = _d("Zero-based index of the second image.")
    label: str = _d("Short description of what is being compared.")


class SideBySideArgs(_Args):
    img_indices: list[Any] = _d("Array of zero-based image indices to place left-to-right (2-6 entries).",
                                strict_only(items={"type": "integer"}, minItems=2, maxItems=6))
    labels: list[Any] | None = _opt("Optional array of short captions, one per image, drawn onto the composite.",
                                    strict_only(items={"type": "string"}))
    label: str = _d("Short description of the comparison being made.")


class OverlayArgs(_Args):
    img_idx_a: int = _d("Zero-based index of the base image.")
    img_idx_b: int = _d("Zero-based index of the image blended on top.")
    alpha: float | None = _opt("Blend weight of the second image, between 0 and 1. Default 0.5.")
    label: str = _d("Short description of the alignment being checked.")


class CountArgs(_Args):
    color: list[Any] | None = _opt("Optional target color as [R, G, B] with each value 0-255. Omit to count all "
                                   "non-background shapes.", RGB)
    tolerance: int | None = _opt("Per-channel color tolerance 0-255. Default 40.")
    min_size: int | None = _opt("Ignore connected shapes smaller than this many pixels; raises the noise floor. "
                                "Default 30. Increase (100-300) when counting large shapes on busy or textured "
                                "backgrounds.")
    label: str = _d("Short description of what is being counted.")
    img_idx: int = _d(IDX.format("analyze"))


class FindColorArgs(_Args):
    color: list[Any] = _d("Target color as [R, G, B], each value 0-255.", RGB)
    tolerance: int | None = _opt("Per-channel color tolerance 0-255. Default 40.")
    label: str = _d("Short description of what the color search is for.")
    img_idx: int = _d(IDX.format("search"))


class ColorAtArgs(_Args):
    point_2d: list[Any] = _d("The point to sample, formatted as [x, y] in normalized 0-1000 coordinates.", _numbers(2))
    label: str = _d("Short description of what is at the sampled point.")
    img_idx: int = _d(IDX.format("sample"))


class CropArgs(_Args):
    bbox_2d: list[Any] = _d("Bounding box of the region, formatted as [x1, y1, x2, y2] in normalized 0-1000 "
                            "coordinates.", _numbers(4))
    label: str = _d("Short natural-language description of the region being cropped.")
    img_idx: int = _d(IDX.format("crop"))


# In the order the task's system prompt lists them.
SPECS: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("image_zoom_in_tool", ZoomArgs, "Zoom into a rectangular region of an image and return the cropped, magnified "
     "image for closer inspection."),
    ("image_rotate_tool", RotateArgs, "Rotate an image counter-clockwise by the given angle (white background "
     "fills the corners) and return the rotated image. Useful for judging rotated patterns, views, and "
     "orientation questions."),
    ("image_flip_tool", FlipArgs, "Mirror an image horizontally or vertically and return the flipped image. Useful "
     "for mirror-image and symmetry questions."),
    ("image_diff_tool", DiffArgs, "Compute the pixel-level difference of two images (the second is resized to match "
     "the first). Returns difference statistics (mean difference, changed-pixel fraction, bounding box of the "
     "changed area) and a heatmap image highlighting what differs. Use to find where two similar images or "
     "regions disagree."),
    ("image_side_by_side_tool", SideBySideArgs, "Compose two to six images left-to-right into one image "
     "(optionally captioned) for direct visual comparison, e.g. lining up answer options next to the reference."),
    ("image_overlay_tool", OverlayArgs, "Blend two images on top of each other (the second is resized to match the "
     "first) and return the blended image. Use to check alignment, completion, or whether two shapes coincide."),
    ("count_objects_tool", CountArgs, "Count connected shapes (blobs) in an image. If a color is given, counts "
     "blobs of approximately that color; otherwise counts everything that differs from the background "
     "(background = the dominant color at the image border). Returns the count, each blob's bounding box and "
     "center (normalized 0-1000 coordinates), and a copy of the image with the found blobs numbered. Counts from "
     "this tool are more reliable than counting by eye in crowded images."),
    ("find_color_tool", FindColorArgs, "Locate all regions of a given color in an image. Returns how many separate "
     "regions match, their bounding boxes (normalized 0-1000), the fraction of the image that matches, and a mask "
     "image with the matching pixels highlighted."),
    ("color_at_tool", ColorAtArgs, "Read the exact [R, G, B] color at one point of an image, and return a magnified "
     "patch around that point so the pixel can be seen in context. Use when precise color identity matters (e.g. "
     "distinguishing two similar shades)."),
    ("image_crop_tool", CropArgs, "Crop a rectangular region of an image at its original scale and return it as a "
     "new image. Like image_zoom_in_tool but without magnification; prefer it when the region is large and only "
     "isolation, not magnification, is needed."),
)
NAMES = frozenset(name for name, _, _ in SPECS)


@dataclass
class State:
    """What the environment's metadata holds after the calls so far (its successful ones and its forced turn)."""

    signatures: list[str] = field(default_factory=list)
    boxes: dict[str, list[list[float]]] = field(default_factory=dict)
    calls: int = 0
    final_required: bool = False


def signature(name: str, arguments: Any) -> str:
    return json.dumps({"name": name, "arguments": arguments}, sort_keys=True, ensure_ascii=False, default=str)


def state_of(records: Sequence[str]) -> State:
    """The state the session's call log implies: each successful call adds its signature (and a zoom or crop its
    box), and says whether the next call must be refused (after a repeat); the forced final turn says so too."""
    state = State()
    for line in records:
        record = json.loads(line)
        meta = record.get("meta") or {}
        if record.get("tool") not in NAMES or not record.get("ok") or "reward" not in meta:
            continue
        if meta.get("final_required"):
            state.final_required = True
            continue
        arguments = record.get("arguments")
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        state.signatures.append(signature(record["tool"], arguments))
        if record["tool"] in BOX_TOOLS:
            key = f"{record['tool']}:{int(arguments.get('img_idx', 0))}"
            state.boxes.setdefault(key, []).append(ops.coerce_bbox(arguments.get("bbox_2d")) or [])
        state.calls += 1
        state.final_required = "repeat" in meta
    return state


def saved(image: Image.Image) -> tuple[Image.Image, bytes]:
    """The tool's image as the environment saves it (a JPEG at quality 95, at most 4096 px a side) and reads it
    back, and the JPEG the agent shows the model (that image saved again at Pillow's default quality)."""
    if max(image.size) > MAX_SIDE:
        image = image.copy()
        image.thumbnail((MAX_SIDE, MAX_SIDE), resample=Image.Resampling.LANCZOS)
    first = io.BytesIO()
    image.save(first, format="JPEG", quality=SAVE_QUALITY)
    kept = Image.open(io.BytesIO(first.getvalue())).convert("RGB")
    shown = io.BytesIO()
    kept.save(shown, format="JPEG")
    return kept, shown.getvalue()


class NemoGymTool(Tool):
    raw_arguments = True

    def __init__(self, name: str, args: type[BaseModel], description: str):
        self.name, self.Args, self.description = name, args, description

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        state = state_of(ctx.calls)
        if state.final_required:
            return _failed(NO_MORE_CALLS)
        if state.calls >= MAX_TOOL_CALLS:
            return ToolOutput(FORCED_FINAL, meta={"reward": 0.0, "final_required": True})
        if not ctx.images:
            return _failed(NO_IMAGES)
        if not isinstance(args, dict):
            return _failed(NOT_AN_OBJECT)
        images = [partial(_pixels, entry) for entry in ctx.images]
        try:
            repeat = self._repeat(state, args)
            fields, output = ops.run(self.name, args, images)
            kept, shown = saved(output)
        except Exception as exc:  # the environment shows any exception's text
            return _failed(f"{self.name} failed: {exc}")
        fields["size"] = list(kept.size)
        result = {"ok": True, **fields, "new_img_indices": [len(ctx.images)]}
        meta: dict[str, Any] = {"reward": SUCCESS_REWARD}
        if repeat is not None:
            result["warning"] = EXACT_REPEAT if repeat == "exact" else OVERLAP.format(tool=self.name, iou=repeat)
            meta = {"reward": REPEAT_REWARD, "repeat": "exact" if repeat == "exact" else "overlap"}
            if repeat != "exact":
                meta["iou"] = repeat
        return ToolOutput(json.dumps(result, ensure_ascii=False), images=[kept], encoded=[(shown, "image/jpeg")],
                          encoded_is_pixels=False, meta=meta)

    def _repeat(self, state: State, args: dict[str, Any]) -> str | float | None:
        """"exact" for a call made before, an IoU for a zoom or crop box overlapping an earlier one, else None;
        raising the environment's errors where it raises them (before the tool runs)."""
        exact = signature(self.name, args) in state.signatures
        overlap = None
        if self.name in BOX_TOOLS:
            bbox = ops.coerce_bbox(args.get("bbox_2d"))
            index = int(args.get("img_idx", 0))
            if bbox is None:
                raise ValueError("bbox_2d must be a list of four numbers")
            for earlier in state.boxes.get(f"{self.name}:{index}", []):
                if (iou := ops.bbox_iou(earlier, bbox)) >= IOU_THRESHOLD:
                    overlap = iou
                    break
        return "exact" if exact else overlap


def _pixels(entry: ImageEntry) -> Image.Image:
    return entry.pixels


def _failed(text: str) -> ToolOutput:
    return ToolOutput.failure(text, "tool_error", reward=INVALID_REWARD)


PROFILES = (
    Profile("nemo-gym", "NeMo Gym's image tools: zoom, crop, rotate, flip, diff, side by side, overlay, count, find "
            "and read colours, images by img_idx with each result the next, 0-1000 boxes, its texts and turn, exact.",
            tools_by_name(*(NemoGymTool(name, args, text) for name, args, text in SPECS)),
            call_format=NEMO_GYM, alpha=Alpha.DROP, arguments=ArgumentStyle.PYTHON,
            unknown_tool_template="Unknown tool name: {name}", reads_call_log=True),
)


def system_prompt() -> str:
    """The task's system prompt (`resources_servers/image_tools/data/example.jsonl`), its tool list written from
    this profile's schemas."""
    return render_system_prompt(PROFILES[0].openai_tools())
