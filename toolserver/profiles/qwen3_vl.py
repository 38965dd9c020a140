"""Qwen-Agent's official Qwen3-VL `image_zoom_in_tool` (profile `qwen3-vl`), as its code behaves.

Boxes are relative 0–1000 on the raw image (no fetch_image resize), clamped rather than rejected; the
crop is resized with smart_resize(factor 32, min 256·32·32). `img_idx` indexes the *input* images only
(the maintainers' answer in QwenLM/Qwen3-VL#1667), with Python indexing (-1 is the last). The tool
returns the image alone, so the result text is empty. It crops and resizes the image file in its own mode and saves
the PNG; the model's side makes it RGB: an RGBA, LA or palette upload is cropped and resized from its bytes as
uploaded (alpha premultiplied, a palette resized NEAREST, as Pillow does), then composited on white.
Failures read as the reference's do:
`Error: Invalid input image [...]` (listing our keys where it lists paths) and
`Tool Execution Error <exception text>`. Arguments are read as Qwen-Agent reads them (profile `qwen3-vl`,
toolserver.arguments): lenient JSON, then `jsonschema.validate` against `QWEN_AGENT_PARAMETERS`, so a
missing `label` is Qwen-Agent's ValidationError text. Used without that reader (another profile), a
missing argument reads `Tool Execution Error '<name>'`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from pydantic import BaseModel, Field

from toolserver.arguments import ArgumentStyle
from toolserver.errors import ToolFailure
from toolserver.formats.qwen_agent import QWEN_AGENT
from toolserver.imaging import in_own_mode, own_mode_source
from toolserver.profiles.base import Profile, tools_by_name
from toolserver.profiles.qwen_family import qwen3_crop_and_resize, qwen3_expand_box
from toolserver.tools.base import Tool, ToolContext, ToolOutput


class Qwen3ZoomArgs(BaseModel):
    bbox_2d: list[float] = Field(
        min_length=4, max_length=4,
        description="The bounding box of the region to zoom in, as [x1, y1, x2, y2], where (x1, y1) is the top-left "
        "corner and (x2, y2) is the bottom-right corner",
    )
    label: str = Field(description="The name or label of the object in the specified bounding box")
    img_idx: float = Field(description="The index of the zoomed-in image (starting from 0)")


# The parameters Qwen-Agent declares for this tool and validates every call against, key order included
# (jsonschema prints the schema in its error texts).
QWEN_AGENT_PARAMETERS = {
    "type": "object",
    "properties": {
        "bbox_2d": {
            "type": "array",
            "items": {"type": "number"},
            "minItems": 4,
            "maxItems": 4,
            "description": Qwen3ZoomArgs.model_fields["bbox_2d"].description,
        },
        "label": {"type": "string", "description": Qwen3ZoomArgs.model_fields["label"].description},
        "img_idx": {"type": "number", "description": Qwen3ZoomArgs.model_fields["img_idx"].description},
    },
    "required": ["bbox_2d", "label", "img_idx"],
}


class Qwen3Zoom(Tool):
    name = "image_zoom_in_tool"
    description = ("Zoom in on a specific region of an image by cropping it based on a bounding box (bbox) and an "
                   "optional object label")
    Args = Qwen3ZoomArgs
    raw_arguments = True
    system_schema = QWEN_AGENT_PARAMETERS

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        for required in ("img_idx", "bbox_2d"):
            if required not in args:
                raise ToolFailure(f"Tool Execution Error '{required}'", "invalid_arguments")
        inputs = [e for e in ctx.images if e.origin == "input"]
        try:
            entry = inputs[args["img_idx"]]
        except (IndexError, TypeError):
            raise ToolFailure(f"Error: Invalid input image {[e.key for e in inputs]}", "unknown_image") from None
        try:
            width, height = entry.size
            rx1, ry1, rx2, ry2 = args["bbox_2d"]
            box = qwen3_expand_box(rx1 / 1000.0 * width, ry1 / 1000.0 * height, rx2 / 1000.0 * width,
                                   ry2 / 1000.0 * height, width, height)
            cropped = in_own_mode(entry.pixels, own_mode_source(entry.source_mime, lambda: entry.source_bytes),
                                  partial(qwen3_crop_and_resize, box=box), "white")
        except Exception as exc:  # the reference turns every failure into this text
            raise ToolFailure(f"Tool Execution Error {exc}", "tool_error") from None
        return ToolOutput(text="", images=[cropped],
                          meta={"source": entry.key, "box_original": box, "label": args.get("label")})


PROFILES = (
    Profile("qwen3-vl", "Qwen-Agent's official Qwen3-VL image_zoom_in_tool (bbox_2d, label, img_idx).",
            tools_by_name(Qwen3Zoom()), call_format=QWEN_AGENT, arguments=ArgumentStyle.QWEN_AGENT,
            unknown_tool_template="Tool {name} does not exists."),
)
