"""OpenThinkIMG's action JSON (`toolserver/formats/openthinkimg.py`) as its GRPO rollout reads a turn
(`parse_tool_config`'s pattern and checks) and the message it writes back (`handle_tool_result`); the texts and
images its own code wrote are checked against the golden sessions in tests/profiles/test_openthinkimg.py."""

from __future__ import annotations

import pytest

from toolserver.formats import parse
from toolserver.formats.openthinkimg import OPENTHINKIMG, first_action, read_actions, rollout_text
from toolserver.models import ResultImage, ToolResult


@pytest.mark.parametrize(("text", "expected"), [
    ('{"thought": "t", "actions": [{"name": "OCR", "arguments": {"image": "img_2"}}]}', ("OCR", {"image": "img_2"})),
    ('prose "actions" : [{"name": "Point", "arguments": {"image": "img_1", "param": "[1, [2]]"}}] more',
     ("Point", {"image": "img_1", "param": "[1, [2]]"})),
    ('"actions": [{"name": "A", "arguments": {}}, {"name": "B", "arguments": {}}]', ("A", {})),  # the first only
    ('"actions": []', None),  # empty: no call
    ('"actions": [{"name": "OCR"}]', None),  # no arguments
    ('"actions": [{"arguments": {}}]', None),  # no name
    ('"actions": [{"name": "A", "arguments": {}}, {"name": "B"}]', None),  # a later action that does not read
    ('"actions": [{"name": "OCR", "arguments": ["image"]}]', None),  # names an image, cannot take it
    ('"actions": [{"name": "OCR", "arguments": "the image"}]', None),
    ('"actions": [{"name": "OCR", "arguments": "no picture"}]', ("OCR", "no picture")),
    ('"actions": [{"name": "OCR", "arguments": 3}]', None),
    ('"actions": ["OCR"]', None),
    ("'actions': [{'name': 'OCR', 'arguments': {}}]", None),  # Python quotes: not JSON
    ('"actions": [{"name": "OCR", "arguments": {"param": [[[[1]]]]}}]', None),  # five deep: past the pattern
    ('"actions": [{"name": "OCR", "arguments": {"param": [[[1]]]}}]', ("OCR", {"param": [[[1]]]})),
])
def test_the_first_action(text, expected):
    assert first_action(text) == expected


def test_turns():
    assert parse('I will Terminate. "actions": [{"name": "OCR", "arguments": {}}]', "openthinkimg").done is True
    assert parse("terminate", "openthinkimg").done is False  # the check is case-sensitive
    call = parse('"actions": [{"name": "drawhorizontallinebyy", "arguments": {"image": "img_3", "param": "y=2"}}]',
                 "openthinkimg")
    assert call.done is False and [(c.name, c.arguments) for c in call.calls] == [
        ("drawhorizontallinebyy", {"image": "img_3", "param": "y=2"})]  # the name as written: the profile maps it
    odd = OPENTHINKIMG.parse('"actions": [{"name": 7, "arguments": "no picture"}]')
    assert [(c.name, c.arguments) for c in odd.calls] == [("7", {})]
    none = OPENTHINKIMG.parse("no tool")
    assert none.done is False and not none.calls and not none.notices and not OPENTHINKIMG.ends(none, [])
    assert read_actions('"actions": {"name": "x"}') is None


def test_the_message_written_back():
    image = ResultImage(key="img_2", index=1, width=2, height=2, mime="image/jpeg", data="AAAA")
    drawn = ToolResult(ok=True, tool="drawverticallinebyx", text="Line drawn successfully.", images=[image],
                       meta={"rollout": "observation"})
    [message] = OPENTHINKIMG.observation([drawn])
    assert message["role"] == "user" and [part["type"] for part in message["content"]] == ["image_url", "text"]
    assert message["content"][1]["text"] == ("OBSERVATION:\ndrawverticallinebyx model outputs: Line drawn "
                                             "successfully.\nPlease summarize the model outputs and answer my "
                                             "first question.")
    fell_back = ToolResult(ok=False, tool="ZoomInSubfigure", text="Select subplot done.",
                           meta={"rollout": "question", "question": "Which year?"})
    assert rollout_text(fell_back) == "Which year?"
    assert OPENTHINKIMG.observation([]) == [] and OPENTHINKIMG.prompt([drawn]) is None
