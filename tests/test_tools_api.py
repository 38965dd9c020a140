"""Tool listing (OpenAI schemas, strict form), tool execution, OpenAI tool_calls messages, canonical tools."""

import base64
import io
import json

import pytest
from PIL import Image

from tests.conftest import b64, gradient, photo, png_bytes
from toolserver.config import Settings


@pytest.fixture
def settings(settings_any_store: Settings) -> Settings:
    return settings_any_store  # every test here runs with the in-memory and with the Redis session store


def session(client, img: Image.Image | bytes, **settings) -> str:
    data = img if isinstance(img, bytes) else png_bytes(img)
    r = client.post("/v1/sessions", json={"images": [{"data": b64(data)}], **settings})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def decode(result_image: dict) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(result_image["data"])))


def test_tools_listing_is_openai_shaped(client):
    tools = client.get("/v1/tools").json()
    names = [t["function"]["name"] for t in tools]
    assert names[:10] == ["zoom_in", "keypoint_zoom", "lookback_reuse", "rotate", "select_frames", "super_resolution",
                          "magnify", "doc_page_retrieval_by_query", "doc_page_retrieval_by_index", "run_python"]
    assert len(names) == 10 + 19
    zoom = tools[0]
    assert zoom["type"] == "function"
    params = zoom["function"]["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["image", "bbox_2d"]
    bbox = params["properties"]["bbox_2d"]
    assert bbox["type"] == "array" and bbox["minItems"] == 4 and bbox["maxItems"] == 4
    assert bbox["items"] == {"type": "number"}
    assert "relative coordinates from 0 to 1000" in bbox["description"]
    assert params["properties"]["label"] == {"type": "string",
                                             "description": "Optional name of the object in the box."}
    assert "title" not in json.dumps(params)


def test_tools_listing_coords_phrase(client):
    tools = client.get("/v1/tools", params={"coords": "abs_view"}).json()
    assert "as you see it" in tools[0]["function"]["parameters"]["properties"]["bbox_2d"]["description"]


def test_strict_mode_schema(client):
    tools = client.get("/v1/tools", params={"strict": "true"}).json()
    fn = tools[0]["function"]
    assert fn["strict"] is True
    params = fn["parameters"]
    assert params["additionalProperties"] is False
    assert set(params["required"]) == set(params["properties"]) == {"image", "bbox_2d", "label"}
    assert params["properties"]["label"]["type"] == ["string", "null"]


def test_unknown_profile_422(client):
    r = client.get("/v1/tools", params={"profile": "nope"})
    assert r.status_code == 422 and "unknown profile" in r.json()["detail"]


def test_unknown_tool_is_a_tool_level_failure(client):
    sid = session(client, gradient(10, 10))
    r = client.post(f"/v1/sessions/{sid}/tools/crop", json={})
    assert r.status_code == 200
    body = r.json()
    assert body["ok"] is False and body["error"]["code"] == "unknown_tool"
    assert "zoom_in" in body["text"]


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        ({"image": 0, "bbox_2d": [1, 2, 3]}, "invalid_arguments", "bbox_2d"),
        ({"image": 0, "bbox_2d": ["a", 2, 3, 4]}, "invalid_arguments", "bbox_2d.0"),
        ({"bbox_2d": [1, 2, 3, 4]}, "invalid_arguments", "image: Field required"),
        ({"image": 0, "bbox_2d": [500, 500, 100, 900]}, "invalid_box", "x1 < x2"),
        ({"image": 0, "bbox_2d": [100, 100, 100, 900]}, "invalid_box", "x1 < x2"),
        ({"image": "nope", "bbox_2d": [0, 0, 10, 10]}, "unknown_image", "Available images: ['original_image']"),
        ({"image": 3, "bbox_2d": [0, 0, 10, 10]}, "unknown_image", "valid indices are 0 to 0"),
        ({"image": 0, "bbox_2d": [1100, 1100, 1200, 1200]}, "invalid_box", "outside the image"),
    ],
)
def test_zoom_in_failures_are_model_readable(client, args, code, fragment):
    sid = session(client, gradient(200, 100))
    body = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json=args).json()
    assert body["ok"] is False
    assert body["error"]["code"] == code
    assert fragment in body["text"], body["text"]
    assert body["text"].startswith("Error")


