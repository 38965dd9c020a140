"""The call-format contract: how one system's model writes tool calls in its text, how the system runs the calls
of one turn, and how it feeds the results back.

A `CallFormat` parses a model turn into calls (never raising: whatever is malformed becomes a model-readable
error, in that system's words where it has them), holds its `TurnRule`, and renders the observation: the chat
messages to append and, for systems that append raw text to the token stream, that text (`prompt`).

The image rule of `prompt`: each image is written as the system's rollout writes it into the token stream before
its processor expands it, Qwen-VL's `<|vision_start|><|image_pad|><|vision_end|>` (`VISION_TOKENS`) for every
built-in system; `prompt(results, image)` writes `image` there instead, so a session can ask for the bare
`<image>` tag (`image_marker: "image_tag"`) when its trainer puts in its own tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from toolserver import jsonio
from toolserver.messages import image_part
from toolserver.models import ToolResult

NO_TOOL_CALL = "no_tool_call"  # error code of an environment's own reply to a text without a call
IMAGE_TOKEN = "<image>"
VISION_TOKENS = "<|vision_start|><|image_pad|><|vision_end|>"  # Qwen-VL's image placeholder, before expansion
IMAGE_MARKERS = {"vision_tokens": VISION_TOKENS, "image_tag": IMAGE_TOKEN}  # a session's `image_marker`
# Qwen's chat markup around a user turn, for systems that append their observation as raw text.
QWEN_USER_TURN = ("<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")

HERMES_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass
class ParsedCall:
    name: str
    arguments: dict[str, Any] | str  # a string: the argument JSON as written, read by the profile's rules


@dataclass
class Parsed:
    format: str
    calls: list[ParsedCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # What the environment itself answers when the text holds no call (not a tool result: Groundlight's env
    # sends it bare, where tool errors are wrapped in <result>).
    notices: list[str] = field(default_factory=list)
    # The environment ends the episode after this text (None: the general rule, no call means done).
    done: bool | None = None

    @property
    def is_action(self) -> bool:
        """The text asks for a tool at all: a call, or a broken one that the tool answers (an empty error is a
        text the system does not take as an action, e.g. Pixel-Reasoner's unknown action name)."""
        return bool(self.calls) or any(self.errors)


@dataclass(frozen=True)
class TurnRule:
    """How a system runs the calls of one model turn, where it differs from running each call in order."""

    stop_at_failure: bool = False  # a failed call ends the turn; the calls after it do not run
    errors_last: bool = False  # a broken call is reached only after the calls before it ran (and succeeded)
    max_calls: int | None = None  # calls of one turn that run; later ones are not read (None: all)


def read_json(text: str) -> tuple[Any, str | None]:
    """The JSON value of `text`, or None and why not (bounded nesting: `toolserver.jsonio`)."""
    try:
        return jsonio.loads(text), None
    except (json.JSONDecodeError, ValueError) as exc:
        return None, str(exc)


class CallFormat:
    """Subclasses set `name`, `description`, and implement `parse`; most override `observation`."""

    name: ClassVar[str]
    description: ClassVar[str]
    turn: ClassVar[TurnRule] = TurnRule()

    def parse(self, text: str) -> Parsed:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, text: str) -> Parsed:
        """`parse`, with a parser bug reaching the model as text instead of an HTTP 500."""
        try:
            return self.parse(text)
        except Exception as exc:
            return Parsed(self.name, errors=[f"Error: could not read the tool call: {exc}"])

    def finish(self, results: list[ToolResult]) -> list[ToolResult]:
        """The turn's results as the system reports them (some environments reword failures)."""
        return results

    def ends(self, parsed: Parsed, results: Sequence[ToolResult]) -> bool:
        """Whether the environment ends the episode after this turn: as the parser said, else when the text held
        no call. (An environment whose results can end it too says so here.)"""
        return parsed.done if parsed.done is not None else not (parsed.calls or parsed.errors or parsed.notices)

    def observation(self, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
        """One `user` message per result: its text, then its images."""
        messages: list[dict[str, Any]] = []
        for result in results:
            images = [image_part(img) for img in result.images]
            content = [{"type": "text", "text": result.text}, *images] if images else result.text
            messages.append({"role": "user", "content": content})
        return messages

    def prompt(self, results: Sequence[ToolResult], image: str = VISION_TOKENS) -> str | None:
        """The observation as the raw text the system appends to its token stream, `image` written where each
        image goes (the module docstring's rule); None for chat systems."""
        return None


class RawTextFormat(CallFormat):
    """A system whose turn runs one call and whose observation is that call's text, appended to the token stream
    as it is (`prompt`), `<image>` marking each image; as chat, one user message with the images in place."""

    @staticmethod
    def last_text(results: Sequence[ToolResult]) -> str | None:
        return results[-1].text if results else None

    def observation(self, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
        return raw_text_messages(self.last_text(results), results)


def raw_text_messages(text: str | None, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
    """A raw-text observation as one `user` message, each `<image>` in the text replaced by the next image."""
    if text is None:
        return []
    images = [image_part(img) for r in results for img in r.images]
    pieces = text.split(IMAGE_TOKEN)
    if not images or len(pieces) - 1 != len(images):  # nothing to fill in (an error text): the text as it is
        return [{"role": "user", "content": text}]
    content: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        if piece:
            content.append({"type": "text", "text": piece})
        if i < len(images):
            content.append(images[i])
    return [{"role": "user", "content": content}]
