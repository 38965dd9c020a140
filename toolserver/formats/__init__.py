"""Call formats: how each system's model writes tool calls in text, runs a turn and gets results back.

`FORMATS` is the registry (built-in formats here, plugins' at start-up); `/act`'s `format` field and its
OpenAPI enum are generated from it, and `parse(text, name)` reads a text in a named format.
"""

from __future__ import annotations

from toolserver.errors import BadRequest
from toolserver.formats.base import CallFormat, Parsed, ParsedCall, TurnRule
from toolserver.formats.deepeyes import DEEPEYES
from toolserver.formats.groundlight import GROUNDLIGHT
from toolserver.formats.hermes import HERMES
from toolserver.formats.mags_rl import MAGS_RL
from toolserver.formats.mgpo import MGPO
from toolserver.formats.mini_o3 import MINI_O3
from toolserver.formats.mmsearch_r1 import MMSEARCH_R1
from toolserver.formats.nemo_gym import NEMO_GYM
from toolserver.formats.pixel_reasoner import PIXEL_REASONER
from toolserver.formats.qwen_agent import QWEN_AGENT
from toolserver.formats.vrag import VRAG
from toolserver.registry import Registry

__all__ = ["FORMATS", "CallFormat", "Parsed", "ParsedCall", "TurnRule", "get_format", "parse", "register_format"]

FORMATS: Registry[CallFormat] = Registry("call format", lambda fmt: fmt.name)
for _builtin in (HERMES, GROUNDLIGHT, MAGS_RL, MGPO, MINI_O3, QWEN_AGENT, DEEPEYES, PIXEL_REASONER, NEMO_GYM,
                 VRAG, MMSEARCH_R1):
    FORMATS.register(_builtin)


def register_format(fmt: CallFormat, source: str = "builtin") -> CallFormat:
    if not isinstance(fmt, CallFormat):
        raise TypeError(f"a call format must be a CallFormat instance, got {type(fmt).__name__}")
    return FORMATS.register(fmt, source)


def get_format(name: str) -> CallFormat:
    found = FORMATS.get(name)
    if found is None:
        raise BadRequest(f"unknown call format {name!r}; formats: auto, {', '.join(FORMATS)}",
                         code="unknown_format")
    return found


def parse(text: str, name: str) -> Parsed:
    """The calls in `text` as the format `name` reads them (never raises for any text)."""
    return get_format(name).read(text)
