"""OpenThinkIMG (zhaochen0110/OpenThinkIMG @ 45d295f0): the tool workers of `tool_server/tool_workers/` under their
worker names, as its GRPO rollout (`r1_v/open_r1/trainer/tool_generation.py`, `vllm_generate_with_tool_calls`) calls
them and writes their answers back; the action JSON is `toolserver/formats/openthinkimg.py`.

The image tools are reproduced here (`toolserver/tools/perception/`): `DrawHorizontalLineByY`, `DrawVerticalLineByX`
(matplotlib's drawing, its figure's size), `ZoomInSubfigure` (the SelectSubplot worker, whose answer the rollout
cannot read: the question again) and `crop` (the tool manager's offline worker, which the rollout itself leaves
out). The model tools (`OCR`, `Point`, `SegmentRegionAroundPoint`, and the detectors) are separate modules: each
joins `MODEL_TOOLS` below with one line.

Images: the session's input is made RGB by dropping alpha (the rollout's `convert("RGB")` of RGBA, LA and P); each
tool reads the newest image as the rollout sends it (a JPEG at quality 75, decoded) and its image is kept as the
rollout decodes it and shown as the rollout encodes it (`perception/worker.py`). A name the rollout does not know
answers `Tool None not found.` in its observation text. The round limit (6 in its trainer) is the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from toolserver.formats.openthinkimg import OPENTHINKIMG, TOOL_NAMES
from toolserver.geometry import Coords
from toolserver.profiles.base import Alpha, Profile, tools_by_name
from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.tools.perception.crop import Crop
from toolserver.tools.perception.draw_horizontal_line import DrawHorizontalLineByY
from toolserver.tools.perception.draw_vertical_line import DrawVerticalLineByX
from toolserver.tools.perception.model_workers import WorkerOcr, WorkerPoint, WorkerSegmentRegionAroundPoint
from toolserver.tools.perception.select_subplot import ZoomInSubfigure
from toolserver.tools.perception.worker import text_answer

IMAGE_TOOLS: tuple[Tool, ...] = (DrawHorizontalLineByY(), DrawVerticalLineByX(), ZoomInSubfigure(), Crop())
# The model tools, one line each, named as their workers register (OCR, Point, SegmentRegionAroundPoint, ...).
MODEL_TOOLS: tuple[Tool, ...] = (
    WorkerOcr(),  # OCR (GOT-OCR2 in EasyOCR's place: docs/perception-models.md)
    WorkerSegmentRegionAroundPoint(),  # SegmentRegionAroundPoint (SAM2)
    WorkerPoint(),  # Point (Molmo2 in Molmo-7B-D's place: docs/perception-models.md)
)


class AnyArgs(BaseModel):
    model_config = ConfigDict(extra="allow")


class NotFound(Tool):
    """What the rollout's tool manager answers a name it has no worker for: `Tool <mapped name> not found.` (None
    for a name outside the mapping), with the newest image again, as every answer. Never listed."""

    name = "tool_not_found"
    description = "A tool name the rollout has no worker for."
    Args = AnyArgs
    raw_arguments = True

    def __init__(self, mapped: str | None) -> None:
        self.mapped = mapped

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        return text_answer(ctx, f"Tool {self.mapped} not found.", "unknown_tool")


@dataclass
class OpenThinkImgProfile(Profile):
    """Names looked up as the rollout maps them: any case of its six workers' names, `crop` and the listed tools as
    written; any other name is answered as the rollout answers it (`NotFound`)."""

    def tool(self, name: str) -> Tool | None:
        found = self.tools.get(name)
        if found is None and name.lower() in TOOL_NAMES:
            found = self.tools.get(TOOL_NAMES[name.lower()])
        return found if found is not None else NotFound(TOOL_NAMES.get(name.lower()))

    def unknown_tool_text(self, name: str) -> str:
        """The tool manager's answer: a mapped worker that is not running by its name, any other name as None."""
        return f"Tool {TOOL_NAMES.get(name.lower())} not found."


PROFILES = (
    OpenThinkImgProfile(
        "openthinkimg", "OpenThinkIMG: its tool workers under their names ({\"actions\": [...]} JSON, the newest "
        "image as a JPEG, its OBSERVATION texts); DrawHorizontalLineByY, DrawVerticalLineByX, ZoomInSubfigure, crop "
        "and the model tools installed.",
        tools_by_name(*IMAGE_TOOLS, *MODEL_TOOLS), coords=Coords.ABS_VIEW, call_format=OPENTHINKIMG,
        alpha=Alpha.DROP),
)