def test_zoom_in_conventions_cut_the_same_original_region(client):
    """One region named four ways gives the same crop from the original."""
    src = photo("Dragonfly_by_Bolly.jpg").read_bytes()  # 4224x3168; view 4228x3164 under smart_resize
    boxes = {
        "rel1000": [250, 250, 750, 750],
        "rel1": [0.25, 0.25, 0.75, 0.75],
        "abs_original": [1056, 792, 3168, 2376],
    }
    crops = {}
    for coords, bbox in boxes.items():
        sid = session(client, src, coords=coords)
        body = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": "original_image",
                                                                       "bbox_2d": bbox}).json()
        assert body["ok"], body["text"]
        assert body["meta"]["box_original"] == [1056, 792, 3168, 2376]
        crops[coords] = decode(body["images"][0]).tobytes()
    assert len(set(crops.values())) == 1


def test_zoom_in_abs_view_maps_from_the_model_view(client):
    src = png_bytes(gradient(1000, 800))  # viewed as 1008x812
    sid = session(client, src, coords="abs_view")
    info = client.get(f"/v1/sessions/{sid}").json()["images"][0]
    assert (info["view_width"], info["view_height"]) == (1008, 812)
    body = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [504, 406, 1008, 812]}).json()
    assert body["meta"]["box_original"] == [500, 400, 1000, 800]
    # Custom view rule (MGPO's cap) changes the mapping.
    sid = session(client, src, coords="abs_view", view={"max_pixels": 200_000, "min_pixels": 3136})
    view = client.get(f"/v1/sessions/{sid}").json()["images"][0]
    assert (view["view_width"], view["view_height"]) == (476, 392)
    body = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 238, 196]}).json()
    assert body["meta"]["box_original"] == [0, 0, 500, 400]


def test_zoom_in_abs_view_on_image_without_view(client):
    sid = session(client, gradient(8000, 20), coords="abs_view")
    info = client.get(f"/v1/sessions/{sid}").json()["images"][0]
    assert info["view_width"] is None and "aspect ratio" in info["view_error"]
    body = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 10, 10]}).json()
    assert body["ok"] is False and "no model-view size" in body["text"]


@pytest.mark.parametrize(
    ("size", "bbox", "box", "out"),
    [
        ((1, 1), [0, 0, 1000, 1000], [0, 0, 1, 1], (1, 1)),
        ((37, 900), [0, 0, 1000, 10], [0, 0, 37, 28], (37, 28)),  # 9 px tall grows to 28, width stays 37
        ((8000, 20), [0, 0, 5, 1000], [0, 0, 40, 20], (40, 20)),  # 40 px wide (>=28), height is the image's
        ((8000, 20), [500, 0, 501, 1000], [3990, 0, 4018, 20], (28, 20)),  # 4000..4008 grows to 28 about x=4004
    ],
)
def test_zoom_in_awkward_sizes(client, size, bbox, box, out):
    sid = session(client, gradient(*size))
    body = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": bbox}).json()
    assert body["ok"], body["text"]
    assert body["meta"]["box_original"] == box
    img = decode(body["images"][0])
    assert img.size == out
    assert img.tobytes() == gradient(*size).crop(tuple(box)).tobytes()


def test_zoom_in_clamps_and_says_so(client):
    sid = session(client, gradient(100, 100), coords="abs_original")
    body = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [-20, 50, 150, 99.5]}).json()
    assert body["ok"] and body["meta"]["clamped"] is True
    assert body["meta"]["box_original"] == [0, 50, 100, 100]


def test_zoom_in_aspect_limit(client):
    sid = session(client, gradient(4000, 100), coords="abs_original")
    body = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 3000, 20]}).json()
    assert body["ok"] is False and "aspect ratio above 100" in body["text"]


def test_zoom_chain_and_lookback(client):
    sid = session(client, gradient(400, 300))
    first = client.post(f"/v1/sessions/{sid}/tools/zoom_in",
                        json={"image": "original_image", "bbox_2d": [0, 0, 500, 500], "label": "cat"}).json()
    assert first["images"][0]["key"] == "observation_1" and first["images"][0]["index"] == 1
    assert 'labelled "cat"' in first["text"] and first["meta"]["label"] == "cat"
    second = client.post(f"/v1/sessions/{sid}/tools/zoom_in",
                         json={"image": "observation_1", "bbox_2d": [0, 0, 500, 500]}).json()
    assert second["meta"]["box_original"] == [0, 0, 100, 75]  # relative to observation_1 (200x150)
    assert second["images"][0]["key"] == "observation_2"
    back = client.post(f"/v1/sessions/{sid}/tools/lookback_reuse", json={"image": 0, "reason": "recheck"}).json()
    assert back["ok"] and back["images"][0]["key"] == "observation_3" and back["images"][0]["index"] == 3
    assert "Reason: recheck" in back["text"]
    assert decode(back["images"][0]).tobytes() == gradient(400, 300).tobytes()
    info = client.get(f"/v1/sessions/{sid}").json()
    assert [i["key"] for i in info["images"]] == ["original_image", "observation_1", "observation_2", "observation_3"]
    assert info["images"][3]["origin"] == "tool:lookback_reuse"
    missing = client.post(f"/v1/sessions/{sid}/tools/lookback_reuse", json={"image": 9}).json()
    assert missing["ok"] is False and "0 to 3" in missing["text"]


