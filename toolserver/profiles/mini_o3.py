"""Mini-o3 (Mini-o3/Mini-o3 @ 8654dbf4): multi-turn zoom-ins addressed by source. Its rollout as its training
recipe runs it (`actor_rollout_ref.rollout.mode=async`, `use_raw_image=True`, `use_relative_coordinates=True`,
`data.max_pixels=2000000`, `data.min_pixels=40000`), reproduced: `AsyncvLLMEngine.process_tool_call` and
`process_image` in `verl/workers/rollout/vllm_rollout/vllm_async_engine.py`, `prepare_grounding_inputs_multi_turn`
and `crop_image` in `verl/workers/rollout/vllm_rollout/function_tools.py`, the texts of `verl/trainer/constants.py`,
and the first view of `verl/utils/dataset/multimodal_dataset.py`'s `process_image` (the profile's view rule).

The turn (`toolserver/formats/mini_o3.py`) hands the whole model turn to `grounding`, which reads it with the
rollout's pattern, `.*<grounding>{"bbox_2d": (.*),.*"source": [',"](.*)[',"]}</grounding>` (the last block; one
space after each colon), the box evaluated as a Python expression. `source` is `original_image` (index 0) or
`observation_<digits>` (its number is its index, so `observation_0` is the original too), among the observations
the tool has made: the original in its own pixels and each crop as cut, never the resized copies the model sees.
The box is 0-1 against that observation's own size (`coords: rel1`, the recipe), or, with `coords: abs_view`
(`use_relative_coordinates=False`), pixels of the copy the model saw, scaled to it; then `int()`, clamped to
[0, w-1] x [0, h-1] (the last row and column are never cut), refused under one pixel a side or at an aspect
ratio of 200. The crop is cut as is (`crop_image(..., resize=1)`) and the model is shown `process_image` of it:
NEAREST resizes into [40000, 2000000] pixels, a side under 28 grown to 28 (+1), an aspect of 200 tamed.
Any failure is Python's own text in `ERROR occurs during grounding. Error Information: {e}.\\n` + the error
prompt. A success answers `After the above Action {k}, here is the the zoom-in image (Observation {k+1}):` with k
the calls the session has made (the rollout's generation round: failed actions count). The call arguments may
also be given directly (`bbox_2d`, `source`: `/tool_calls`, MCP), read by the same checks.

Deviation (docs/decisions.md): the rollout evaluates the box with Python's `eval` in its own module, which runs
whatever the model wrote; here only literal values and arithmetic are evaluated, a name fails with Python's
`NameError` text and anything else with its own text. The turn and image limits are the caller's.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from typing import Any

from PIL import Image
from pydantic import BaseModel, Field

from toolserver.arguments import ArgumentStyle
from toolserver.formats.mini_o3 import MINI_O3, TOOL
from toolserver.geometry import Coords
from toolserver.models import ViewSettings
from toolserver.profiles.base import Alpha, Profile, tools_by_name
from toolserver.tools.base import Tool, ToolContext, ToolOutput

PATTERN = re.compile(r".*<grounding>{\"bbox_2d\": (.*),.*\"source\": [\',\"](.*)[\',\"]}</grounding>", re.DOTALL)
SOURCE = re.compile("observation_([0-9]*)", re.DOTALL)
MAX_PIXELS, MIN_PIXELS = 2_000_000, 40_000  # data.max_pixels / data.min_pixels of the recipe
SYSTEM_PROMPT = (  # TOOL_CROP_SYSTEM_PROMPT, for the caller's first turn
    "You are a helpful assistant. Answer the user's question based on the image provided. Output your thinking "
    "process within the <think> and </think> tags. Whenever you find anything unclear, you can zoom in a specific "
    'region in the given image to see more clearly by outputing <grounding>{"bbox_2d": [x0, y0, x1, y1], "source": '
    '"original_image"}</grounding>, where (x0, y0) and (x1, y1) are the top-left and bottom-right coordinates of the '
    "region that you want to zoom in, respectively (suppose the width and height of the image are 1.0), and 'source' "
    "refers to the image that you zoom in and could be either 'original_image' or 'observation_i'. Once the final "
    "answer is confirmed, put it within <answer> and </answer>.")
TURN_PROMPT = (  # TOOL_CALL_CROP_MULTI_TRUN_PROMPT, its vision tokens as <image>
    "After the above Action {action_turn}, here is the the zoom-in image (Observation {observation_turn}):\n<image>.\n"
    "Continue your reasoning process inside <think> and </think>. If needed, you can continue to zoom in on the "
    "original image or any of the observations, by outputting <grounding> and </grounding> as before. If the final "
    "answer is confirmed, put your final answer inside <answer> and </answer>.")
ERROR_PROMPT = ("Please analyze the error information obtained from the function tool and adjust your response. "
                "Countinue your reasoning process inside <think> and </think>.")  # ERROR_INFO_MULTI_TURN_PROMPT
MAX_SEQUENCE = 100_000  # a list built by arithmetic (`[0] * n`) longer than this is refused, not allocated


# -- the box as `eval` reads it, literals and arithmetic only ----------------------------------------------------
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Not: operator.not_, ast.Invert: operator.invert}


def evaluate(source: str) -> Any:
    """`eval(source)` for what is literal values and arithmetic; Python's own errors otherwise where it has them
    (`SyntaxError` as `eval` compiles, `NameError` for a name)."""
    tree = ast.parse(source.lstrip(" \t"), "<string>", "eval")  # eval drops leading spaces and tabs
    try:
        return _value(tree.body)
    except RecursionError:
        raise RecursionError("maximum recursion depth exceeded") from None


def _value(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple | ast.Set) and not any(isinstance(e, ast.Starred) for e in node.elts):
        items = [_value(e) for e in node.elts]
        if isinstance(node, ast.List):
            return items
        return tuple(items) if isinstance(node, ast.Tuple) else set(items)
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, ast.Name):
        raise NameError(f"name '{node.id}' is not defined")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        _bounded(node.op, left, right)
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"the box is read as literal values and arithmetic, not {type(node).__name__}")


def _bounded(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse what would take a machine's memory: a huge power, a long repeated sequence."""
    if isinstance(op, ast.Pow) and isinstance(right, int) and isinstance(left, int) and abs(right) > 10_000:
        raise OverflowError("the box's power is too large to compute")
    if isinstance(op, ast.Mult):
        for seq, count in ((left, right), (right, left)):
            sequence = isinstance(seq, list | tuple | str | bytes) and isinstance(count, int)
            if sequence and len(seq) * count > MAX_SEQUENCE:
                raise MemoryError(f"the box's sequence would be longer than {MAX_SEQUENCE}")


