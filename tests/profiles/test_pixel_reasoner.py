"""Golden tests of profile `pixel-reasoner` (TIGER-AI-Lab/verl-tool@980962b: servers/tools/pixel_reasoner.py,
agent_loop/vision_utils.py and vision_process.py).

Sizes and boxes are worked out by hand from the reference's arithmetic (in the comments). Expected pixels
follow the reference's chain: the model's view JPEG-encoded by the agent loop, the crop, verl-tool's
fetch_image (bicubic smart_resize, 4..5120 tokens), the result JPEG-encoded at Pillow's default quality."""

import asyncio
import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from tests.conftest import b64
from tests.profiles.helpers import big_image, call, image_of, make_session
from tests.video_helpers import frame_level, make_video

SRC = Image.fromarray(np.random.default_rng(3).integers(0, 255, (480, 640, 3), dtype=np.uint8))


def jpeg(image: Image.Image) -> Image.Image:
    buf = io.BytesIO()
    image.save(buf, format="JPEG")
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


# What the tool server holds as image 1: smart_resize(480, 640) = (17*28, 23*28) = 476x644, then JPEG.
SOURCE_1 = jpeg(SRC.resize((644, 476), Image.Resampling.BICUBIC))


def crop(client, sid, bbox, target, name="crop_image"):
    return call(client, sid, name, {"bbox_2d": bbox, "target_image": target})


def act(client, sid, text):
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": text})
    assert r.status_code == 200, r.text
    return r.json()


def test_tools_and_schemas_are_the_reference_prompt(client):
    tools = client.get("/v1/tools", params={"profile": "pixel-reasoner"}).json()
    assert tools == [
        {"type": "function", "function": {
            "name": "crop_image", "description": "Zoom in on the image based on the bounding box coordinates.",
            "parameters": {"type": "object", "properties": {
                "bbox_2d": {"type": "array", "description": "coordinates for bounding box of the area you want to zoom "
                            "in. minimum value is 0 and maximum value is the width/height of the image.",
                            "items": {"type": "number"}},
                "target_image": {"type": "number", "description": "The index of the image to crop. Index from 1 to "
                                 "the number of images. Choose 1 to operate on original image."}},
                "required": ["bbox_2d", "target_image"]}}},
        {"type": "function", "function": {
            "name": "select_frames", "description": "Select frames from a video.",
            "parameters": {"type": "object", "properties": {
                "target_frames": {"type": "array", "description": "List of frame indices to select from the video "
                                  "(no more than 8 frames in total).",
                                  "items": {"type": "integer", "description": "Frame index from 1 to 16."}}},
                "required": ["target_frames"]}}},
    ]


def test_aliases_are_callable_and_listed_with_the_profile(client):
    (profile,) = [p for p in client.get("/v1/profiles").json() if p["name"] == "pixel-reasoner"]
    assert profile["tools"] == ["crop_image", "select_frames"] and profile["call_format"] == "pixel-reasoner"
    assert profile["aliases"] == {"zoom_in": "crop_image", "crop_image_normalized": "crop_image"}


def test_normalised_crop_with_padding_then_fetch_image_then_jpeg(client):
    sid = make_session(client, "pixel-reasoner", SRC)
    r = crop(client, sid, [0.1, 0.1, 0.5, 0.5], 1)
    # All four < 1: normalised. Padding 0.1 (600/644 is larger): (0.0, 0.0, 0.6, 0.6) -> int(0.6*644) = 386,
    # int(0.6*476) = 285. smart_resize(285, 386) = (10*28, 14*28) -> 392x280.
    assert r["ok"] and r["meta"]["box_source"] == [0, 0, 386, 285]
    # The same box on the 640x480 upload (what the inspector draws): 386 * 640/644 -> 384, 285 * 480/476 -> 287.
    assert r["meta"]["box_original"] == [0, 0, 384, 287]
    assert r["text"] == "Here is the cropped image. (Image Size: 392x280)\n<image>"
    expected = jpeg(SOURCE_1.crop((0, 0, 386, 285)).resize((392, 280)))
    assert image_of(r).convert("RGB").tobytes() == expected.tobytes()