def test_tool_calls_messages_tool_role(client):
    sid = session(client, gradient(400, 300))
    calls = [
        {"id": "call_1", "type": "function",
         "function": {"name": "zoom_in", "arguments": json.dumps({"image": 0, "bbox_2d": [0, 0, 500, 500]})}},
        {"id": "call_2", "type": "function", "function": {"name": "zoom_in", "arguments": "{not json"}},
        {"id": "call_3", "type": "function", "function": {"name": "teleport", "arguments": "{}"}},
    ]
    body = client.post(f"/v1/sessions/{sid}/tool_calls", json={"tool_calls": calls}).json()
    msgs = body["messages"]
    assert [m["role"] for m in msgs] == ["tool", "tool", "tool"]
    assert [m["tool_call_id"] for m in msgs] == ["call_1", "call_2", "call_3"]
    parts = msgs[0]["content"]
    assert parts[0]["type"] == "image_url" and parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert parts[1]["type"] == "text" and "observation_1" in parts[1]["text"]
    assert "not valid JSON" in msgs[1]["content"] and body["results"][1]["error"]["code"] == "invalid_json"
    assert "unknown tool 'teleport'" in msgs[2]["content"]


def test_tool_calls_messages_user_follow_up(client):
    sid = session(client, gradient(400, 300))
    calls = [{"id": "a", "type": "function",
              "function": {"name": "zoom_in", "arguments": {"image": 0, "bbox_2d": [0, 0, 500, 500]}}}]
    body = client.post(f"/v1/sessions/{sid}/tool_calls", json={"tool_calls": calls, "image_message": "user"}).json()
    tool_msg, user_msg = body["messages"]
    assert tool_msg == {"role": "tool", "tool_call_id": "a", "content": body["results"][0]["text"]}
    assert user_msg["role"] == "user"
    assert user_msg["content"][0] == {"type": "text", "text": "Image `observation_1` from tool call a:"}
    assert user_msg["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_tool_calls_malformed_request_is_422(client):
    sid = session(client, gradient(10, 10))
    assert client.post(f"/v1/sessions/{sid}/tool_calls", json={"tool_calls": [{"id": 1}]}).status_code == 422
    assert client.post(f"/v1/sessions/{sid}/tools/zoom_in", content=b"{oops",
                       headers={"content-type": "application/json"}).status_code == 422


def test_session_call_limit(client):
    sid = session(client, gradient(50, 50), max_tool_calls=1)
    args = {"image": 0, "bbox_2d": [0, 0, 1000, 1000]}
    assert client.post(f"/v1/sessions/{sid}/tools/zoom_in", json=args).json()["ok"]
    body = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json=args).json()
    assert body["ok"] is False and body["error"]["code"] == "call_limit" and "limit of 1 tool calls" in body["text"]


@pytest.mark.parametrize(
    ("size", "coords", "point", "box", "out"),
    [
        ((2000, 1000), "abs_original", [1000, 500], [800, 300, 1200, 700], (2000, 2000)),
        ((2000, 1000), "rel1000", [0, 0], [0, 0, 400, 400], (2000, 2000)),
        ((2000, 1000), "rel1", [1.0, 1.0], [1600, 600, 2000, 1000], (2000, 2000)),  # the edge point clamps to 1999
        ((300, 200), "abs_original", [150, 100], [0, 0, 300, 200], (400, 267)),  # smaller than the window
        ((1, 1), "rel1000", [500, 500], [0, 0, 1, 1], (400, 400)),
    ],
)
def test_keypoint_zoom(client, size, coords, point, box, out):
    sid = session(client, gradient(*size), coords=coords)
    body = client.post(f"/v1/sessions/{sid}/tools/keypoint_zoom", json={"keypoint": point}).json()
    assert body["ok"], body["text"]
    assert body["meta"]["box_original"] == box
    img = decode(body["images"][0])
    assert img.size == out
    crop = gradient(*size).crop(tuple(box))
    assert img.tobytes() == crop.resize(out, Image.Resampling.LANCZOS).tobytes()


def test_keypoint_zoom_outside(client):
    sid = session(client, gradient(100, 100))
    body = client.post(f"/v1/sessions/{sid}/tools/keypoint_zoom", json={"keypoint": [1001, 5]}).json()
    assert body["ok"] is False and body["error"]["code"] == "invalid_point" and "outside the image" in body["text"]
