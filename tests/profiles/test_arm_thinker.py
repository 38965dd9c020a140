"""Golden tests of profiles `arm-thinker` and `arm-thinker-qwen3vl` (toolserver/profiles/arm_thinker.py).

Expected values are derived by hand from the systems' code (InternLM/ARM-Thinker @ 96b1baf and the others named in each
profile module's docstring) and the papers (the arithmetic is in the
comments), never by running our own code."""

import pytest
from PIL import Image

from tests.conftest import b64, gradient, png_bytes
from tests.profiles.helpers import ZOOM, SRC_1000x800, call, image_of, make_session, tool_call
from toolserver.profiles.arm_thinker import SUCCESS_TAIL

SRC = SRC_1000x800
VIEW_1008x812 = SRC_1000x800.resize((1008, 812), Image.Resampling.BICUBIC)  # fetch_image: smart_resize → 1008x812


def test_arm_zoom_success_on_the_fetch_image_view(client):
    sid = make_session(client, "arm-thinker", SRC_1000x800)
    r = call(client, sid, "image_zoom_in_tool", {"image": "original_image", "bbox_2d": [250, 250, 750, 750]})
    # 250/1000*1008 = 252, 250/1000*812 = 203, 756, 609 → 504x406, short side >= 224: no upscale.
    assert r["ok"] and r["meta"]["box_view"] == [252, 203, 756, 609]
    out = image_of(r)
    assert out.size == (504, 406)
    assert out.tobytes() == VIEW_1008x812.crop((252, 203, 756, 609)).tobytes()
    assert r["text"] == ("This is the zoom-in image `observation_1`(zoomed in on the image original_image) "
                         f"after your tool call.\n{SUCCESS_TAIL}")
    assert SUCCESS_TAIL.startswith("Continue your reasoning process within `<think>...</think>`.")


def test_arm_zoom_small_box_expands_then_doubles(client):
    sid = make_session(client, "arm-thinker", SRC_1000x800)
    r = call(client, sid, "image_zoom_in_tool", {"image": "original_image", "bbox_2d": [500, 500, 510, 510]})
    # abs box 504, 406, 514.08, 414.12: w 10.08, h 8.12 → ratio 28/8.12; target 34.7586 x 28 about the
    # centre (509.04, 410.06) → 491.66..526.42, 396.06..424.06 → floor/ceil [491, 396, 527, 425] = 36x29,
    # short side < 224 → x2 bicubic → 72x58.
    assert r["meta"]["box_view"] == [491, 396, 527, 425]
    out = image_of(r)
    assert out.size == (72, 58)
    expected = VIEW_1008x812.crop((491, 396, 527, 425)).resize((72, 58), Image.Resampling.BICUBIC)
    assert out.tobytes() == expected.tobytes()


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ({"bbox_2d": [0, 0, 10, 10]}, "Error: image parameter is missing."),
        ({"image": "original_image", "bbox_2d": [1, 2, 3]}, "Error: bbox_2d must be a list of 4 numbers, got [1, 2, 3]."),
        ({"image": "original_image"}, "Error: bbox_2d must be a list of 4 numbers, got None."),
        ({"image": "original_image", "bbox_2d": 5}, "Error: bbox_2d must be a list of 4 numbers, got 5."),
        ({"image": "original_image", "bbox_2d": ["a", 0, 1, 2]},
         "Error: bbox_2d contains non-numeric values: ['a', 0, 1, 2]."),
        ({"image": "original_image", "bbox_2d": [0, 0, 1200, 500]},
         "Error: bbox_2d[2]=1200.0 out of range [0,1000], full bbox=[0, 0, 1200, 500]."),
        ({"image": "original_image", "bbox_2d": [500, 0, 100, 500]},
         "Error: bbox_2d must satisfy x1<x2 and y1<y2, got [500, 0, 100, 500]."),
        ({"image": "original_image", "bbox_2d": [0, 500, 1000, 501]},  # 1008 x 0.812: aspect > 100 before expansion
         "Error: crop failed after adjustment, original bbox=[0, 500, 1000, 501]. The specified region is invalid "
         "or results in a crop smaller than 28x28 pixels. Please provide a larger valid region."),
        ({"image": "observation_9", "bbox_2d": [0, 0, 10, 10]},
         "Error processing image zoom-in: Cannot resolve image key 'observation_9'. Current images you have are: "
         "['original_image']. You can call this tool like this: <tool_call>\n{{\"name\": \"image_zoom_in_tool\", "
         "\"arguments\": {{\"image\": \"original_image\", \"bbox_2d\": [100, 100, 900, 900]}}}}\n</tool_call>"),
    ],
)
def test_arm_zoom_error_texts(client, args, text):
    sid = make_session(client, "arm-thinker", SRC_1000x800)
    r = call(client, sid, "image_zoom_in_tool", args)
    assert r["ok"] is False
    assert r["text"] == text
    assert r["images"] == []


def test_arm_zoom_nan_and_string_numbers(client):
    sid = make_session(client, "arm-thinker", SRC_1000x800)
    r = client.post(f"/v1/sessions/{sid}/tools/image_zoom_in_tool", content=b'{"image": "original_image", '
                    b'"bbox_2d": [NaN, 0, 10, 10]}', headers={"content-type": "application/json"}).json()
    assert r["text"] == "Error: bbox_2d[0]=nan out of range [0,1000], full bbox=[nan, 0, 10, 10]."
    ok = call(client, sid, "image_zoom_in_tool", {"image": "original_image", "bbox_2d": ["250", "250", "750", "750"]})
    assert ok["ok"] and ok["meta"]["box_view"] == [252, 203, 756, 609]