def test_targets_count_every_image_and_results_are_the_decoded_jpeg(client):
    sid = make_session(client, "pixel-reasoner", SRC)
    first = crop(client, sid, [0.1, 0.1, 0.5, 0.5], 1)
    held = image_of(first).convert("RGB")
    # Image 2 is the first result (392x280). Pixels: x1 = 100/392 - 0.1 -> int(0.1551*392) = 60,
    # y1 = 100/280 - 0.1 -> 72, x2 = 300/392 + 0.1 -> int(0.8653*392) = 339, y2 > 1 -> 280.
    # 279x208 -> smart_resize = (7*28, 10*28) -> 280x196.
    r = crop(client, sid, [100, 100, 300, 300], 2, name="zoom_in")
    assert r["meta"] == {"source": "observation_1", "box_source": [60, 72, 339, 280],
                         "box_original": [60, 72, 339, 280]}
    assert r["text"] == "Here is the cropped image. (Image Size: 280x196)\n<image>"
    assert image_of(r).convert("RGB").tobytes() == jpeg(held.crop((60, 72, 339, 280)).resize((280, 196))).tobytes()


def test_a_value_of_1_makes_the_box_pixels(client):
    sid = make_session(client, "pixel-reasoner", SRC)
    # [0.2, 0.2, 0.5, 1]: not all below 1, so pixels: x2 = 0.5/644 + 0.1 -> int(0.10078*644) = 64,
    # y2 = 1/476 + 0.1 -> int(0.1021*476) = 48; smart_resize(48, 64) = (2*28, 2*28) -> 56x56.
    r = crop(client, sid, [0.2, 0.2, 0.5, 1], 1, name="crop_image_normalized")
    assert r["meta"]["box_source"] == [0, 0, 64, 48] and r["text"].startswith("Here is the cropped image. (Image "
                                                                              "Size: 56x56)")


@pytest.mark.slow
def test_padding_is_capped_at_600_pixels(client):
    sid = make_session(client, "pixel-reasoner", big_image(8000, 1000))
    # View 8008x1008 (smart_resize: 286*28 x 36*28). Padding x = min(0.1, 600/8008): 600 px, y = 0.1.
    # x1 = 0.55*8008 - 600 -> 3804, x2 = 0.65*8008 + 600 -> 5805, y1 = 0.45*1008 -> 453, y2 = 0.75*1008 = 756.
    # 2001x303 -> smart_resize = (11*28, 71*28) -> 1988x308.
    r = crop(client, sid, [0.55, 0.55, 0.65, 0.65], 1)
    assert r["meta"]["box_source"] == [3804, 453, 5805, 756]
    assert r["text"] == "Here is the cropped image. (Image Size: 1988x308)\n<image>"


@pytest.mark.parametrize("args, text", [
    ({}, "Missing parameters: bbox_2d, target_image"),
    ({"target_image": 1}, "Missing parameters: bbox_2d"),
    ({"bbox_2d": [0, 0, 1], "target_image": 1}, "Invalid bbox_2d format. It should be a list of four numbers."),
    ({"bbox_2d": "0,0,1,1", "target_image": 1}, "Invalid bbox_2d format. It should be a list of four numbers."),
    ({"bbox_2d": [0, 0, 1, 1], "target_image": 0},
     "Invalid target_image index. It should be an integer between 1 and the number of previous images (1)."),
    ({"bbox_2d": [0, 0, 1, 1], "target_image": "2"},
     "Invalid target_image index. It should be an integer between 1 and the number of previous images (1)."),
    ({"bbox_2d": [0, 0, 1, 1], "target_image": "first"},
     "Invalid target_image index. It should be an integer between 1 and the number of previous images (1)."),
    # Right of the image: x1 and x2 both clamp to 1 -> a zero-width crop, 67 px high; smart_resize gives
    # 56x28 < 4 tokens and divides by the zero area, as the reference does.
    ({"bbox_2d": [2000, 10, 3000, 20], "target_image": 1}, "Error processing image: division by zero"),
    ({"bbox_2d": [0.9, 0.1, 0.2, 0.3], "target_image": 1},
     "Error processing image: Coordinate 'right' is less than 'left'"),
    ({"bbox_2d": ["a", 0, 1, 1], "target_image": 1},
     "Error processing image: '<' not supported between instances of 'str' and 'int'"),
])
def test_crop_failures_read_as_the_reference(client, args, text):
    sid = make_session(client, "pixel-reasoner", SRC)
    r = call(client, sid, "crop_image", args)
    assert not r["ok"] and r["text"] == text


def test_target_image_goes_through_int(client):
    sid = make_session(client, "pixel-reasoner", SRC)
    assert crop(client, sid, [0.1, 0.1, 0.5, 0.5], 1.9)["meta"]["source"] == "original_image"  # int(1.9) = 1
    assert crop(client, sid, [0.1, 0.1, 0.5, 0.5], "2")["meta"]["source"] == "observation_1"  # int("2") = 2


