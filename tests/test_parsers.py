"""Call-format parsers: malformed inputs give documented results and never raise."""

import pytest

from toolserver.parsers import FORMATS, parse


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


def test_groundlight_key_values():
    parsed = parse("<think>hm</think>\n<tool>\n  name: zoom  \nkeypoint: [23, 44]\n</tool>\ntrailing", "groundlight")
    assert [(c.name, c.arguments) for c in parsed.calls] == [("zoom", {"keypoint": [23, 44]})]
    dup = parse("<tool>\nname: zoom\nkeypoint: [1, 1]\nkeypoint: [2, 2]\n</tool>", "groundlight")
    assert dup.calls[0].arguments == {"keypoint": [2, 2]}  # later keys overwrite


def test_mags_rl_grammar():
    parsed = parse("<think>x <zoom>[[1, 2, 3, 4], [5, 6, 7, 8]]</zoom></think>", "mags-rl")
    assert parsed.calls[0].arguments == {"boxes": [[1, 2, 3, 4], [5, 6, 7, 8]]}
    for bad in ("<zoom>[[1, 2, 3, 4]</zoom>", "<zoom>[]</zoom>", "<zoom>[1, 2, 3, 4]</zoom>"):
        assert parse(bad, "mags-rl").errors[0].startswith("Zoom failed: cannot read the boxes"), bad
    assert parse("<answer>3</answer>", "mags-rl").errors == []


def test_mgpo_first_valid_block_wins():
    text = ('```json\n[{"bbox_2d": [1, 2, 3.5, 4], "label": "a"}]\n```\n'
            '```json\n[{"bbox_2d": [10, 20, 30, 40], "label": "b"}, {"bbox_2d": [0, 0, 1, 1], "label": "c"}]\n```')
    parsed = parse(text, "mgpo")
    assert parsed.calls[0].arguments == {"bbox_2d": [10, 20, 30, 40], "label": "b"}
    # No newline after ```json: not MGPO's fence, so the original image comes back.
    assert parse('```json [{"bbox_2d": [1, 2, 3, 4], "label": "a"}]\n```', "mgpo").calls[0].arguments["bbox_2d"] is None


def test_mini_o3_grounding():
    parsed = parse('<grounding>{"bbox_2d": [0.1, 0.2, 0.5, 0.6], "source": "observation_1"}</grounding>', "mini-o3")
    assert parsed.calls[0].arguments == {"image": "observation_1", "bbox_2d": [0.1, 0.2, 0.5, 0.6]}
    bad = parse("<grounding>{bbox}</grounding>", "mini-o3")
    assert bad.errors[0].startswith("ERROR occurs during grounding. Error Information:")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("text", ["", "<tool_call>", "</tool_call><tool_call>", "<tool>\n</tool>", "```json\n\n```",
                                  "<zoom></zoom>", "<grounding></grounding>", "\x00\uffff" * 100, "{" * 10000,
                                  '<tool_call>{"name": 1}</tool_call>', "<tool>name: zoom\nkeypoint: 1e999</tool>"])
def test_never_raises(fmt, text):
    parsed = parse(text, fmt)
    assert parsed.format == fmt


def test_act_reports_parse_errors_as_results(client):
    from tests.conftest import b64, gradient, png_bytes
    sid = client.post("/v1/sessions", json={"images": [{"data": b64(png_bytes(gradient(50, 50)))}]}).json()["session_id"]
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": "<tool_call>{broken</tool_call>"}).json()
    assert r["calls"][0]["error"].startswith("Error: tool call 1 is not valid JSON")
    assert r["results"][0]["ok"] is False and r["results"][0]["error"]["code"] == "parse_error"
    assert r["observation"] == [{"role": "tool", "content": r["results"][0]["text"]}]
    mini = client.post(f"/v1/sessions/{sid}/act", json={"format": "mini-o3", "text": '<grounding>{"bbox_2d": '
                       '[0, 0, 500, 500], "source": "original_image"}</grounding>'}).json()
    assert mini["results"][0]["ok"] and mini["results"][0]["images"][0]["width"] == 28  # 25 px grows to 28