def read_turn(text: str) -> dict[str, Any]:
    """The grounding argument as the rollout reads it from a turn (an unmatched turn fails as it does there)."""
    match: Any = PATTERN.match(text)
    bbox, source = match.group(1), match.group(2)
    return {"bbox_2d": evaluate(bbox), "source": source}


# -- prepare_grounding_inputs_multi_turn, the rollout's checks in their order ---------------------------------------
def prepare(obj: Any, sizes: list[tuple[int, int]], used: list[tuple[int, int] | None],
            relative: bool) -> tuple[int, list[int]]:
    """(the observation's index, the box in its pixels); raises with the reference's texts."""
    if "bbox_2d" not in obj:
        raise AssertionError(f"There is no 'bbox_2d' in grounding argument: {obj}")
    if "source" not in obj:
        raise AssertionError(f"There is no 'source' in grounding argument: {obj}")
    if not (isinstance(obj, dict) and isinstance(obj["bbox_2d"], list) and len(obj["bbox_2d"]) == 4):
        raise AssertionError()
    if not isinstance(obj["source"], str):
        raise AssertionError()
    bbox: Any = obj["bbox_2d"]
    source = obj["source"]
    index = 0 if source == "original_image" else _observation_id(source)
    if not index < len(sizes):
        raise AssertionError(f'Error in predicting the source observation: "{source}".')
    w, h = sizes[index]
    if relative:
        bbox = (bbox[0] * w, bbox[1] * h, bbox[2] * w, bbox[3] * h)
    else:
        w_used, h_used = used[index] or (w, h)
        if w != w_used or h != h_used:
            mw, mh = w / w_used, h / h_used
            bbox = (bbox[0] * mw, bbox[1] * mh, bbox[2] * mw, bbox[3] * mh)
    box = [int(bbox[0]), int(bbox[1]), int(bbox[2]), int(bbox[3])]
    box = [max(box[0], 0), max(box[1], 0), min(box[2], w - 1), min(box[3], h - 1)]
    if not box[0] <= box[2] - 1:
        raise AssertionError(f"The bounding box is not valid in width: {box}")
    if not box[1] <= box[3] - 1:
        raise AssertionError(f"The bounding box is not valid in height: {box}")
    width, height = box[2] - box[0], box[3] - box[1]
    if width / height >= 200 or height / width >= 200:
        raise ValueError("The absolute aspect ratio of the bounding box exceeds 200, which is too large.")
    return index, box


