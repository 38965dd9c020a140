"""Call format `qwen-agent` (Qwen-Agent's NousFnCallPrompt): only the text after thinking, JSON5 blocks, and the
string-search fallback for a block that does not parse; arguments reach the tool as JSON text."""

from toolserver.formats import parse


def test_only_the_text_after_thinking_is_read():
    call = '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [1, 2, 3, 4]}}</tool_call>'
    assert parse("<think>" + call, "qwen-agent").calls == []
    parsed = parse("<think>" + call + "</think>" + call, "qwen-agent")
    assert len(parsed.calls) == 1 and parsed.calls[0].arguments == '{"bbox_2d": [1, 2, 3, 4]}'


def test_json5_and_the_fallback_search():
    json5 = parse("<tool_call>{name: 'image_zoom_in_tool', arguments: {bbox_2d: [1, 2, 3, 4],}}</tool_call>",
                  "qwen-agent")
    assert json5.calls[0].name == "image_zoom_in_tool"
    fallback = parse('<tool_call> x "name": "image_zoom_in_tool", "arguments": {"bbox_2d": [1,2,3,4]}} oops'
                     "</tool_call>", "qwen-agent")
    assert fallback.calls[0].name == "image_zoom_in_tool"
    assert fallback.calls[0].arguments == '{"bbox_2d": [1,2,3,4]}} oop'
    unclosed = parse('<tool_call> "name": "zoom", "arguments": {"a": 1}}', "qwen-agent")
    assert unclosed.calls[0].name == "zoom"
