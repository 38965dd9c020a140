"""The episode's text as a reference's reward reads it, rebuilt from the assistant turns and the call log.

verl-based references score the decoded response of the whole episode: each assistant turn followed by the
observation the environment appended (the tool-response turn, in the chat markup, with the images' vision tokens).
Given the turns, `rebuild` puts them together with the observation the profile's call format renders for each
turn's calls, taken from the call log in order: each turn's calls are the ones its format reads from it, run as
its turn rule runs them (stopping at a failure where it stops), exactly as `/act` ran them.
"""

from __future__ import annotations

from toolserver.formats.base import NO_TOOL_CALL, VISION_TOKENS, CallFormat
from toolserver.models import ErrorInfo, ResultImage, ToolResult
from toolserver.rewards.base import Episode, Step

_IMAGE = ResultImage(key="", index=0, width=0, height=0, mime="image/png")  # only the count reaches the text


def result_of(step: Step) -> ToolResult:
    """A call-log step as the tool result the format rendered (its text, its images' count, its failure)."""
    error = None if step.ok else ErrorInfo(code=step.error_code or "tool_error", message=step.text)
    return ToolResult(ok=step.ok, tool=step.tool, text=step.text, images=[_IMAGE] * step.images, error=error,
                      meta=dict(step.meta))


def turn_results(call_format: CallFormat, turn: str, steps: list[Step], start: int) -> tuple[list[ToolResult], int]:
    """The results `/act` rendered for one turn, and where the next turn's calls start in `steps`."""
    parsed = call_format.read(turn)
    rule = call_format.turn
    parser = [ToolResult(ok=False, tool="parser", text=text, error=ErrorInfo(code=code, message=text))
              for texts, code in ((parsed.notices, NO_TOOL_CALL), (parsed.errors, "parse_error")) for text in texts]
    results: list[ToolResult] = [] if rule.errors_last else list(parser)
    position = start
    for _ in parsed.calls:
        if position >= len(steps):
            break
        results.append(result_of(steps[position]))
        position += 1
        if rule.stop_at_failure and not results[-1].ok:
            break
    if rule.errors_last and all(r.ok for r in results):
        results += parser
    return call_format.finish(results), position


def rebuild(episode: Episode, call_format: CallFormat, image: str = VISION_TOKENS) -> str:
    """Every turn, each but the last followed by the observation its calls got (`call_format.prompt`)."""
    steps = list(episode.calls)
    position = 0
    parts: list[str] = []
    for i, turn in enumerate(episode.turns):
        parts.append(turn)
        if i == len(episode.turns) - 1:
            break
        results, position = turn_results(call_format, turn, steps, position)
        parts.append(call_format.prompt(results, image=image) or "")
    return "".join(parts)


def episode_text(episode: Episode, call_format: CallFormat, image: str = VISION_TOKENS) -> str:
    """`rebuild` when the turns are given, else `response` as given (the decoded response itself)."""
    return rebuild(episode, call_format, image) if episode.turns else episode.response


TOOL_TURN = "\nuser\n<tool_response>\n{text}\n</tool_response>\nassistant\n"


def with_tool_turns(episode: Episode, call_format: CallFormat) -> str:
    """The decoded response of a verl agent loop (special tokens skipped): each turn followed by one tool message
    per call it made, `TOOL_TURN` with the call's text (what the reward functions count and split on). `response`
    as given when no turns are."""
    if not episode.turns:
        return episode.response
    steps, position, parts = list(episode.calls), 0, []
    for i, turn in enumerate(episode.turns):
        parts.append(turn)
        if i < len(episode.turns) - 1:
            results, position = turn_results(call_format, turn, steps, position)
            parts += [TOOL_TURN.format(text=r.text) for r in results]
    return "".join(parts)
