"""What OpenThinkIMG's tool workers share, as its GRPO rollout (`vllm_generate_with_tool_calls`) drives them.

The rollout hands every worker the newest image of the trajectory, whatever `img_N` the action names, as a JPEG at
Pillow's default quality (75), which the worker decodes; a worker's image comes back as a JPEG at the same quality,
which the rollout decodes and keeps as the newest image; the model is shown the newest image saved as a JPEG again
after every call, a new one or not. So every answer here carries one image: the worker's (kept as decoded, shown as
re-encoded), or the newest again (shown as re-encoded).

A tool's text is its worker's own (`Line drawn successfully.`, an error text). How the rollout writes it back is
the call format's (`toolserver/formats/openthinkimg.py`), told by the answer's `meta["rollout"]`:
- `observation`: the worker answered an image, or answered no image field (a failure its tool manager reports):
  the rollout wraps the text in its `OBSERVATION:` lines;
- `question`: the worker answered an image field without an image (its own failures; `ZoomInSubfigure` always):
  the rollout falls back to the task's question, `meta["question"]`, the session's text named `question`.
"""

from __future__ import annotations

import io
import re

import numpy as np
from PIL import Image
from pydantic import BaseModel, Field

from toolserver.tools.base import ToolContext, ToolOutput

QUESTION = "question"  # the session text holding the task's question (the rollout's `prompt`)
# What the rollout's tool manager answers when a worker fails with an HTTP 500 (a missing `image` or `param`):
# FastAPI's plain-text error page, which `response.json()` cannot read.
SERVER_ERROR = "Failed to call tool {name}: Expecting value: line 1 column 1 (char 0)"
NO_QUESTION = ("Error: this session holds no text named 'question'; the OpenThinkIMG rollout answers a failed tool "
               "with the task's question again, so add it (POST /v1/sessions/{id}/texts {\"question\": ...}).")
# A point as the drawing and segmenting workers read their `param`: x=…, y=…, x1=…, y2=…, quoted or not.
POINT_ATTRIBUTE = re.compile(r'(x\d*)?=\s*"?([0-9]+(?:\.[0-9]+)?)"?|(y\d*)?=\s*"?([0-9]+(?:\.[0-9]+)?)"?')


class WorkerArgs(BaseModel):
    """The arguments every OpenThinkIMG image worker reads: the image (by name) and one parameter text."""

    image: str = Field(description="The image to work on, by name (img_1 is the input). OpenThinkIMG's rollout "
                                   "always hands the tool the newest image, whatever name is given.")
    param: str = Field(description="The tool's parameter, as its description says.")


def jpeg_bytes(image: Image.Image) -> bytes:
    """`pil_to_base64` of OpenThinkIMG (rollout and workers alike): a JPEG with Pillow's defaults."""
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG")
    return buffer.getvalue()


def jpeg_round_trip(image: Image.Image) -> Image.Image:
    with Image.open(io.BytesIO(jpeg_bytes(image))) as decoded:
        decoded.load()
        return decoded.copy()


def worker_image(ctx: ToolContext) -> Image.Image:
    """The image a worker decodes: the session's newest image as the rollout sends it (a JPEG, quality 75)."""
    return jpeg_round_trip(ctx.images[-1].pixels)


def image_answer(text: str, image: Image.Image, **meta: object) -> ToolOutput:
    """A worker's image as the rollout keeps it (its JPEG decoded) and shows it (that image as a JPEG again)."""
    kept = jpeg_round_trip(image)
    return ToolOutput(text, images=[kept], encoded=[(jpeg_bytes(kept), "image/jpeg")], encoded_is_pixels=False,
                      meta={"rollout": "observation", **meta})


def _newest_again(ctx: ToolContext, text: str, code: str | None, meta: dict[str, object]) -> ToolOutput:
    if not ctx.images:  # a session without images: the text alone
        return ToolOutput(text, ok=code is None, error_code=code, meta=meta)
    newest = ctx.images[-1].pixels
    return ToolOutput(text, images=[newest], encoded=[(jpeg_bytes(newest), "image/jpeg")], encoded_is_pixels=False,
                      ok=code is None, error_code=code, meta=meta)


def text_reply(ctx: ToolContext, text: str, **meta: object) -> ToolOutput:
    """A worker's answer that is a text alone (OCR's texts, Point's coordinates): the newest image again."""
    return _newest_again(ctx, text, None, {"rollout": "observation", **meta})


def text_answer(ctx: ToolContext, text: str, code: str, **meta: object) -> ToolOutput:
    """An answer without an image field (the tool manager's failures): the text, the newest image again."""
    return _newest_again(ctx, text, code, {"rollout": "observation", **meta})


def fallback(ctx: ToolContext, worker_text: str, code: str, **meta: object) -> ToolOutput:
    """An image field without an image: the worker's text here; the rollout writes the question, newest image."""
    question = ctx.texts.get(QUESTION)
    if question is None:
        return ToolOutput.failure(NO_QUESTION, "no_question", rollout="error", worker_text=worker_text, **meta)
    return _newest_again(ctx, worker_text, code, {"rollout": "question", "question": question, **meta})


def worker_points(param: str, width: int, height: int) -> list[np.ndarray]:
    """The points a drawing or segmenting worker reads from its `param` (`extract_points`): values in percent of
    the image (a pair whose larger value exceeds 100 is skipped), numbered pairs in index order, scaled to pixels."""
    found: dict[str, float] = {}
    for match in POINT_ATTRIBUTE.finditer(param):
        x_name, x_value, y_name, y_value = match.groups()
        if x_name and "x" in x_name:
            found[x_name] = float(x_value)
        elif y_name and "y" in y_name:
            found[y_name] = float(y_value)
    indices = sorted({int(key[1:]) for key in found if key[1:].isdigit()})
    if not indices and ("x" in found or "y" in found):
        indices = [0]
    points = []
    for i in indices:
        x = found.get(f"x{i}" if f"x{i}" in found else "x", 0.0)
        y = found.get(f"y{i}" if f"y{i}" in found else "y", 0.0)
        point = np.array([x, y])
        if np.max(point) > 100:
            continue
        points.append(point / 100.0 * np.array([width, height]))
    return points
