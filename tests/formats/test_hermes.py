"""Call format `hermes`: <tool_call> JSON blocks; malformed ones give documented errors and keep the good ones."""

import pytest

from toolserver.formats import parse


def test_hermes_several_calls_with_text_around():
    text = ('Let me look.<tool_call>\n{"name": "zoom_in", "arguments": {"image": 0, "bbox_2d": [1, 2, 3, 4]}}\n'
            '</tool_call> then <tool_call>{"name": "lookback_reuse", "arguments": "{\\"image\\": 0}"}</tool_call> done')
    parsed = parse(text, "hermes")
    assert parsed.errors == []
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("zoom_in", {"image": 0, "bbox_2d": [1, 2, 3, 4]}), ("lookback_reuse", {"image": 0})]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('<tool_call>{"name": "zoom_in", "arguments": {"image": 0,}}</tool_call>', "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'must be a JSON object with a "name"'),
        ('<tool_call>["zoom_in"]</tool_call>', 'must be a JSON object with a "name"'),
        ('<tool_call>{"name": "zoom_in", "arguments": [1]}</tool_call>', '"arguments" of tool call 1 (zoom_in)'),
        ('<tool_call>{"name": "zoom_in", "arguments": "{bad"}</tool_call>', '"arguments" of tool call 1'),
        ('<tool_call>{"name": "zoom_in", "arguments": {}}', "not closed"),
    ],
)
def test_hermes_malformed(text, fragment):
    parsed = parse(text, "hermes")
    assert parsed.calls == []
    assert len(parsed.errors) == 1 and fragment in parsed.errors[0]


def test_hermes_good_and_bad_mixed_keeps_the_good():
    parsed = parse('<tool_call>{oops}</tool_call><tool_call>{"name": "a", "arguments": {}}</tool_call>', "hermes")
    assert [c.name for c in parsed.calls] == ["a"] and len(parsed.errors) == 1


def test_hermes_floats_where_integers_are_required_reach_the_tool():
    # The parser does not judge argument types; the tool's schema does (and says so in its own words).
    parsed = parse('<tool_call>{"name": "zoom", "arguments": {"keypoint": [1.5, 2]}}</tool_call>', "hermes")
    assert parsed.calls[0].arguments == {"keypoint": [1.5, 2]}
