"""The registry: profiles, each a named set of tool instances with the conventions of one system.

`default` is the canonical toolset; the seed profiles reproduce each paper's tool environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolserver.errors import BadRequest
from toolserver.geometry import Coords
from toolserver.models import ViewSettings
from toolserver.schema import function_tool
from toolserver.tools.base import Tool
from toolserver.tools.lookback import LookbackReuse
from toolserver.tools.zoom_in import COORD_PHRASES, ZoomIn

DEFAULT_LIMIT_MESSAGE = (
    "Error: this session has reached its limit of {limit} tool calls; no more tools can be called. "
    "Give your final answer now."
)


@dataclass
class Profile:
    name: str
    description: str
    tools: dict[str, Tool]
    coords: Coords = Coords.REL1000
    view: ViewSettings = field(default_factory=ViewSettings)
    max_tool_calls: int | None = None
    limit_message: str = DEFAULT_LIMIT_MESSAGE

    def unknown_tool_text(self, name: str) -> str:
        return f"Error: unknown tool {name!r}. Available tools: {', '.join(self.tools)}."

    def openai_tools(self, *, strict: bool = False, coords: Coords | None = None) -> list[dict[str, Any]]:
        phrase = COORD_PHRASES[coords or self.coords]
        out = []
        for name, tool in self.tools.items():
            entry = function_tool(name, tool.description, tool.Args, strict=strict)
            out.append(_substitute(entry, {"{coords}": phrase}))
        return out


def _substitute(node: Any, subs: dict[str, str]) -> Any:
    if isinstance(node, str):
        for old, new in subs.items():
            node = node.replace(old, new)
        return node
    if isinstance(node, dict):
        return {k: _substitute(v, subs) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, subs) for v in node]
    return node


def _build_profiles() -> dict[str, Profile]:
    default = Profile(
        name="default",
        description="Canonical toolset: zoom_in and lookback_reuse, with any coordinate convention.",
        tools={tool.name: tool for tool in (ZoomIn(), LookbackReuse())},
    )
    return {p.name: p for p in (default,)}


PROFILES: dict[str, Profile] = _build_profiles()


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise BadRequest(f"unknown profile {name!r}; profiles: {', '.join(PROFILES)}",
                         code="unknown_profile") from None
