"""Call format `deepeyes` (VisualToolBoxV5.execute): what ends the episode, the three-call turn, Python's words for
a broken block, and the observation text (tool responses then TURN_PROMPT_V5, or one error alone)."""

from toolserver.formats import get_format, parse
from toolserver.formats.base import VISION_TOKENS
from toolserver.formats.deepeyes import TOOL_RESPONSE, TURN_PROMPT
from toolserver.models import ErrorInfo, ResultImage, ToolResult

CALL = '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [0, 0, 9, 9]}}</tool_call>'


def test_an_answer_or_no_call_ends_the_episode():
    assert parse("<answer>cat</answer>" + CALL, "deepeyes").done is True
    assert parse("just thinking", "deepeyes").done is True
    assert parse("<answer></answer>" + CALL, "deepeyes").done is False  # an empty answer does not count


def test_three_calls_a_turn_and_the_first_broken_block_ends_the_list():
    parsed = parse(CALL * 4, "deepeyes")
    assert len(parsed.calls) == 3 and parsed.errors == []
    broken = parse(CALL + '<tool_call>{"name": "x"}</tool_call>' + CALL, "deepeyes")
    assert len(broken.calls) == 1 and broken.errors == ["Error: 'arguments'"]
    assert get_format("deepeyes").turn.max_calls == 3


def test_the_observation_text():
    image = ResultImage(key="observation_1", index=1, width=2, height=2, mime="image/png", data="AA==")
    ok = ToolResult(ok=True, tool="t", text="", images=[image, image])
    prompt = get_format("deepeyes").prompt([ok], image="<image>")
    assert prompt == "<|im_end|>\n<|im_start|>user\n" + TOOL_RESPONSE * 2 + TURN_PROMPT + \
        "<|im_end|>\n<|im_start|>assistant\n"
    assert get_format("deepeyes").prompt([ok]) == prompt.replace("<image>", VISION_TOKENS)  # as its rollout writes
    failed = ToolResult(ok=False, tool="t", text="Error: boom", error=ErrorInfo(code="x", message="Error: boom"))
    assert get_format("deepeyes").observation([ok, failed]) == [{"role": "user", "content": "Error: boom"}]
    assert get_format("deepeyes").prompt([]) == ""
