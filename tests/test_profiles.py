"""Golden tests per seed profile. Expected values are derived by hand from reference/seed_impls.md and the
papers (the arithmetic is in the comments), never by running our own code."""

import base64
import io

import numpy as np
import pytest
from PIL import Image

from tests.conftest import b64, gradient, png_bytes
from toolserver.tools.arm_thinker import SUCCESS_TAIL


def make_session(client, profile, *images, **settings):
    body = {"profile": profile, "images": [{"data": b64(png_bytes(img))} for img in images], **settings}
    r = client.post("/v1/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def call(client, sid, tool, args):
    r = client.post(f"/v1/sessions/{sid}/tools/{tool}", json=args)
    assert r.status_code == 200, r.text
    return r.json()


def image_of(result, i=0) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(result["images"][i]["data"])))


def big_image(width, height) -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))


# ------------------------------------------------------------------------------------------ ARM-Thinker
SRC_1000x800 = gradient(1000, 800)
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


# ------------------------------------------------------------------------------------------ Qwen-Agent
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


# ------------------------------------------------------------------------------------------ Groundlight
def test_groundlight_window_and_upscale(client):
    sid = make_session(client, "groundlight", gradient(2048, 1536))
    info = client.get(f"/v1/sessions/{sid}").json()["images"][0]
    assert (info["view_width"], info["view_height"]) == (1024, 768)  # long side <= 1024
    r = call(client, sid, "zoom", {"keypoint": [500, 400]})
    # window 400x400 at (300, 200); output long side max(1024, 768, 400) = 1024 → 1024x1024 LANCZOS.
    assert r["meta"]["box_view"] == [300, 200, 700, 600]
    view = gradient(2048, 1536).resize((1024, 768), Image.Resampling.BICUBIC)
    expected = view.crop((300, 200, 700, 600)).resize((1024, 1024), Image.Resampling.LANCZOS)
    assert image_of(r).tobytes() == expected.tobytes()
    assert r["text"] == "<image_name> tool_result_0 </image_name>"


@pytest.mark.parametrize(
    ("size", "keypoint", "box", "out"),
    [
        ((1024, 768), [0, 0], [0, 0, 400, 400], (1024, 1024)),
        ((1024, 768), [1023, 767], [624, 368, 1024, 768], (1024, 1024)),  # shifted, not shrunk
        ((200, 150), [100, 75], [0, 0, 200, 150], (400, 300)),  # smaller than the window
        ((300, 1024), [150, 500], [0, 300, 300, 700], (768, 1024)),
        ((1, 1), [0, 0], [0, 0, 1, 1], (400, 400)),
        ((1024, 10), [1000, 5], [624, 0, 1024, 10], (1024, 26)),  # 400x10 → 1024 x round(25.6)
    ],
)
def test_groundlight_edges(client, size, keypoint, box, out):
    sid = make_session(client, "groundlight", gradient(*size))
    r = call(client, sid, "zoom", {"keypoint": keypoint})
    assert r["ok"], r["text"]
    assert r["meta"]["box_view"] == box
    assert image_of(r).size == out


@pytest.mark.parametrize(
    ("keypoint", "text"),
    [
        ([1024, 0], "Error: Parsing arguments for tool 'zoom': Error: keypoint [1024, 0] is outside the image "
                    "boundaries (width=1024, height=768)"),
        ([-1, 5], "Error: Parsing arguments for tool 'zoom': Error: keypoint [-1, 5] is outside the image "
                  "boundaries (width=1024, height=768)"),
        ([1.5, 2], "Error: Parsing arguments for tool 'zoom': Error:keypoint must be a list or tuple of two "
                   "integers [x, y]"),
        ([1, 2, 3], "Error: Parsing arguments for tool 'zoom': Error:keypoint must be a list or tuple of two "
                    "integers [x, y]"),
    ],
)
def test_groundlight_errors(client, keypoint, text):
    sid = make_session(client, "groundlight", gradient(1024, 768))
    r = call(client, sid, "zoom", {"keypoint": keypoint})
    assert r["ok"] is False and r["text"] == text


