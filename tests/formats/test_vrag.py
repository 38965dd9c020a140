"""VRAG-RL's turn (`toolserver/formats/vrag.py`): its tag filter and its first action, as `_postprocess_responses`
and `postprocess_predictions` read a response (the texts VRAG's own code kept are checked against the golden
sessions in tests/profiles/test_vrag_rl.py)."""

from __future__ import annotations

import pytest

from toolserver.formats import parse
from toolserver.formats.base import VISION_TOKENS
from toolserver.formats.vrag import INVALID_ACTION, VRAG, action_of, extract_tags
from toolserver.models import ToolResult


@pytest.mark.parametrize(("text", "expected"), [
    ("<think>t</think><search> where </search>", ("search", "where")),
    ("<search>a</search><answer>b</answer>", ("search", "a")),
    ("<answer>b</answer><search>a</search>", ("answer", "b")),
    ("<think><bbox>[1,2,3,4]</bbox></think>", ("bbox", "[1,2,3,4]")),  # inside a kept <think> block, still read
    ("<info><search>a</search></info>", ("search", "a")),  # other tags are dropped, their content's tags kept
    ("<search>a</answer>", (None, "")),
    ("<SEARCH>a</SEARCH>", (None, "")),
    ("<search>multi\nline</search>", ("search", "multi\nline")),
])
def test_the_first_action_of_the_kept_tags(text, expected):
    assert action_of(text) == expected


def test_the_tag_filter_joins_blocks_by_newlines():
    assert extract_tags("x <think>a</think> y <search>b</search> z") == "<think>a</think>\n<search>b</search>"


def test_turns():
    assert parse("<answer>done</answer>", "vrag").done is True
    search = parse("<search>q</search>", "vrag")
    assert search.done is False and [(c.name, c.arguments) for c in search.calls] == [("search", {"query": "q"})]
    none = parse("plain text", "vrag")
    assert none.done is False and not none.calls and none.notices == [INVALID_ACTION]


def test_the_prompt_is_the_text_the_rollout_appends():
    shown = ToolResult(tool="search", ok=True, text="<image>")
    assert VRAG.prompt([shown]) == f"\n<|im_start|>user\n{VISION_TOKENS}<|im_end|>\n<|im_start|>assistant\n"
    assert VRAG.prompt([shown], image="<image>") == "\n<|im_start|>user\n<image><|im_end|>\n<|im_start|>assistant\n"
    assert VRAG.prompt([]) == ""