def test_arm_zoom_ratio_error_and_name_quirk(client):
    sid = make_session(client, "arm-thinker", gradient(8000, 20))
    r = call(client, sid, "image_zoom_in_tool", {"image": "original_image", "bbox_2d": [0, 0, 1000, 1000]})
    assert r["text"] == "Error processing image zoom-in: absolute aspect ratio must be smaller than 200, got 400.0"
    # Two inputs: the reference names the result observation_{len(imgs_map)} = observation_2, though the
    # key registered is observation_1 (documented quirk).
    sid = make_session(client, "arm-thinker", SRC_1000x800, gradient(300, 300))
    r = call(client, sid, "image_zoom_in_tool", {"image": "original_image_1", "bbox_2d": [0, 0, 1000, 1000]})
    assert r["text"].startswith("This is the zoom-in image `observation_2`(zoomed in on the image original_image_1)")
    assert r["images"][0]["key"] == "observation_1" and r["meta"]["registered_key"] == "observation_1"


def test_arm_qwen3vl_variant(client):
    sid = make_session(client, "arm-thinker-qwen3vl", SRC_1000x800)
    tool = "image_zoom_in_tool"
    r = call(client, sid, tool, {"img_idx": 0, "label": "x", "bbox_2d": [250, 250, 750, 750]})
    # view box 252,203,756,609 (504x406, no expansion); smart_resize(504, 406, 32, min 262144):
    # 512x416 < 262144 → beta = sqrt(262144/204624) = 1.13186 → ceil(570.5/32)=18 → 576, ceil(459.5/32)=15 → 480.
    assert r["ok"] and r["text"] == "This is the zoom-in image from image at index 0. The returned image is at index 1."
    out = image_of(r)
    assert out.size == (576, 480)
    assert out.tobytes() == VIEW_1008x812.crop((252, 203, 756, 609)).resize((576, 480), Image.Resampling.BICUBIC).tobytes()
    assert call(client, sid, tool, {"bbox_2d": [0, 0, 9, 9]})["text"] == "Error: img_idx parameter is missing."
    assert call(client, sid, tool, {"img_idx": "x", "bbox_2d": [0, 0, 9, 9]})["text"] == \
        "Error: img_idx must be an integer, got x."
    assert call(client, sid, tool, {"img_idx": 5, "bbox_2d": [0, 0, 9, 9]})["text"] == \
        "Cannot resolve image at index 5. Available indices: 0 to 1."
    assert call(client, sid, tool, {"img_idx": 1.7, "bbox_2d": [0, 0, 500, 500]})["ok"]  # int(1.7) = 1 = observation_1
    assert call(client, sid, tool, {"img_idx": 0, "bbox_2d": [0, 0, 9]})["text"] == \
        "Error: bbox_2d must be a list of 4 numbers, got [0, 0, 9]."


def test_arm_schema_matches_the_reference_yaml(client):
    fn = client.get("/v1/tools", params={"profile": "arm-thinker"}).json()[0]["function"]
    assert fn["name"] == "image_zoom_in_tool"
    assert fn["parameters"] == {
        "type": "object",
        "properties": {
            "image": {"type": "string", "description": "The image to zoom in on (e.g., `original_image`, "
                      "`observation_1`, `observation_2`, ...)."},
            "bbox_2d": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1000},
                        "minItems": 4, "maxItems": 4,
                        "description": "Bounding box [x1, y1, x2, y2] with values between 0 and 1000, where "
                        "(x1, y1) = top-left, (x2, y2) = bottom-right."},
        },
        "required": ["image", "bbox_2d"],
    }


def test_arm_call_limit_uses_arm_message(client):
    sid = make_session(client, "arm-thinker", SRC_1000x800, max_tool_calls=1)
    args = {"image": "original_image", "bbox_2d": [0, 0, 500, 500]}
    assert call(client, sid, "image_zoom_in_tool", args)["ok"]
    r = call(client, sid, "image_zoom_in_tool", args)
    assert r["error"]["code"] == "call_limit"
    assert r["text"] == ("\n\n**Important Requirement:**\nYou have reached the maximum number of tool calls and are not "
                         "allowed to call any more tools. Please reason on the current situation and **must** give your "
                         "final answer or judgment within `<answer>...</answer>`.")


# verl reads arguments with json.loads: the lenient reading of Qwen-Agent (tests/profiles/test_qwen3_vl.py)
# is not this system's.
def test_strict_profiles_still_refuse_json5(client):
    sid = make_session(client, "arm-thinker-qwen3vl", SRC)  # verl: json.loads
    result = client.post(f"/v1/sessions/{sid}/tool_calls", json={
        "tool_calls": [tool_call("{img_idx: 0, label: 'sign', bbox_2d: [250, 250, 750, 750]}")]}).json()["results"][0]
    assert not result["ok"] and result["error"]["code"] == "invalid_json"


# A trainer's own `observation_N` upload moves the observation counter (ARM-Thinker's imgs_map naming).
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