def _observation_id(source: str) -> int:
    try:
        match: Any = SOURCE.match(source)
        return int(match.group(1))
    except Exception:
        raise ValueError(f"The 'source' argument \"{source}\" does not match the pattern "
                         "'observation_([0-9]*)'.") from None


def process_image(image: Image.Image, max_pixels: int = MAX_PIXELS, min_pixels: int = MIN_PIXELS) -> Image.Image:
    """The rollout's resize of each crop before the model sees it (NEAREST throughout)."""
    nearest = Image.Resampling.NEAREST
    if image.width * image.height > max_pixels:
        factor = math.sqrt(max_pixels / (image.width * image.height))
        image = image.resize((int(image.width * factor), int(image.height * factor)), resample=nearest)
    if image.width * image.height < min_pixels:
        factor = math.sqrt(min_pixels / (image.width * image.height))
        image = image.resize((int(image.width * factor), int(image.height * factor)), resample=nearest)
    if image.width < 28 or image.height < 28:
        factor = 28 / min(image.width, image.height)
        image = image.resize((int(image.width * factor + 1), int(image.height * factor + 1)), resample=nearest)
    if image.width / image.height >= 200:
        image = image.resize((image.width, int(image.width / 190 + 1)), resample=nearest)
    if image.height / image.width >= 200:
        image = image.resize((int(image.height / 190 + 1), image.height), resample=nearest)
    return image if image.mode == "RGB" else image.convert("RGB")


class GroundingArgs(BaseModel):
    bbox_2d: list[float] = Field(min_length=4, max_length=4, description=(
        "[x0, y0, x1, y1]: the top-left and bottom-right corners of the region to zoom in on, the image's width "
        "and height being 1.0."))
    source: str = Field(description="The image to zoom in on: 'original_image' or 'observation_i'.")


def failure(exc: Exception, code: str) -> ToolOutput:
    return ToolOutput.failure(f"ERROR occurs during grounding. Error Information: {exc}.\n" + ERROR_PROMPT, code)


class Grounding(Tool):
    name = TOOL
    description = ("Zoom in on a region of the original image or of an earlier observation: the region is cut as it "
                   "is and shown resized into Mini-o3's pixel bounds.")
    Args = GroundingArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        if ctx.coords not in (Coords.REL1, Coords.ABS_VIEW):
            return ToolOutput.failure(f"Error: mini-o3 reads boxes as rel1 (its recipe) or abs_view (pixels of the "
                                      f"image shown), not {ctx.coords}.", "invalid_arguments")
        inputs = [e for e in ctx.images if e.is_input][:1]
        if not inputs:
            return ToolOutput.failure("Error: this session has no input image yet; upload one first.", "unknown_image")
        observations = inputs + [e for e in ctx.images if not e.is_input]
        try:  # the rollout shows the model every failure in Python's words
            obj = read_turn(args["turn"]) if isinstance(args, dict) and isinstance(args.get("turn"), str) else args
        except Exception as exc:
            return failure(exc, "parse_error")
        try:
            index, box = prepare(obj, [e.size for e in observations], [e.view_size for e in observations],
                                 ctx.coords is Coords.REL1)
            crop = observations[index].pixels.crop((box[0], box[1], box[2], box[3]))
            shown = process_image(crop)
        except Exception as exc:
            return failure(exc, "invalid_arguments")
        text = TURN_PROMPT.format(action_turn=ctx.tool_calls, observation_turn=ctx.tool_calls + 1)
        return ToolOutput(text=text, images=[crop], shown=[None if shown is crop else shown],
                          meta={"source": observations[index].key, "box": box})


PROFILES = (
    Profile("mini-o3", "Mini-o3: <grounding> zoom-ins on the original or any observation, 0-1 boxes (abs_view: "
            "pixels of the image shown), crops kept as cut and shown NEAREST-resized, its turn counter and texts.",
            tools_by_name(Grounding()), coords=Coords.REL1, call_format=MINI_O3, alpha=Alpha.DROP,
            view=ViewSettings(factor=None, prescale_max_pixels=MAX_PIXELS, prescale_min_pixels=MIN_PIXELS),
            arguments=ArgumentStyle.PYTHON),
)
