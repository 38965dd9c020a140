"""Call format `nemo-gym`: NeMo Gym's XML and JSON <tool_call> blocks read as its own parser reads them (recorded by
running it: tests/data/nemo_gym_golden.json), one call a turn, and its observation's parts."""

import json
from pathlib import Path

import pytest

from toolserver.formats import parse
from toolserver.formats.nemo_gym import MALFORMED, NEMO_GYM, ONE_AT_A_TIME, is_malformed, parse_calls
from toolserver.models import ResultImage, ToolResult

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "nemo_gym_golden.json").read_text())


@pytest.mark.parametrize("case", GOLDEN["parsing"], ids=range(len(GOLDEN["parsing"])))
def test_calls_are_read_as_the_reference_reads_them(case):
    calls = parse_calls(case["text"])
    assert [[name, args, source] for name, args, source in calls] == case["calls"]
    assert is_malformed(case["text"], calls) == case["malformed"]
    parsed = parse(case["text"], "nemo-gym")
    assert parsed.done == (case["malformed"] or not case["calls"])
    assert [call.name for call in parsed.calls] == ([] if parsed.done else [str(case["calls"][0][0])])
    assert parsed.errors == ([MALFORMED] if case["malformed"] else [])
    assert parsed.notices == ([ONE_AT_A_TIME] if not parsed.done and len(case["calls"]) > 1 else [])


def test_arguments_that_are_not_an_object_reach_the_tool_as_they_are():
    listed = parse('<tool_call>{"name": "t", "arguments": [1]}</tool_call>', "nemo-gym").calls[0].arguments
    text = parse('<tool_call>{"name": "t", "arguments": "{}"}</tool_call>', "nemo-gym").calls[0].arguments
    assert listed == [1] and text == ["{}"]  # a text in a list, so that it is not read as JSON again


def test_the_observation_is_the_agent_s_user_message():
    image = ResultImage(key="observation_1", index=1, width=2, height=2, mime="image/jpeg", data="AAAA")
    ran = ToolResult(ok=True, tool="image_flip_tool", text='{"ok": true}', images=[image],
                     meta={"reward": 0.02, "note": ONE_AT_A_TIME})
    [message] = NEMO_GYM.observation([ran])
    assert message["role"] == "user" and [p.get("text") for p in message["content"]] == [
        "<tool_response>\n", '{"ok": true}\n', None, "\n", ONE_AT_A_TIME, "</tool_response>"]
    failed = ToolResult(ok=False, tool="image_flip_tool", text="image_flip_tool failed: x")
    assert NEMO_GYM.observation([failed]) == [
        {"role": "user", "content": "<tool_response>\nimage_flip_tool failed: x\n</tool_response>"}]
    assert NEMO_GYM.finish([failed])[0].meta == {"reward": -0.05}
    assert NEMO_GYM.prompt([ran]) is None  # a chat system: the observation is its messages
