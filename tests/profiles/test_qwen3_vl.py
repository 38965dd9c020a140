"""Golden tests of profile `qwen3-vl`: Qwen-Agent's official Qwen3-VL image_zoom_in_tool.

Qwen-Agent reads arguments leniently and validates them against the tool's schema (QwenLM/Qwen-Agent d04611b:
utils.json_loads, BaseTool._verify_json_format_args, Agent._call_tool, NousFnCallPrompt.postprocess_fncall_messages);
the expected texts are its own. Sizes are worked out by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import pytest
from PIL import Image

from tests.conftest import gradient, png_bytes
from tests.profiles.helpers import ZOOM, SRC_1000x800, act_image, call, image_of, make_session, tool_call

SRC = SRC_1000x800
GOOD_ARGS = {"img_idx": 0, "label": "sign", "bbox_2d": [250, 250, 750, 750]}
# Qwen-Agent's crop of that box on the raw 1000x800 image: 500x400, smart_resize(factor 32, min 256*32*32) → 576x480.
EXPECTED_CROP = SRC.crop((250, 200, 750, 600)).resize((576, 480), Image.Resampling.BICUBIC)
MISSING_LABEL = ("An error occurred when calling tool `image_zoom_in_tool`:", "ValidationError: 'label' is a required "
                 "property")


def first_lines(text: str) -> tuple[str, str]:
    header, message, *_ = text.split("\n")
    return header, message


def test_qwen3vl_zoom_on_raw_image(client):
    sid = make_session(client, "qwen3-vl", SRC_1000x800)
    r = call(client, sid, "image_zoom_in_tool", {"img_idx": 0, "label": "x", "bbox_2d": [250, 250, 750, 750]})
    # raw 1000x800: box 250,200,750,600 (500x400); smart_resize: 512 x round(12.5)=12 → 384 (half-to-even),
    # 196608 < 262144 → beta 1.14487 → ceil(17.89)=18 → 576, ceil(14.31)=15 → 480.
    assert r["ok"] and r["text"] == ""
    out = image_of(r)
    assert out.size == (576, 480)
    assert out.tobytes() == SRC_1000x800.crop((250, 200, 750, 600)).resize((576, 480), Image.Resampling.BICUBIC).tobytes()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"img_idx": 0, "bbox_2d": [600, 0, 500, 500]}, "Tool Execution Error Coordinate 'right' is less than 'left'"),
        ({"img_idx": 0, "bbox_2d": [500, 0, 500, 500]}, "Tool Execution Error float division by zero"),
        ({"img_idx": 0.0, "bbox_2d": [0, 0, 500, 500]}, "Error: Invalid input image ['original_image']"),
        ({"img_idx": 3, "bbox_2d": [0, 0, 500, 500]}, "Error: Invalid input image ['original_image']"),
    ],
)
def test_qwen3vl_errors(client, args, expected):
    sid = make_session(client, "qwen3-vl", SRC_1000x800)
    r = call(client, sid, "image_zoom_in_tool", {**args, "label": "x"})
    assert r["ok"] is False and r["text"] == expected


# Qwen-Agent validates the arguments against the tool's schema (jsonschema) before the tool runs, and its
# agent reports the exception as `An error occurred when calling tool ...` (toolserver/arguments.py).
@pytest.mark.parametrize(
    ("args", "first_line"),
    [
        ({"img_idx": 0, "label": "x", "bbox_2d": [0, 0, 500]}, "ValidationError: [0, 0, 500] is too short"),
        ({"label": "x", "bbox_2d": [0, 0, 500, 500]}, "ValidationError: 'img_idx' is a required property"),
        ({"img_idx": 0, "bbox_2d": [0, 0, 500, 500]}, "ValidationError: 'label' is a required property"),
    ],
)
def test_qwen3vl_schema_errors(client, args, first_line):
    sid = make_session(client, "qwen3-vl", SRC_1000x800)
    r = call(client, sid, "image_zoom_in_tool", args)
    assert r["ok"] is False
    header, message, *_ = r["text"].split("\n")
    assert (header, message) == ("An error occurred when calling tool `image_zoom_in_tool`:", first_line)
    assert r["text"].endswith("\nTraceback:\n")


def test_qwen3vl_clamps_and_negative_index(client):
    sid = make_session(client, "qwen3-vl", gradient(100, 100), SRC_1000x800)
    r = call(client, sid, "image_zoom_in_tool", {"img_idx": -1, "label": "", "bbox_2d": [-100, 0, 500, 500]})
    assert r["ok"] and r["meta"]["source"] == "original_image_1"
    assert r["meta"]["box_original"] == [0, 0, 500.0, 400.0]  # x1 clamped from -100 to 0
    assert image_of(r).size == (576, 480)


@pytest.mark.parametrize("arguments", [
    '```json\n{"img_idx": 0, "label": "sign", "bbox_2d": [250, 250, 750, 750]}\n```',  # a fenced block
    "{img_idx: 0, label: 'sign', bbox_2d: [250, 250, 750, 750,],}",  # JSON5: bare keys, quotes, trailing commas
    '\n{"img_idx": 0, "label": "sign", "bbox_2d": [250, 250, 750, 750]}\n',
], ids=["fenced", "json5", "newlines"])
def test_qwen_agent_reads_fenced_and_json5_arguments(client, arguments):
    sid = make_session(client, "qwen3-vl", SRC)
    body = client.post(f"/v1/sessions/{sid}/tool_calls", json={"tool_calls": [tool_call(arguments)]}).json()
    result = body["results"][0]
    assert result["ok"], result["text"]
    assert image_of(result).tobytes() == EXPECTED_CROP.tobytes()


def test_qwen_agent_refusals_in_its_own_words(client):
    sid = make_session(client, "qwen3-vl", SRC)
    bad_json = client.post(f"/v1/sessions/{sid}/tool_calls",
                           json={"tool_calls": [tool_call("{img_idx: 0, label: 'sign'")]}).json()["results"][0]
    assert bad_json["text"] == ("An error occurred when calling tool `image_zoom_in_tool`:\nValueError: Parameters must "
                                "be formatted as a valid JSON!\nTraceback:\n")
    no_label = call(client, sid, ZOOM, {"img_idx": 0, "bbox_2d": [250, 250, 750, 750]})
    assert not no_label["ok"] and first_lines(no_label["text"]) == MISSING_LABEL
    # jsonschema's own account follows, the schema printed as Qwen-Agent declares it.
    assert "Failed validating 'required' in schema:\n    {'type': 'object',\n     'properties': {'bbox_2d'" in no_label[
        "text"]
    unknown = client.post(f"/v1/sessions/{sid}/tool_calls",
                          json={"tool_calls": [tool_call("{}", name="crop")]}).json()["results"][0]
    assert unknown["text"] == "Tool crop does not exists."


def test_qwen_agent_act_reads_tool_calls_with_json5_and_its_fallback(client):
    sid = make_session(client, "qwen3-vl", SRC)
    text = ("<think>zoom on the sign</think>\n<tool_call>\n{'name': 'image_zoom_in_tool', 'arguments': "
            "{'img_idx': 0, 'label': 'sign', 'bbox_2d': [250, 250, 750, 750],}}\n</tool_call>")
    body = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    assert body["format"] == "qwen-agent"
    assert json.loads(body["calls"][0]["arguments"]) == GOOD_ARGS
    assert act_image(body).tobytes() == EXPECTED_CROP.tobytes()
    message = body["observation"][0]
    assert message["role"] == "tool" and [p["type"] for p in message["content"]] == ["image_url"]
    # Missing label, through /act: the same validation error.
    text = '<tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"img_idx": 0, "bbox_2d": [0, 0, 500, 500]}}\n</tool_call>'
    missing = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()["results"][0]
    assert first_lines(missing["text"]) == MISSING_LABEL
    # Unparseable: Qwen-Agent's string search still finds the name, and the argument text fails as JSON.
    text = '<tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"img_idx": 0, "bbox_2d": [0, 0\n</tool_call>'
    broken = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    assert broken["calls"][0]["name"] == ZOOM
    assert "ValueError: Parameters must be formatted as a valid JSON!" in broken["results"][0]["text"]
    # A tool call inside an unfinished thought is not read.
    assert client.post(f"/v1/sessions/{sid}/act", json={"text": "<think>maybe <tool_call>{}</tool_call>"}).json()[
        "calls"] == []


def test_qwen_agent_arguments_through_mcp(live_server):
    from mcp import Client

    async def main():
        async with Client(f"{live_server.url}/mcp?profile=qwen3-vl") as mcp:
            await mcp.call_tool("load_image", {"data": base64.b64encode(png_bytes(SRC)).decode()})
            missing = await mcp.call_tool(ZOOM, {"img_idx": 0, "bbox_2d": [250, 250, 750, 750]})
            good = await mcp.call_tool(ZOOM, GOOD_ARGS)
            return missing, good

    missing, good = asyncio.run(asyncio.wait_for(main(), 60))
    assert missing.is_error and first_lines(missing.content[0].text) == MISSING_LABEL
    assert not good.is_error
    crop = Image.open(io.BytesIO(base64.b64decode(next(b for b in good.content if b.type == "image").data)))
    assert crop.convert("RGB").tobytes() == EXPECTED_CROP.tobytes()


@pytest.mark.parametrize("instance", [{"img_idx": 0, "bbox_2d": [1, 2, 3]}, {"label": 5}, [1, 2],
                                      {"img_idx": "0", "label": "x", "bbox_2d": [1, 2, 3, "4"]}])
def test_the_cached_validator_says_what_jsonschema_validate_says(instance):
    import jsonschema

    from toolserver.arguments import read_arguments
    from toolserver.errors import ToolFailure
    from toolserver.profiles.qwen3_vl import QWEN_AGENT_PARAMETERS

    with pytest.raises(jsonschema.ValidationError) as direct:
        jsonschema.validate(instance=instance, schema=QWEN_AGENT_PARAMETERS)
    with pytest.raises(ToolFailure) as ours:
        read_arguments("qwen-agent", ZOOM, instance, lambda: QWEN_AGENT_PARAMETERS)
    assert ours.value.text == f"An error occurred when calling tool `{ZOOM}`:\nValidationError: {direct.value}\nTraceback:\n"