def test_groundlight_act_renders_like_the_environment(client):
    sid = make_session(client, "groundlight", gradient(1024, 768))
    good = client.post(f"/v1/sessions/{sid}/act", json={"text": "<think>look</think>\n<tool>\nname: zoom\n"
                                                                "keypoint: [500, 400]\n</tool>"}).json()
    assert good["format"] == "groundlight"
    msg = good["observation"][0]
    assert msg["role"] == "user"
    assert msg["content"][0] == {"type": "text", "text": "<image_name> tool_result_0 </image_name>"}
    assert msg["content"][1]["type"] == "image_url"
    second = client.post(f"/v1/sessions/{sid}/act", json={"text": "<tool>\nname: zoom\nkeypoint: [10, 10]\n</tool>"}).json()
    assert second["observation"][0]["content"][0]["text"] == "<image_name> tool_result_1 </image_name>"
    cases = {
        "<tool>\nname: zoom\n</tool>": "Error: Parsing arguments for tool 'zoom': Missing required arguments for zoom "
                                       "tool: keypoint",
        "<tool>\nname: zoom\nkeypoint: [1, 2]\nfoo: 1\n</tool>": "Error: Parsing arguments for tool 'zoom': "
                                                                "Unexpected arguments for zoom tool: foo",
        "<tool>\nname: zoom\nkeypoint: [500,\n</tool>": "Error: Parsing arguments for tool 'zoom': Error: Invalid JSON "
                                                       "format for 'keypoint': '[500,'",
        "<tool>\nname: zoom\nkeypoint: [1.0, 2]\n</tool>": "Error: Parsing arguments for tool 'zoom': Error: Both "
                                                          "elements in 'keypoint' list must be integers.",
        "<tool>\nkeypoint: [1, 2]\n</tool>": "Error: Tool call must specify 'name' in key-value format.",
        "<tool>\nname: crop\nbox: [1]\n</tool>": "Error: Unknown tool 'crop' specified. Valid tools are: zoom",
    }
    for text, expected in cases.items():
        body = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
        assert body["results"][0]["text"] == expected, text
        assert body["observation"][0]["content"] == f"<result>\n{expected}\n</result>"
    # The environment's own reply to a text with neither a call nor an answer is not a tool result: bare.
    thinking = client.post(f"/v1/sessions/{sid}/act", json={"text": "I will just think."}).json()
    assert thinking["observation"] == [{"role": "user",
                                        "content": "Error: No tool call or answer found in your last message."}]
    answered = client.post(f"/v1/sessions/{sid}/act", json={"text": "<answer>7</answer>"}).json()
    assert answered["calls"] == [] and answered["observation"] == []


# ------------------------------------------------------------------------------------------ MGPO
def test_mgpo_float32_mapping_on_5312x2988(client):
    sid = make_session(client, "mgpo", big_image(5312, 2988))
    info = client.get(f"/v1/sessions/{sid}").json()["images"][0]
    # process_image: sqrt(1003520/15872256) = 0.251445 → 1335x751; smart_resize → 48*28=1344 x 27*28=756.
    assert (info["view_width"], info["view_height"]) == (1344, 756)
    r = call(client, sid, "grounding", {"bbox_2d": [0, 0, 1344, 756], "label": "all"})
    # float32: 756 * (1/756) * 2988 = 2987.9998 → 2987 (seed_impls.md §7: "crops 5312x2987, not 2988").
    assert r["ok"] and r["meta"]["box_original"] == [0, 0, 5312, 2987]
    assert r["text"] == "Based on the provided coordinates, return the sub-image:"
    # The crop (5312x2987) goes through process_image: sqrt(1003520/15866944) → int sides 1335x751.
    assert image_of(r).size == (1335, 751)


def test_mgpo_invalid_box_returns_the_original(client):
    sid = make_session(client, "mgpo", gradient(1000, 800))
    # 1000x800 = 800000 px is within [200704, 1003520]: input = smart_resize → 1008x812.
    for bbox in ([0, 0, 28, 100], [10, 10, 5, 100], [0, 0, 1009, 100], [0.0, 0, 100, 100]):
        r = call(client, sid, "grounding", {"bbox_2d": bbox, "label": "x"})
        assert r["ok"] is False and r["error"]["code"] == "invalid_box"
        assert r["text"] == "Not providing correct coordinates or invalid coordinate values, return the original image:"
        assert image_of(r).size == (1000, 800)
        client.delete(f"/v1/sessions/{sid}")
        sid = make_session(client, "mgpo", gradient(1000, 800))


def test_mgpo_act_fenced_json_and_single_round(client):
    sid = make_session(client, "mgpo", gradient(1000, 800))
    text = 'The sign is small.\n```json\n[{"bbox_2d": [100, 100, 400, 300], "label": "sign"}]\n```'
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    assert r["calls"][0]["arguments"] == {"bbox_2d": [100, 100, 400, 300], "label": "sign"}
    # int(100/1008*1000) = 99, int(100/812*800) = 98, int(400/1008*1000) = 396, int(300/812*800) = 295
    assert r["results"][0]["meta"]["box_original"] == [99, 98, 396, 295]
    obs = r["observation"][0]
    assert obs["role"] == "user" and obs["content"][0]["text"] == "Based on the provided coordinates, return the sub-image:"
    again = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    assert again["results"][0]["error"]["code"] == "call_limit"


