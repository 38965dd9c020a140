"""OpenThinkIMG's `SelectSubplot` worker, served as `ZoomInSubfigure`: it finds the chart's subplots (the edges of the
image, its ten longest outer contours, those whose box's width + height is within 10 px of the longest's, boxes
within 10 px of one taken already dropped), makes one image per subplot with the others painted white, and asks
Gemini which of them `param` describes, answering a list of images.

The GRPO rollout cannot decode a list as an image, so whatever Gemini answers, the model reads the rollout's fallback
(`worker.fallback`: the question again, the newest image again); no Gemini call is made here. The subplot boxes
are kept in the result's meta (`subplots`), the worker's text in `worker_text`.
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
from PIL import Image

from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.tools.perception.worker import SERVER_ERROR, WorkerArgs, fallback, text_answer, worker_image

NEAR = 10  # pixels: a box is a subplot if its width + height is this close to the longest's, new if this far


def subplot_boxes(image: Image.Image) -> list[dict[str, int]]:
    """The worker's subplot boxes (`get_sorted_bbox`), as {x1, y1, x2, y2}; IndexError when the image has no edge."""
    gray = cv2.cvtColor(cv2.cvtColor(np.array(image), cv2.COLOR_RGB2BGR), cv2.COLOR_BGR2GRAY)
    edges = cv2.Canny(cv2.GaussianBlur(gray, (3, 3), cv2.BORDER_DEFAULT), 100, 200)
    contours, _ = cv2.findContours(edges, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    longest = sorted(contours, key=len, reverse=True)[:10]
    _, _, width, height = cv2.boundingRect(np.concatenate(longest[0]))
    reach = width + height
    boxes: list[dict[str, int]] = []
    for contour in longest:
        x, y, w, h = cv2.boundingRect(np.concatenate(contour))
        if not reach - NEAR < w + h <= reach + NEAR:
            continue
        if not any(abs(b["x1"] - x) < NEAR and abs(b["y1"] - y) < NEAR and abs(b["x2"] - (x + w)) < NEAR
                   and abs(b["y2"] - (y + h)) < NEAR for b in boxes):
            boxes.append({"x1": x, "y1": y, "x2": x + w, "y2": y + h})
    return boxes


class ZoomInSubfigure(Tool):
    name = "ZoomInSubfigure"
    description = ("Pick the subplot of a chart that param describes (its title or content). In OpenThinkIMG's "
                   "rollout this answers the question again with the newest image.")
    Args = WorkerArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        if not isinstance(args, dict) or "param" not in args or "image" not in args:
            return text_answer(ctx, SERVER_ERROR.format(name=self.name), "invalid_arguments")
        if args["param"] is None:
            return fallback(ctx, "Missing 'param' or 'image' in the input parameters.", "invalid_arguments")
        try:
            boxes = subplot_boxes(worker_image(ctx).convert("RGB"))
        except Exception as exc:  # the worker's catch-all
            return fallback(ctx, f"Error when selecting subplot: {exc}", "no_subplots")
        return fallback(ctx, "Select subplot done.", "not_an_image", subplots=boxes)
