"""OpenThinkIMG's model tools, named, shaped and worded as its workers: `grounding_dino` (GroundingDINO), `OCR`
(GOT-OCR2 in place of EasyOCR, `toolserver.perception.ocr`), `SegmentRegionAroundPoint` (SAM2) and `Point` (Molmo2
in place of Molmo-7B-D, `toolserver.perception.molmo2`). The networks
run on the node's model service (`toolserver.perception`), where the calls of every session meet in one batcher
per device.

- `grounding_dino`: `caption` (or `param`), `box_threshold` (default 0.3) and `text_threshold` (default 0.25, the
  defaults of the reference's test message); the text is the worker's detection dict as Python prints it:
  `{'boxes': [[x1, y1, x2, y2], …] (0-1), 'logits': […], 'phrases': […], 'size': [H, W]}`.
- `OCR`: `image` only; the text is the list of texts read, as Python prints it (`['1970', 'Sales']`).
- `SegmentRegionAroundPoint`: `param` holds points as `x="21.5" y="28.5"` (several: `x1=… y1=… x2=…`), in
  percent of the image; values above 100 are skipped. The answer is "Segmentation completed." and the picture of
  the mask, or "No valid points extracted.".
- `Point`: `param` names what to point to; the worker asks "Point to the {param} in the scene." and answers the
  model's text as it wrote it (points as the model writes them, in percent of the image).

A model that is not configured or whose weights are not on this host fails the call with a text naming the
setting to set; the reference's own failure texts are kept for errors inside the model.

Two hooks let a profile play its system's client around the workers: `source` (which image the worker is handed:
by default the one `image` names) and `reply` (how a `WorkerAnswer` becomes the call's answer: by default its text,
and its image when it has one; a failure without `ok`). OpenThinkIMG's rollout, for one, hands every worker the
newest image as a JPEG and writes an image field without an image back as the task's question.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import ToolFailure
from toolserver.perception.render import segmented
from toolserver.perception.service import ModelUnavailable, PerceptionFront
from toolserver.tools.args import ImageRef
from toolserver.tools.base import Tool, ToolContext, ToolOutput

SERVER_ERROR_MSG = "**NETWORK ERROR DUE TO HIGH TRAFFIC. PLEASE REGENERATE OR REFRESH THIS PAGE.**"
POINT_PROMPT = "Point to the {} in the scene."  # the Molmo worker's prompt
POINT = re.compile(r'x\d*=\s*\\?"?([0-9]+(?:\.[0-9]*)?)\\?"?\s*y\d*=\s*\\?"?([0-9]+(?:\.[0-9]*)?)\\?"?')


@dataclass
class WorkerAnswer:
    """What a worker answered: its text, its image (if any), whether its answer has an image field at all (the
    segmenting worker's does, empty on failure), and a code when it failed."""

    text: str
    image: Image.Image | None = None
    image_field: bool = False
    code: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


Source = Callable[[ToolContext, "str | int"], Image.Image]
Reply = Callable[[ToolContext, WorkerAnswer], ToolOutput]


def named_image(ctx: ToolContext, ref: str | int) -> Image.Image:
    return ctx.image(ref).pixels


def plain_reply(ctx: ToolContext, answer: WorkerAnswer) -> ToolOutput:
    if answer.code is not None:
        return ToolOutput.failure(answer.text, answer.code, **answer.meta)
    return ToolOutput(text=answer.text, images=[answer.image] if answer.image is not None else [], meta=answer.meta)


def model_front(ctx: ToolContext, name: str) -> PerceptionFront:
    front = (ctx.perception or {}).get(name)
    if front is None:
        raise ToolFailure(f"Error: the {name} model is not served by this server.", "model_unavailable")
    return front


def run_model(ctx: ToolContext, name: str, pixels: np.ndarray, params: dict) -> dict:
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


class ModelTool(Tool):
    lane = "heavy"

    def __init__(self, source: Source = named_image, reply: Reply = plain_reply) -> None:
        self.source = source
        self.reply = reply

    def pixels(self, ctx: ToolContext, ref: str | int) -> tuple[Image.Image, np.ndarray]:
        image = self.source(ctx, ref).convert("RGB")
        return image, np.asarray(image, dtype=np.uint8)


class GroundingDinoArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef
    caption: str | None = Field(default=None, description="What to find, e.g. `girl .` (several: `cat . dog .`).")
    param: str | None = Field(default=None, description="The caption, as OpenThinkIMG's callers name it.")
    box_threshold: float = Field(default=0.3, ge=0, le=1, description="Keep boxes scoring above this.")
    text_threshold: float = Field(default=0.25, ge=0, le=1, description="Words of the caption above this name a box.")


class GroundingDino(ModelTool):
    name = "grounding_dino"
    description = ("Detect the objects a caption describes with GroundingDINO: boxes (x1, y1, x2, y2, 0-1), their "
                   "scores and phrases, and the image size [H, W].")
    Args: type[BaseModel] = GroundingDinoArgs

    def run(self, ctx: ToolContext, args: GroundingDinoArgs) -> ToolOutput:
        caption = args.param if args.param is not None else args.caption
        if caption is None:
            raise ToolFailure("Error: grounding_dino needs a `caption` (or `param`).", "invalid_arguments")
        _, pixels = self.pixels(ctx, args.image)
        params = {"caption": caption, "box_threshold": args.box_threshold, "text_threshold": args.text_threshold}
        try:
            result = run_model(ctx, "grounding_dino", pixels, params)
        except RuntimeError as exc:
            return self.reply(ctx, WorkerAnswer(f"{SERVER_ERROR_MSG}\n\n({exc})", code="model_error"))
        return self.reply(ctx, WorkerAnswer(str(result), meta=result))


class OcrArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef


class Ocr(ModelTool):
    name = "OCR"
    description = "Extract the text of an image: a list of the text lines read, top to bottom."
    Args: type[BaseModel] = OcrArgs

    def run(self, ctx: ToolContext, args: OcrArgs) -> ToolOutput:
        _, pixels = self.pixels(ctx, args.image)
        try:
            result = run_model(ctx, "ocr", pixels, {})
        except RuntimeError as exc:
            return self.reply(ctx, WorkerAnswer(f"Error when ocr: {exc}", code="model_error"))
        return self.reply(ctx, WorkerAnswer(str(result["texts"]), meta={"texts": result["texts"]}))


class SegmentArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef
    param: str = Field(description='Points in percent of the image: `x="21.5" y="28.5"` (several: `x1="…" y1="…" '
                                   'x2="…" y2="…"`).')


class SegmentRegionAroundPoint(ModelTool):
    name = "SegmentRegionAroundPoint"
    description = "Segment the region around the given points with SAM2 and show the mask on the image."
    Args: type[BaseModel] = SegmentArgs

    def run(self, ctx: ToolContext, args: SegmentArgs) -> ToolOutput:
        image, pixels = self.pixels(ctx, args.image)
        points = extract_points(args.param, *image.size)
        if not points:
            return self.reply(ctx, WorkerAnswer("No valid points extracted.", image_field=True, code="no_points"))
        try:
            result = run_model(ctx, "sam2", pixels, {"points": points})
            edited = segmented(image, np.asarray(result["mask"]), points)
        except (RuntimeError, ValueError) as exc:
            return self.reply(ctx, WorkerAnswer(f"Error when using sam to SAMAroundPoint: {exc}", image_field=True,
                                                code="model_error"))
        return self.reply(ctx, WorkerAnswer("Segmentation completed.", edited, image_field=True,
                                            meta={"points": [list(p) for p in points], "score": result["score"]}))


class PointArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef
    param: str = Field(description="What to point to, e.g. `red car`: the model is asked \"Point to the {param} in "
                                   "the scene.\"")


class Point(ModelTool):
    name = "Point"
    description = ("Point to what `param` names with Molmo2: the model's answer as it writes it, its points in "
                   "percent of the image.")
    Args: type[BaseModel] = PointArgs

    def run(self, ctx: ToolContext, args: PointArgs) -> ToolOutput:
        _, pixels = self.pixels(ctx, args.image)
        prompt = POINT_PROMPT.format(args.param)
        try:
            result = run_model(ctx, "point", pixels, {"prompt": prompt})
        except RuntimeError as exc:
            return self.reply(ctx, WorkerAnswer(f"Error when using molmo to point: {exc}", code="model_error"))
        return self.reply(ctx, WorkerAnswer(str(result["text"]), meta={"prompt": prompt}))
