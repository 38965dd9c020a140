"""`select_frames`: show some frames of a video again (a video is taken in as one image per sampled frame).

Frames are named by key or 0-based index, like every image; each comes back under a new observation key
sharing the frame's pixels (no copy is stored), in the order asked.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from toolserver.tools.args import ImageRef
from toolserver.tools.base import Tool, ToolContext, ToolOutput

MAX_SELECTED = 32


class SelectFramesArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    frames: list[ImageRef] = Field(min_length=1, max_length=MAX_SELECTED,
                                   description=f"The frames to look at, by key or 0-based index (at most "
                                   f"{MAX_SELECTED}), e.g. [0, 4, 8].")


class SelectFrames(Tool):
    name = "select_frames"
    description = ("Look at chosen frames of a video again (a video's frames are the session's images, in time "
                   "order): returns those frames so you can examine them closely.")
    Args = SelectFramesArgs

    def run(self, ctx: ToolContext, args: SelectFramesArgs) -> ToolOutput:
        entries = [ctx.image(ref) for ref in args.frames]
        first = len(ctx.images)
        listed = "; ".join(f"`{e.key}` ({e.size[0]}x{e.size[1]}) as `{ctx.observation_key(i)}` (index {first + i})"
                           for i, e in enumerate(entries))
        text = f"Here are {len(entries)} frames again: {listed}."
        return ToolOutput(text=text, reused=entries, meta={"sources": [e.key for e in entries]})
