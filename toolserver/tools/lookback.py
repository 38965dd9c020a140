"""`lookback_reuse`: IMAgent's visual reflection — return an earlier image so the model attends to it again.

The image comes back under a new observation key (the counter runs over every image a tool
returns, SPEC §1) that shares the earlier image's pixels: no copy is stored.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from toolserver.tools.args import ImageRef
from toolserver.tools.base import Tool, ToolContext, ToolOutput


class LookbackArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")

    image: ImageRef
    reason: str | None = Field(default=None, description="Why you want to look at this image again.")


class LookbackReuse(Tool):
    name = "lookback_reuse"
    description = (
        "Look back at an earlier image (an input or a previous zoom) when the details you remember are "
        "uncertain: returns that image again so you can re-examine it."
    )
    Args = LookbackArgs

    def run(self, ctx: ToolContext, args: LookbackArgs) -> ToolOutput:
        entry = ctx.image(args.image)
        key, index = ctx.observation_key(), len(ctx.images)
        reason = f" Reason: {args.reason}" if args.reason else ""
        text = (f"Here is image `{entry.key}` (index {entry.index}) again, as `{key}` (index {index}), "
                f"{entry.size[0]}x{entry.size[1]} pixels.{reason}")
        return ToolOutput(text=text, reused=[entry], meta={"source": entry.key, "reason": args.reason})
