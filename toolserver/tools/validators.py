"""The 19 instruction-following validators as tools, with ARM-Thinker's names, descriptions and parameters
(specifications and arguments models: `toolserver.validation.specs`; `arm` and `strict` forms explained there).

`response` is a key of the session's texts (`text_0`, ...). A value that is not a key but contains
whitespace, or is longer than 64 characters, is taken as the text itself; any other unknown value gets
ARM-Thinker's error listing the keys that exist.
"""

from __future__ import annotations

from pydantic import BaseModel

from toolserver.errors import ToolFailure
from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.validation.specs import SPECS, args_model, run_check

INLINE_MIN_CHARS = 65


class Validator(Tool):
    """One check as a tool. `arm_errors` words failures the way ARM-Thinker's agent does."""

    def __init__(self, name: str, *, strict: bool, arm_errors: bool = False):
        self.name = name
        self.description = SPECS[name][0]
        self.Args = args_model(name, strict=strict)
        self.error_prefix = "Error when executing tool: " if arm_errors else "Error: "

    def text_of(self, ctx: ToolContext, ref: str) -> tuple[str, str]:
        """The text to check, and where it came from (its key, or "inline")."""
        if ref in ctx.texts:
            return ctx.texts[ref], ref
        if len(ref) >= INLINE_MIN_CHARS or any(c.isspace() for c in ref):
            return ref, "inline"
        # ARM-Thinker's words, trailing space included.
        raise ToolFailure(f"{self.error_prefix}Cannot resolve text response key '{ref}'. Current text responses "
                          f"you have are: {list(ctx.texts)}. ", "unknown_text")

    def run(self, ctx: ToolContext, args: BaseModel) -> ToolOutput:
        text, source = self.text_of(ctx, args.response)  # type: ignore[attr-defined]
        try:
            result = run_check(self.name, text, args)
        except (ValueError, TypeError) as exc:  # e.g. a `ranges` entry that is not a pair (arm form)
            raise ToolFailure(f"{self.error_prefix}{exc}", "invalid_arguments") from None
        return ToolOutput(text=f"Check result: {result}", meta={"result": result, "text": source})


def validators(*, strict: bool, arm_errors: bool = False) -> list[Validator]:
    return [Validator(name, strict=strict, arm_errors=arm_errors) for name in SPECS]
