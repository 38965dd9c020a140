"""Grid zoom: a complete toolserver environment in one module (install with `pip install -e examples/plugin`).

The model sees an image split into a 3x3 grid, rows A-C from the top, columns 1-3 from the left, and asks for a
cell in its text: `<zoom_cell>B2</zoom_cell>` (at most two a turn). The tool crops that cell of an image (the
first input by default) and returns it enlarged 2x; the observation is one user message per cell.

It shows the three things an environment brings: a tool (typed arguments, a pure `run`), a call format (parse a
turn, a turn rule, render the observation) and a profile tying them together. Nothing under `toolserver/`
changes: the entry point in pyproject.toml registers them when the server starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import ToolFailure
from toolserver.formats.base import CallFormat, Parsed, ParsedCall, TurnRule
from toolserver.messages import image_part
from toolserver.models import ToolResult
from toolserver.plugins import Environment
from toolserver.profiles.base import Profile, tools_by_name
from toolserver.tools.args import ImageRef
from toolserver.tools.base import Tool, ToolContext, ToolOutput

ROWS, COLUMNS = "ABC", "123"
_CELL = re.compile(r"<zoom_cell>\s*(.*?)\s*</zoom_cell>", re.DOTALL)


class ZoomCellArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cell: str = Field(pattern=r"^[A-Ca-c][1-3]$", description="The grid cell: a row A-C (top to bottom) and a "
                      "column 1-3 (left to right), e.g. `B2` for the centre.")
    image: ImageRef = 0


class ZoomCell(Tool):
    name = "zoom_cell"
    description = "Zoom into one cell of a 3x3 grid laid over an image; the cell comes back enlarged 2x."
    Args = ZoomCellArgs

    def run(self, ctx: ToolContext, args: ZoomCellArgs) -> ToolOutput:
        entry = ctx.image(args.image)
        row, column = ROWS.index(args.cell[0].upper()), COLUMNS.index(args.cell[1])
        width, height = entry.size
        box = (column * width // 3, row * height // 3, (column + 1) * width // 3, (row + 1) * height // 3)
        if box[2] <= box[0] or box[3] <= box[1]:
            raise ToolFailure(f"Error: `{entry.key}` ({width}x{height}) is too small for a 3x3 grid.", "invalid_box")
        crop = entry.pixels.crop(box)
        crop = crop.resize((crop.width * 2, crop.height * 2), Image.Resampling.BICUBIC)
        text = f"Cell {args.cell.upper()} of `{entry.key}`, enlarged 2x ({crop.width}x{crop.height})."
        return ToolOutput(text=text, images=[crop], meta={"source": entry.key, "box_original": list(box)})


class GridCalls(CallFormat):
    name = "grid"
    description = "Grid zoom: <zoom_cell>B2</zoom_cell> tags, at most two a turn; a user message per cell."
    turn = TurnRule(max_calls=2)

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name)
        for cell in _CELL.findall(text)[:self.turn.max_calls]:
            out.calls.append(ParsedCall("zoom_cell", {"cell": cell}))
        return out

    def observation(self, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [{"type": "text", "text": r.text}, *map(image_part, r.images)]}
                for r in results]


GRID_CALLS = GridCalls()
# The format object itself (not its name): it is registered with the profile, when the plugin loads.
ENVIRONMENT = Environment(
    name="grid",
    formats=[GRID_CALLS],
    profiles=[Profile("grid", "Grid zoom: zoom_cell on a 3x3 grid, called as <zoom_cell>B2</zoom_cell>.",
                      tools_by_name(ZoomCell()), call_format=GRID_CALLS)],
)