@pytest.mark.parametrize("text", [
    "no json here",
    '```json\n[{"bbox_2d": [1.0, 2, 300, 400], "label": "a"}]\n```',
    '```json\n[{"bbox_2d": [1, 2, 300, 400]}]\n```',
    '```json\n{"bbox_2d": [1, 2, 300, 400], "label": "a"}\n```',
    '```json\n[{"bbox_2d": [1, 2, 300, 400], "label": "a"\n```',
])
def test_mgpo_unusable_output_returns_the_original(client, text):
    sid = make_session(client, "mgpo", gradient(1000, 800))
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    assert r["results"][0]["text"].startswith("Not providing correct coordinates")
    assert len(r["results"][0]["images"]) == 1


# ------------------------------------------------------------------------------------------ IMAgent
def test_imagent_tools_and_limit(client):
    sid = make_session(client, "imagent", gradient(400, 300), gradient(200, 200))
    tools = [t["function"]["name"] for t in client.get("/v1/tools", params={"profile": "imagent"}).json()]
    assert tools == ["zoom_in", "lookback_reuse"]
    r = call(client, sid, "zoom_in", {"image_index": 1, "bbox_2d": [0, 0, 100, 100], "label": "corner"})
    # 20x20 of the 200x200 image grows to the 32-px minimum: [0, 0, 32, 32].
    assert r["ok"] and r["meta"]["box_original"] == [0, 0, 32, 32] and r["images"][0]["key"] == "observation_1"
    back = call(client, sid, "lookback_reuse", {"image_index": 0, "reason": "recount"})
    assert back["ok"] and back["images"][0]["index"] == 3
    for _ in range(3):
        assert call(client, sid, "lookback_reuse", {"image_index": 0, "reason": "again"})["ok"]
    sixth = call(client, sid, "lookback_reuse", {"image_index": 0, "reason": "again"})
    assert sixth["ok"] is False and sixth["error"]["code"] == "call_limit"
    missing = make_session(client, "imagent", gradient(10, 10))
    assert "image_index" in call(client, missing, "zoom_in", {"bbox_2d": [0, 0, 1, 1], "label": "x"})["text"]


def test_imagent_act_hermes(client):
    sid = make_session(client, "imagent", gradient(400, 300))
    text = ('<think>check</think><tool_call>{"name": "zoom_in", "arguments": {"image_index": 0, '
            '"bbox_2d": [0, 0, 500, 500], "label": "a"}}</tool_call> and <tool_call>{"name": "lookback_reuse", '
            '"arguments": {"image_index": 0, "reason": "b"}}</tool_call>')
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    assert [c["name"] for c in r["calls"]] == ["zoom_in", "lookback_reuse"]
    assert [m["role"] for m in r["observation"]] == ["tool", "tool"]
    assert r["observation"][0]["content"][0]["type"] == "image_url"  # images first, then text (ARM/verl order)
    assert r["observation"][0]["content"][1]["type"] == "text"


# ------------------------------------------------------------------------------------------ Mags-RL
def test_mags_rl_boxes_and_area_rule(client):
    sid = make_session(client, "mags-rl", gradient(1000, 800))  # viewed as 1008x812 (abs_view)
    text = "<think>two signs <zoom>[[0, 0, 504, 406], [0, 0, 1008, 812], [10, 10, 5, 5]]</zoom></think>"
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    result = r["results"][0]
    # [0,0,504,406] → [0,0,500,400] = 25 % of the area: valid. The whole image (100 %) and the inverted box: skipped.
    assert result["ok"] and result["meta"]["boxes_original"] == [[0, 0, 500, 400]]
    assert "box 2 [0, 0, 1008, 812]: covers 40% of the image area or more" in result["text"]
    assert "box 3 [10, 10, 5, 5]: needs x1 < x2 and y1 < y2" in result["text"]
    # This server has no SMFANet weights (tests/test_sr_tools.py covers the network): x4 by bicubic, said so.
    assert result["meta"]["magnified"] is False
    assert result["meta"]["enlargements"] == [{"method": "bicubic", "scale": 4.0, "requested_scale": 4,
                                               "reason": "no SMFANet weights installed"}]
    assert image_of(result).size == (2000, 1600)


def test_mags_rl_failure_message(client):
    sid = make_session(client, "mags-rl", gradient(1000, 800))
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": "<zoom>[[0, 0, 1008, 812]]</zoom>"}).json()
    assert r["results"][0]["ok"] is False and r["results"][0]["text"].startswith("Zoom failed: no valid box.")
    sid = make_session(client, "mags-rl", gradient(1000, 800))
    bad = client.post(f"/v1/sessions/{sid}/act", json={"text": "<zoom>[0, 0, 10, 10]</zoom>"}).json()
    assert bad["results"][0]["text"].startswith("Zoom failed: cannot read the boxes")


def test_every_profile_lists_and_strict_forms(client):
    for profile in client.get("/v1/profiles").json():
        for strict in (False, True):
            tools = client.get("/v1/tools", params={"profile": profile["name"], "strict": strict}).json()
            assert [t["function"]["name"] for t in tools] == profile["tools"]
            for t in tools:
                assert t["function"]["parameters"]["type"] == "object"


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
