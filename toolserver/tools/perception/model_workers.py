"""OpenThinkIMG's model workers as its rollout drives them: `OCR`, `Point` and `SegmentRegionAroundPoint`
(`toolserver/tools/perception_models.py`, on the node's model service) handed the newest image as the rollout
sends it (`worker.worker_image`), their arguments read raw as each worker indexes them, their answers written back
through `worker.py`'s helpers (`docs/perception.md`, the model tools' contract):

- a missing `image` (or `param` for SAM) is the worker's HTTP 500: the tool manager's text (`SERVER_ERROR`);
- OCR answers a text without an image field: `text_reply`, or `text_answer` with its error texts
  ("Missing 'image' for the ocr input parameters.", "Error when ocr: …");
- Point answers a text without an image field: the model's text (`text_reply`), or "Error when using molmo to
  point: …" (`text_answer`); its `param` is formatted into the prompt whatever it is (None included, as Python's
  `format` writes it), a missing or None `image` is the HTTP 500;
- SAM answers an image field: `image_answer` with the segmented picture, or `fallback` (the task's question) where
  the field is empty ("No valid points extracted.", "Missing 'param' or 'image' in the input parameters.", its
  errors).

A model this server does not have (not configured, weights missing) is a worker that is not running: the rollout's
tool manager answers `Tool <name> not found.`, and so does the tool, with the reason in `meta["reason"]`.

SAM reads its points with its own pattern (`perception_models.extract_points`: `x…=` then `y…=`), not the drawing
workers' (`worker.worker_points`), as the two workers differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PIL import Image

from toolserver.errors import ToolFailure
from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.tools.perception.worker import (
    SERVER_ERROR,
    WorkerArgs,
    fallback,
    image_answer,
    text_answer,
    text_reply,
    worker_image,
)
from toolserver.tools.perception_models import (
    Ocr,
    OcrArgs,
    Point,
    PointArgs,
    SegmentArgs,
    SegmentRegionAroundPoint,
    WorkerAnswer,
)


def newest_image(ctx: ToolContext, ref: str | int) -> Image.Image:
    """Whatever `img_N` the action names, the rollout hands the worker its newest image (a JPEG, decoded)."""
    return worker_image(ctx)


def not_running(ctx: ToolContext, tool: Tool, run: Callable[[], ToolOutput]) -> ToolOutput:
    """`run()`, or the tool manager's answer for a worker that is not running where the model is unavailable."""
    try:
        return run()
    except ToolFailure as failure:
        if failure.code != "model_unavailable":
            raise
        return text_answer(ctx, f"Tool {tool.name} not found.", "model_unavailable", reason=failure.text)


def rollout_reply(ctx: ToolContext, answer: WorkerAnswer) -> ToolOutput:
    if answer.image is not None:
        return image_answer(answer.text, answer.image, **answer.meta)
    if answer.image_field:
        return fallback(ctx, answer.text, answer.code or "no_image", **answer.meta)
    if answer.code is not None:
        return text_answer(ctx, answer.text, answer.code, **answer.meta)
    return text_reply(ctx, answer.text, **answer.meta)


class WorkerOcr(Ocr):
    Args = OcrArgs
    raw_arguments = True

    def __init__(self) -> None:
        super().__init__(source=newest_image, reply=rollout_reply)

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        if not isinstance(args, dict) or "image" not in args:
            return text_answer(ctx, SERVER_ERROR.format(name=self.name), "invalid_arguments")
        if args["image"] is None:
            return text_answer(ctx, "Missing 'image' for the ocr input parameters.", "invalid_arguments")
        return not_running(ctx, self, lambda: super(WorkerOcr, self).run(ctx, OcrArgs.model_construct(
            image=args["image"])))


class WorkerPoint(Point):
    Args = WorkerArgs
    raw_arguments = True

    def __init__(self) -> None:
        super().__init__(source=newest_image, reply=rollout_reply)

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        # The worker reads `param` and decodes `image` before its try: either missing (or no image) is its HTTP 500.
        if not isinstance(args, dict) or "param" not in args or "image" not in args or args["image"] is None:
            return text_answer(ctx, SERVER_ERROR.format(name=self.name), "invalid_arguments")
        arguments = PointArgs.model_construct(image=args["image"], param=str(args["param"]))
        return not_running(ctx, self, lambda: super(WorkerPoint, self).run(ctx, arguments))


class WorkerSegmentRegionAroundPoint(SegmentRegionAroundPoint):
    Args = WorkerArgs
    raw_arguments = True

    def __init__(self) -> None:
        super().__init__(source=newest_image, reply=rollout_reply)

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        if not isinstance(args, dict) or "param" not in args or "image" not in args:
            return text_answer(ctx, SERVER_ERROR.format(name=self.name), "invalid_arguments")
        if args["param"] is None or args["image"] is None:
            return fallback(ctx, "Missing 'param' or 'image' in the input parameters.", "invalid_arguments")
        arguments = SegmentArgs.model_construct(image=args["image"], param=str(args["param"]))
        return not_running(ctx, self, lambda: super(WorkerSegmentRegionAroundPoint, self).run(ctx, arguments))
