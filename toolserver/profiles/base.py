"""The profile contract: a named set of tool instances with the conventions of one system.

A `Profile` is checked when it is built, so a definition with a typo fails at import with a message that names
the profile and the field: an unknown call format, argument style or alpha rule, an alias to a tool the profile
does not list, a tool listed under a name that is not its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from toolserver.arguments import ArgumentStyle
from toolserver.formats import FORMATS, CallFormat
from toolserver.geometry import Coords
from toolserver.models import ViewSettings
from toolserver.schema import function_tool
from toolserver.tools.args import COORD_PHRASES
from toolserver.tools.base import Tool

DEFAULT_LIMIT_MESSAGE = (
    "Error: this session has reached its limit of {limit} tool calls; no more tools can be called. "
    "Give your final answer now."
)


class Alpha(StrEnum):
    """What intake does with transparency (`toolserver.imaging.to_rgb`), as the system's reference does."""

    WHITE = "white"  # composite on white
    DROP = "drop"  # discard the alpha channel, as `convert("RGB")` does


class ProfileError(ValueError):
    """A profile definition that does not check (raised at import, naming the profile and the field)."""


def _choice(profile: str, field_name: str, enum: type[StrEnum], value: Any) -> Any:
    try:
        return enum(value)
    except ValueError:
        choices = ", ".join(repr(str(m)) for m in enum)
        raise ProfileError(f"profile {profile!r}: {field_name} {value!r} is not one of {choices}") from None


@dataclass
class Profile:
    name: str
    description: str
    tools: dict[str, Tool]
    coords: Coords = Coords.REL1000
    view: ViewSettings = field(default_factory=ViewSettings)
    max_tool_calls: int | None = None
    limit_message: str = DEFAULT_LIMIT_MESSAGE
    # How `/act` reads this system's raw model output: a CallFormat, or the name of a registered one.
    call_format: CallFormat | str = "hermes"
    alpha: Alpha | str = Alpha.WHITE
    arguments: ArgumentStyle | str = ArgumentStyle.STRICT  # how tool-call arguments are read (toolserver.arguments)
    unknown_tool_template: str = "Error: unknown tool {name!r}. Available tools: {tools}."
    # Other names a system's server answers to (callable, not listed): alias -> listed tool name.
    aliases: dict[str, str] = field(default_factory=dict)
    # False: the tools read an input only through its model view (Pixel-Reasoner), so once the view is held the
    # decoded original is dropped, decoded again from its upload only if something asks for it (a thumbnail).
    reads_originals: bool = True
    # True: the tools see the session's call log (`ToolContext.calls`), for a system whose tools keep state beyond
    # the images (NeMo Gym's repeated-call checks and its forced final turn).
    reads_call_log: bool = False
    # True: a video taken in without `frames_per_second` or `max_frames` keeps every frame, and its rate and frame
    # count are kept as the session text `video:<key>` (LongVT, whose tool cuts clips from the whole video).
    keeps_every_frame: bool = False
    # Where the system's tools are an MCP server whose answer its trainer rewrites (LongVT), what that server
    # answers over MCP: (the result's text, ok) -> the text block, or None for none. None: the result's text.
    mcp_text: Callable[[str, bool], str | None] | None = None
    format: CallFormat = field(init=False, repr=False)  # `call_format`, resolved

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ProfileError(f"a profile needs a name, got {self.name!r}")
        self.coords = _choice(self.name, "coords", Coords, self.coords)
        self.alpha = _choice(self.name, "alpha", Alpha, self.alpha)
        self.arguments = _choice(self.name, "arguments", ArgumentStyle, self.arguments)
        self.format = self._resolve_format()
        if not isinstance(self.view, ViewSettings):
            raise ProfileError(f"profile {self.name!r}: view must be a ViewSettings, got {type(self.view).__name__}")
        if self.max_tool_calls is not None and (not isinstance(self.max_tool_calls, int) or self.max_tool_calls < 0):
            raise ProfileError(f"profile {self.name!r}: max_tool_calls must be None or an integer >= 0")
        for listed, tool in self.tools.items():
            if not isinstance(tool, Tool):
                raise ProfileError(f"profile {self.name!r}: tool {listed!r} is not a Tool instance")
            if listed != tool.name:
                raise ProfileError(f"profile {self.name!r}: tool {tool.name!r} is listed as {listed!r}")
        for alias, target in self.aliases.items():
            if target not in self.tools:
                raise ProfileError(f"profile {self.name!r}: alias {alias!r} points to {target!r}, which the "
                                   f"profile does not list ({', '.join(self.tools)})")
        try:
            self.unknown_tool_text("x")
            self.limit_message.format(limit=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise ProfileError(f"profile {self.name!r}: a message template does not format: {exc!r}") from None

    def _resolve_format(self) -> CallFormat:
        if isinstance(self.call_format, CallFormat):
            return self.call_format
        found = FORMATS.get(self.call_format)
        if found is None:
            raise ProfileError(f"profile {self.name!r}: call_format {self.call_format!r} is not a registered "
                               f"format ({', '.join(FORMATS)}); pass the CallFormat itself to define a new one")
        return found

    @property
    def format_name(self) -> str:
        return self.format.name

    def unknown_tool_text(self, name: str) -> str:
        return self.unknown_tool_template.format(name=name, tools=", ".join(self.tools))

    def tool(self, name: str) -> Tool | None:
        return self.tools.get(name) or self.tools.get(self.aliases.get(name, ""))

    def openai_tools(self, *, strict: bool = False, coords: Coords | None = None,
                     subs: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """The OpenAI function entries; `subs` fills placeholders that depend on the server (installed models)."""
        phrases = {"{coords}": COORD_PHRASES[coords or Coords(self.coords)], "{sr_scales}": "",
                   "{sr_scales_fallback}": ""}
        phrases.update(subs or {})
        out = []
        for name, tool in self.tools.items():
            entry = function_tool(name, tool.description, tool.Args, strict=strict)
            out.append(_substitute(entry, phrases))
        return out


def tools_by_name(*tools: Tool) -> dict[str, Tool]:
    return {tool.name: tool for tool in tools}


def _substitute(node: Any, subs: dict[str, str]) -> Any:
    if isinstance(node, str):
        replaced = node
        for old, new in subs.items():
            replaced = replaced.replace(old, new)
        # A placeholder filled with "" may leave a trailing space behind.
        return replaced.rstrip() if replaced != node else node
    if isinstance(node, dict):
        return {k: _substitute(v, subs) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, subs) for v in node]
    return node
