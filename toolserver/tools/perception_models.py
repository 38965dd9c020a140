"""OpenThinkIMG's model tools, named, shaped and worded as its workers: `grounding_dino` (GroundingDINO), `OCR`
(GOT-OCR2 in place of EasyOCR, `toolserver.perception.ocr`) and `SegmentRegionAroundPoint` (SAM2). The networks
run on the node's model service (`toolserver.perception`), where the calls of every session meet in one batcher
per device.

- `grounding_dino`: `caption` (or `param`), `box_threshold` (default 0.3) and `text_threshold` (default 0.25, the
  defaults of the reference's test message); the text is the worker's detection dict as Python prints it:
  `{'boxes': [[x1, y1, x2, y2], …] (0-1), 'logits': […], 'phrases': […], 'size': [H, W]}`.
- `OCR`: `image` only; the text is the list of texts read, as Python prints it (`['1970', 'Sales']`).
- `SegmentRegionAroundPoint`: `param` holds points as `x="21.5" y="28.5"` (several: `x1=… y1=… x2=…`), in
  percent of the image; values above 100 are skipped. The answer is "Segmentation completed." and the picture of
  the mask, or "No valid points extracted.".

A model that is not configured or whose weights are not on this host fails the call with a text naming the
setting to set; the reference's own failure texts are kept for errors inside the model.
"""

from __future__ import annotations

import re

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import ToolFailure
from toolserver.perception.render import segmented
from toolserver.perception.service import ModelUnavailable, PerceptionFront
from toolserver.tools.args import ImageRef
from toolserver.tools.base import Tool, ToolContext, ToolOutput

SERVER_ERROR_MSG = "**NETWORK ERROR DUE TO HIGH TRAFFIC. PLEASE REGENERATE OR REFRESH THIS PAGE.**"
POINT = re.compile(r'x\d*=\s*\\?"?([0-9]+(?:\.[0-9]*)?)\\?"?\s*y\d*=\s*\\?"?([0-9]+(?:\.[0-9]*)?)\\?"?')


def model_front(ctx: ToolContext, name: str) -> PerceptionFront:
    front = (ctx.perception or {}).get(name)
    if front is None:
        raise ToolFailure(f"Error: the {name} model is not served by this server.", "model_unavailable")
    return front


def run_model(ctx: ToolContext, name: str, pixels: np.ndarray, params: dict) -> dict:
    import time

    front = model_front(ctx, name)
    timeout = None if ctx.deadline is None else max(0.0, ctx.deadline - time.monotonic())
    try:
        return front.run(pixels, params, timeout)
    except ModelUnavailable as exc:
        raise ToolFailure(f"Error: {exc}", "model_unavailable") from exc


def extract_points(param: str, width: int, height: int) -> list[tuple[float, float]]:
    """The reference's points: percent coordinates (each at most 100) scaled to pixels."""
    points = []
    for match in POINT.finditer(param):
        x, y = float(match.group(1)), float(match.group(2))
        if max(x, y) > 100:
            continue
        points.append((x / 100.0 * width, y / 100.0 * height))
    return points


class GroundingDinoArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef
    caption: str | None = Field(default=None, description="What to find, e.g. `girl .` (several: `cat . dog .`).")
    param: str | None = Field(default=None, description="The caption, as OpenThinkIMG's callers name it.")
    box_threshold: float = Field(default=0.3, ge=0, le=1, description="Keep boxes scoring above this.")
    text_threshold: float = Field(default=0.25, ge=0, le=1, description="Words of the caption above this name a box.")


class GroundingDino(Tool):
    name = "grounding_dino"
    lane = "heavy"
    description = ("Detect the objects a caption describes with GroundingDINO: boxes (x1, y1, x2, y2, 0-1), their "
                   "scores and phrases, and the image size [H, W].")
    Args = GroundingDinoArgs

    def run(self, ctx: ToolContext, args: GroundingDinoArgs) -> ToolOutput:
        entry = ctx.image(args.image)
        caption = args.param if args.param is not None else args.caption
        if caption is None:
            raise ToolFailure("Error: grounding_dino needs a `caption` (or `param`).", "invalid_arguments")
        pixels = np.asarray(entry.pixels.convert("RGB"), dtype=np.uint8)
        params = {"caption": caption, "box_threshold": args.box_threshold, "text_threshold": args.text_threshold}
        try:
            result = run_model(ctx, "grounding_dino", pixels, params)
        except RuntimeError as exc:
            return ToolOutput.failure(f"{SERVER_ERROR_MSG}\n\n({exc})", "model_error")
        return ToolOutput(text=str(result), meta={"source": entry.key, **result})


class OcrArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef


class Ocr(Tool):
    name = "OCR"
    lane = "heavy"
    description = "Extract the text of an image: a list of the text lines read, top to bottom."
    Args = OcrArgs

    def run(self, ctx: ToolContext, args: OcrArgs) -> ToolOutput:
        entry = ctx.image(args.image)
        pixels = np.asarray(entry.pixels.convert("RGB"), dtype=np.uint8)
        try:
            result = run_model(ctx, "ocr", pixels, {})
        except RuntimeError as exc:
            return ToolOutput.failure(f"Error when ocr: {exc}", "model_error")
        return ToolOutput(text=str(result["texts"]), meta={"source": entry.key, "texts": result["texts"]})


class SegmentArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef
    param: str = Field(description='Points in percent of the image: `x="21.5" y="28.5"` (several: `x1="…" y1="…" '
                                   'x2="…" y2="…"`).')


class SegmentRegionAroundPoint(Tool):
    name = "SegmentRegionAroundPoint"
    lane = "heavy"
    description = "Segment the region around the given points with SAM2 and show the mask on the image."
    Args = SegmentArgs

    def run(self, ctx: ToolContext, args: SegmentArgs) -> ToolOutput:
        entry = ctx.image(args.image)
        image = entry.pixels.convert("RGB")
        points = extract_points(args.param, *image.size)
        if not points:
            return ToolOutput.failure("No valid points extracted.", "no_points")
        pixels = np.asarray(image, dtype=np.uint8)
        try:
            result = run_model(ctx, "sam2", pixels, {"points": points})
            edited = segmented(image, np.asarray(result["mask"]), points)
        except (RuntimeError, ValueError) as exc:
            return ToolOutput.failure(f"Error when using sam to SAMAroundPoint: {exc}", "model_error")
        return ToolOutput(text="Segmentation completed.", images=[edited],
                          meta={"source": entry.key, "points": [list(p) for p in points],
                                "score": result["score"]})
