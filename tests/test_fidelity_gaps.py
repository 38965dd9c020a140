"""The last seed-fidelity gaps, one golden case each, with values derived from the reference code:

1. Qwen-Agent reads arguments leniently and validates them (QwenLM/Qwen-Agent d04611b: utils.json_loads,
   BaseTool._verify_json_format_args, Agent._call_tool, NousFnCallPrompt.postprocess_fncall_messages).
2. MGPO's truncate_at_json_bbox rejects a fenced list holding anything but objects (xinyu1205/verl, mgpo).
3. A view rule given only a factor takes qwen-vl-utils' bounds for that factor (vision_process.py 0.0.14).
4. Groundlight's env_response sends "No tool call or answer found" bare (r1_vlm tool_vision_env.py).
5. A trainer's own `observation_N` upload moves the observation counter (ARM-Thinker's imgs_map naming).
6. MGPO keeps the colour under transparent pixels (process_image's convert("RGB")).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json

import pytest
from PIL import Image

from tests.conftest import b64, gradient, png_bytes
from tests.test_profiles import call, image_of, make_session

SRC = gradient(1000, 800)
ZOOM = "image_zoom_in_tool"
GOOD_ARGS = {"img_idx": 0, "label": "sign", "bbox_2d": [250, 250, 750, 750]}
# Qwen-Agent's crop of that box on the raw 1000x800 image: 500x400, smart_resize(factor 32, min 256*32*32) → 576x480.
EXPECTED_CROP = SRC.crop((250, 200, 750, 600)).resize((576, 480), Image.Resampling.BICUBIC)
MISSING_LABEL = ("An error occurred when calling tool `image_zoom_in_tool`:", "ValidationError: 'label' is a required "
                 "property")


def tool_call(arguments: str, name: str = ZOOM) -> dict:
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}


def first_lines(text: str) -> tuple[str, str]:
    header, message, *_ = text.split("\n")
    return header, message


# -- 1. arguments the way each system parses them ------------------------------------------------------
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


def test_strict_profiles_still_refuse_json5(client):
    sid = make_session(client, "arm-thinker-qwen3vl", SRC)  # verl: json.loads
    result = client.post(f"/v1/sessions/{sid}/tool_calls", json={
        "tool_calls": [tool_call("{img_idx: 0, label: 'sign', bbox_2d: [250, 250, 750, 750]}")]}).json()["results"][0]
    assert not result["ok"] and result["error"]["code"] == "invalid_json"


def test_qwen_agent_act_reads_tool_calls_with_json5_and_its_fallback(client):
    sid = make_session(client, "qwen3-vl", SRC)
    text = ("<think>zoom on the sign</think>\n<tool_call>\n{'name': 'image_zoom_in_tool', 'arguments': "
            "{'img_idx': 0, 'label': 'sign', 'bbox_2d': [250, 250, 750, 750],}}\n</tool_call>")
    body = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    assert body["format"] == "qwen-agent"
    assert json.loads(body["calls"][0]["arguments"]) == GOOD_ARGS
    assert image_of(body["results"][0]).tobytes() == EXPECTED_CROP.tobytes()
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


# -- 2. MGPO's fenced-JSON parse ---------------------------------------------------------------------
def test_mgpo_rejects_a_block_holding_a_non_object(client):
    sid = make_session(client, "mgpo", gradient(1000, 800))
    text = '```json\n[{"bbox_2d": [100, 100, 400, 300], "label": "sign"}, 5]\n```'
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()["results"][0]
    # truncate_at_json_bbox: `all(isinstance(item, dict) ...)` fails, no hit → the original image returns.
    assert r["ok"] is False
    assert r["text"] == "Not providing correct coordinates or invalid coordinate values, return the original image:"
    assert image_of(r).size == (1000, 800)


def test_mgpo_a_later_valid_block_still_wins(client):
    sid = make_session(client, "mgpo", gradient(1000, 800))
    text = ('```json\n[{"bbox_2d": [1, 1, 50, 50], "label": "x"}, "y"]\n```\n'
            '```json\n[{"bbox_2d": [100, 100, 400, 300], "label": "sign"}]\n```')
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()["results"][0]
    assert r["ok"] and r["meta"]["box_original"] == [99, 98, 396, 295]  # int(100/1008*1000) …, as in MGPO


# -- 3. view defaults follow qwen-vl-utils -----------------------------------------------------------
def test_a_factor_alone_takes_qwen_vl_utils_bounds_for_it(client):
    photo = Image.new("RGB", (5312, 2988), (90, 120, 30))
    sid = client.post("/v1/sessions", json={"view": {"factor": 32}, "images": [{"data": b64(png_bytes(photo))}]}).json()[
        "session_id"]
    info = client.get(f"/v1/sessions/{sid}").json()
    # max_pixels = 16384*32*32 = 16,777,216 > 5312*2976: no shrink; round(2988/32)*32 = 2976, 5312 stays.
    assert (info["images"][0]["view_width"], info["images"][0]["view_height"]) == (5312, 2976)
    assert (info["settings"]["view"]["min_pixels"], info["settings"]["view"]["max_pixels"]) == (4096, 16777216)
    explicit = client.post("/v1/sessions", json={"view": {"factor": 32, "max_pixels": 12845056},
                                                 "images": [{"data": b64(png_bytes(photo))}]}).json()
    assert (explicit["images"][0]["width"], explicit["images"][0]["height"]) == (5312, 2988)
    assert client.get(f"/v1/sessions/{explicit['session_id']}").json()["images"][0]["view_width"] == 4768


# -- 4. Groundlight's environment texts -------------------------------------------------------------
def test_groundlight_no_call_reply_is_not_wrapped(client):
    sid = make_session(client, "groundlight", gradient(640, 480))
    body = client.post(f"/v1/sessions/{sid}/act", json={"text": "<think>hmm</think>"}).json()
    assert body["observation"] == [{"role": "user", "content": "Error: No tool call or answer found in your last "
                                                               "message."}]
    tool_error = client.post(f"/v1/sessions/{sid}/act", json={"text": "<tool>\nkeypoint: [1, 2]\n</tool>"}).json()
    assert tool_error["observation"][0]["content"] == ("<result>\nError: Tool call must specify 'name' in key-value "
                                                       "format.\n</result>")


# -- 5. observation keys set by the trainer ----------------------------------------------------------
def test_an_uploaded_observation_key_moves_the_counter(settings_any_store):
    from fastapi.testclient import TestClient

    from toolserver.api import create_app

    with TestClient(create_app(settings_any_store)) as client:
        sid = make_session(client, "arm-thinker", SRC)
        up = client.post(f"/v1/sessions/{sid}/images", json={"images": [
            {"data": b64(png_bytes(gradient(300, 200))), "key": "observation_3"}]})
        assert up.status_code == 200, up.text
        r = call(client, sid, ZOOM, {"image": "observation_3", "bbox_2d": [0, 0, 500, 500]})
        assert r["ok"], r["text"]
        assert r["images"][0]["key"] == "observation_4"  # ARM-Thinker's next name after observation_3
        again = call(client, sid, ZOOM, {"image": "observation_4", "bbox_2d": [0, 0, 500, 500]})
        assert again["images"][0]["key"] == "observation_5"
        # A lower number than the counter changes nothing.
        client.post(f"/v1/sessions/{sid}/images", json={"images": [
            {"data": b64(png_bytes(gradient(300, 200))), "key": "observation_1"}]})
        last = call(client, sid, ZOOM, {"image": "original_image", "bbox_2d": [0, 0, 500, 500]})
        assert last["images"][0]["key"] == "observation_6"


# -- 6. alpha per profile ----------------------------------------------------------------------------
def translucent(width: int = 600, height: int = 400) -> Image.Image:
    """Colour everywhere, alpha 0 on the left half: composite-on-white and drop-alpha differ there."""
    image = gradient(width, height).convert("RGBA")
    image.putalpha(Image.new("L", (width, height), 255).point(lambda v: v))
    alpha = Image.new("L", (width, height), 255)
    alpha.paste(0, (0, 0, width // 2, height))
    image.putalpha(alpha)
    return image


def test_mgpo_drops_alpha_and_keeps_the_colour(client):
    image = translucent()
    sid = make_session(client, "mgpo", image)
    # 600x400 = 240000 px: inside [200704, 1003520] → no process_image resize; input 588x392 (smart_resize).
    r = call(client, sid, "grounding", {"bbox_2d": [0, 0, 294, 392], "label": "left"})
    assert r["ok"], r["text"]
    # MGPO: int(294/588*600) = 300, int(392/392*400) = 400; the 300x400 crop (120,000 px) is under
    # min_pixels, so process_image scales it by sqrt(200704/120000) = 1.2933 → int sides 387x517 (NEAREST,
    # in the image's own mode), then convert("RGB") drops alpha and keeps the colour underneath.
    assert r["meta"]["box_original"] == [0, 0, 300, 400]
    expected = image.crop((0, 0, 300, 400)).resize((387, 517), Image.Resampling.NEAREST).convert("RGB")
    assert image_of(r).convert("RGB").tobytes() == expected.tobytes()


def test_qwen_profiles_composite_on_white(client):
    image = translucent()
    sid = make_session(client, "default", image)
    r = call(client, sid, "zoom_in", {"image": 0, "bbox_2d": [0, 0, 500, 1000]})
    white = Image.new("RGB", image.size, (255, 255, 255))
    white.paste(image, mask=image.getchannel("A"))
    assert image_of(r).convert("RGB").tobytes() == white.crop((0, 0, 300, 400)).tobytes()


@pytest.mark.parametrize("instance", [{"img_idx": 0, "bbox_2d": [1, 2, 3]}, {"label": 5}, [1, 2],
                                      {"img_idx": "0", "label": "x", "bbox_2d": [1, 2, 3, "4"]}])
def test_the_cached_validator_says_what_jsonschema_validate_says(instance):
    import jsonschema

    from toolserver.arguments import read_arguments
    from toolserver.errors import ToolFailure
    from toolserver.tools.qwen3vl import QWEN_AGENT_PARAMETERS

    with pytest.raises(jsonschema.ValidationError) as direct:
        jsonschema.validate(instance=instance, schema=QWEN_AGENT_PARAMETERS)
    with pytest.raises(ToolFailure) as ours:
        read_arguments("qwen-agent", ZOOM, instance, lambda: QWEN_AGENT_PARAMETERS)
    assert ours.value.text == f"An error occurred when calling tool `{ZOOM}`:\nValidationError: {direct.value}\nTraceback:\n"