def video_session(client, **sampling):
    body = {"profile": "pixel-reasoner", "images": [{"data": b64(make_video()), **sampling}]}
    r = client.post("/v1/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def test_select_frames_returns_the_reference_corner_of_each_frame(client):
    sid = video_session(client, max_frames=4)  # frames 12, 37, 62, 87 (test_video.py)
    r = call(client, sid, "select_frames", {"target_frames": [1, 3]})
    # Frame 160x120 -> view 168x112 (6*28 x 4*28). The box (0, 0, 1, 1) is pixels: x2 = 1/168 + 0.1 -> 17,
    # y2 = 1/112 + 0.1 -> 12; the 17x12 corner is under 4 tokens: beta = sqrt(3136/204), ceil -> 84x56.
    assert r["ok"] and r["text"] == ("Here are the selected frames. (Frame Size: 84x56, Numbered 1 to 2):"
                                     "<image><image>")
    outs = [image_of(r, i).convert("RGB") for i in range(2)]
    assert [o.size for o in outs] == [(84, 56), (84, 56)]
    # The corner holds the frame's 8x8 mark (255 - level) and its grey (level 20 + 2k): frames 12 and 62.
    for out, k in zip(outs, (12, 62), strict=True):
        assert abs(np.asarray(out)[-6:, -10:].mean() - frame_level(k)) < 8
        assert abs(np.asarray(out)[:8, :8].mean() - (255 - frame_level(k))) < 8


@pytest.mark.parametrize("args, text", [
    ({}, "Missing parameters: target_frames"),
    ({"target_frames": 1}, "Invalid target_frames format. It should be a list of integers."),
    ({"target_frames": [0]},
     "Invalid target_frames indices. Each index should be an integer between 1 and the number of previous images (4)."),
    ({"target_frames": ["1"]},
     "Invalid target_frames indices. Each index should be an integer between 1 and the number of previous images (4)."),
    ({"target_frames": []}, "Error processing frames: list index out of range"),
    ({"target_frames": [1] * 65}, "Too many target_frames (65): at most 64 at once."),  # ours (decisions.md)
])
def test_select_frames_failures(client, args, text):
    sid = video_session(client, max_frames=4)
    r = call(client, sid, "select_frames", args)
    assert not r["ok"] and r["text"] == text


def test_act_reads_the_first_call_and_renders_the_text_with_its_images(client):
    sid = make_session(client, "pixel-reasoner", SRC)
    first = json.dumps({"name": "crop_image", "arguments": {"bbox_2d": [0.1, 0.1, 0.5, 0.5], "target_image": 1}})
    second = json.dumps({"name": "select_frames", "arguments": {"target_frames": [1]}})
    j = act(client, sid, f"<think>zoom</think><tool_call>{first}</tool_call><tool_call>{second}</tool_call>")
    assert not j["done"] and len(j["results"]) == 1
    # as verl-tool's agent loop replaces the tool server's `<image>`
    assert j["prompt"] == "Here is the cropped image. (Image Size: 392x280)\n<|vision_start|><|image_pad|><|vision_end|>"
    content = j["observation"][0]["content"]
    assert j["observation"][0]["role"] == "user"
    assert content[0] == {"type": "text", "text": "Here is the cropped image. (Image Size: 392x280)\n"}
    assert content[1]["type"] == "image_url" and len(content) == 2


def test_image_tag_sessions_get_the_tool_server_s_own_text(client):
    sid = make_session(client, "pixel-reasoner", SRC, image_marker="image_tag")
    call = json.dumps({"name": "crop_image", "arguments": {"bbox_2d": [0.1, 0.1, 0.5, 0.5], "target_image": 1}})
    j = act(client, sid, f"<tool_call>{call}</tool_call>")
    assert j["prompt"] == "Here is the cropped image. (Image Size: 392x280)\n<image>"


@pytest.mark.parametrize("text, prompt", [
    ('<tool_call>{"name": "crop_image", "arguments": {</tool_call>', ""),  # not JSON: no action, empty observation
    ('<tool_call>{"name": "rotate", "arguments": {}}</tool_call>', ""),  # not one of its actions
    ('<tool_call>["crop_image"]</tool_call>', ""),
    ('<tool_call>{"name": "crop_image"}</tool_call>', "Missing 'arguments' in the tool call."),
    ('<tool_call>{"name": "crop_image", "arguments": [1]}</tool_call>',
     "'arguments' should be a dictionary of parameters key-value pairs, got <class 'list'>."),
])
def test_act_invalid_actions(client, text, prompt):
    sid = make_session(client, "pixel-reasoner", SRC)
    j = act(client, sid, text)
    assert not j["done"] and j["prompt"] == prompt
    assert j["observation"] == [{"role": "user", "content": prompt}]


def test_act_without_a_tool_call_ends_the_episode(client):
    sid = make_session(client, "pixel-reasoner", SRC)
    j = act(client, sid, r"The answer is \boxed{3}.")
    assert j["done"] and j["results"] == [] and j["observation"] == [] and j["prompt"] == ""


def jpeg_bytes(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="JPEG")
    return buf.getvalue()


def test_results_are_delivered_as_the_references_jpeg_bytes(client):
    sid = make_session(client, "pixel-reasoner", SRC)
    first = crop(client, sid, [0.1, 0.1, 0.5, 0.5], 1)
    assert first["images"][0]["mime"] == "image/jpeg"
    held = image_of(first).convert("RGB")
    # As in test_targets_count_every_image_and_results_are_the_decoded_jpeg: box (60, 72, 339, 280) of image 2,
    # resized to 280x196, then saved as JPEG with Pillow's defaults, which is what verl-tool sends.
    second = crop(client, sid, [100, 100, 300, 300], 2)
    sent = base64.b64decode(second["images"][0]["data"])
    assert sent == jpeg_bytes(held.crop((60, 72, 339, 280)).resize((280, 196)))
    frames = call(client, sid, "select_frames", {"target_frames": [1, 2]})
    assert [image["mime"] for image in frames["images"]] == ["image/jpeg"] * 2
    # The stored result is exactly those bytes decoded: a later crop of it sees the pixels the model saw.
    assert Image.open(io.BytesIO(sent)).convert("RGB").tobytes() == image_of(second).convert("RGB").tobytes()


def test_path_delivery_writes_the_jpeg_as_a_jpg_file(client):
    sid = make_session(client, "pixel-reasoner", SRC, output={"delivery": "path"})
    result = crop(client, sid, [0.1, 0.1, 0.5, 0.5], 1)
    image = result["images"][0]
    assert image["mime"] == "image/jpeg" and image["path"].endswith("/observation_1.jpg")
    with open(image["path"], "rb") as f:
        assert f.read(3) == b"\xff\xd8\xff"  # a JPEG, as the reference sends


def test_inputs_uploaded_as_the_view_are_held_as_they_are(client):
    # The trainer's view: smart_resize(480, 640) = 476x644, JPEG-encoded as verl-tool's agent loop sends it.
    view_jpeg = jpeg_bytes(SRC.resize((644, 476), Image.Resampling.BICUBIC))
    as_view = client.post("/v1/sessions", json={"profile": "pixel-reasoner", "input_form": "view",
                                                "images": [{"data": base64.b64encode(view_jpeg).decode()}]})
    assert as_view.status_code == 201, as_view.text
    assert as_view.json()["images"][0]["view_width"] == 644
    sid_view = as_view.json()["session_id"]
    sid_original = make_session(client, "pixel-reasoner", SRC)
    for bbox in ([0.1, 0.1, 0.5, 0.5], [100, 50, 400, 300]):
        from_view, from_original = crop(client, sid_view, bbox, 1), crop(client, sid_original, bbox, 1)
        assert from_view["meta"]["box_source"] == from_original["meta"]["box_source"]
        assert from_view["images"][0]["data"] == from_original["images"][0]["data"]  # the same JPEG bytes


def test_an_upload_the_view_rule_cannot_produce_is_refused(client):
    r = client.post("/v1/sessions", json={"profile": "pixel-reasoner", "input_form": "view",
                                          "images": [{"data": b64(jpeg_bytes(SRC))}]})
    assert r.status_code == 422 and r.json()["code"] == "not_a_view"
    assert "640x480" in r.json()["detail"] and "644x476" in r.json()["detail"]


def test_the_original_is_dropped_once_its_view_is_held(client):
    """Pixel-Reasoner's tools read an input only through its view: after the first call the session holds the
    view, not the decoded original; anything that reads the original decodes the upload again, to the same pixels."""
    sid = make_session(client, "pixel-reasoner", SRC)
    entry = asyncio.run(client.app.state.core.store.get(sid)).images[0]
    first = crop(client, sid, [0.1, 0.1, 0.5, 0.5], 1)
    assert not entry.loaded and len(entry.views) == 1
    again = crop(client, sid, [0.1, 0.1, 0.5, 0.5], 1)
    assert again["images"][0]["data"] == first["images"][0]["data"]
    assert client.get(f"/v1/sessions/{sid}/images/original_image?max_side=64").status_code == 200
    assert entry.loaded and entry.pixels.tobytes() == SRC.tobytes()  # decoded again, losslessly the same
