"""Golden tests of profile `deepeyes` (Visual-Agent/DeepEyes@6c5e796, VisualToolBoxV5 and prompt.py).

Expected boxes are worked out by hand from the reference's arithmetic (in the comments); expected pixels are
the Pillow calls the reference makes (`crop`, `rotate`) on the original image."""

import numpy as np
import pytest
from PIL import Image

from tests.conftest import b64, gradient, png_bytes
from tests.profiles.helpers import call, image_of, make_session

SRC = gradient(640, 480)
TURN_PROMPT = ("\nThink in the mind first, and then decide whether to call tools one or more times OR provide final "
               "answer. Format strictly as: <think>...</think> <tool_call>...</tool_call> <tool_call>...</tool_call> "
               "(if any tools needed) OR <answer>...</answer> (if no tools needed).")
RESPONSE = "<tool_response>\n<|vision_start|><|image_pad|><|vision_end|>\n</tool_response>\n"  # as its rollout writes it
OPEN, CLOSE = "<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"


def zoom(client, sid, bbox):
    return call(client, sid, "image_zoom_in_tool", {"bbox_2d": bbox})


def act(client, sid, text):
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": text})
    assert r.status_code == 200, r.text
    return r.json()


def tool_call(name, arguments):
    import json

    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_tools_and_schemas_are_the_reference_prompts(client):
    tools = client.get("/v1/tools", params={"profile": "deepeyes"}).json()
    # SYSTEM_PROMPT_V5's zoom tool, its `"required": ["bbox"]` quirk included.
    assert tools[0] == {"type": "function", "function": {
        "name": "image_zoom_in_tool",
        "description": "Zoom in on a specific region of an image by cropping it based on a bounding box (bbox) and an "
                       "optional object label.",
        "parameters": {"type": "object", "properties": {
            "bbox_2d": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4,
                        "description": "The bounding box of the region to zoom in, as [x1, y1, x2, y2], where (x1, y1) "
                                       "is the top-left corner and (x2, y2) is the bottom-right corner."},
            "label": {"type": "string", "description": "The name or label of the object in the specified bounding box "
                                                       "(optional)."}},
            "required": ["bbox"]}}}
    # SYSTEM_PROMPT_V1's rotate tool, the only schema DeepEyes writes for it.
    assert tools[1] == {"type": "function", "function": {
        "name": "image_rotate_tool",
        "description": "Rotate an image by a specified angle (clockwise or counterclockwise).",
        "parameters": {"type": "object", "properties": {
            "image_path": {"type": "string", "description": "Path or URL of the image to be rotated."},
            "angle": {"type": "integer", "description": "Rotation angle in degrees (e.g., 90, 180, 270). Positive "
                                                        "values for clockwise, negative for counterclockwise."}},
            "required": ["image_path", "angle"]}}}


def test_zoom_crops_the_original_as_given(client):
    sid = make_session(client, "deepeyes", SRC)
    r = zoom(client, sid, [100, 50, 300, 250])  # 200x200, both sides >= 28: the box as it is
    assert r["ok"] and r["text"] == "" and r["meta"]["box_original"] == [100, 50, 300, 250]
    assert image_of(r).tobytes() == SRC.crop((100, 50, 300, 250)).tobytes()
    # Clamped to the image first: [-50, -50, 100, 80] -> [0, 0, 100, 80].
    r = zoom(client, sid, [-50, -50, 100, 80])
    assert r["meta"]["box_original"] == [0, 0, 100, 80] and image_of(r).size == (100, 80)
    # Float edges go to Pillow as they are: round half to even, 101.5 -> 102, 50.5 -> 50, 300.5 -> 300, 250.5 -> 250.
    r = zoom(client, sid, [101.5, 50.5, 300.5, 250.5])
    assert image_of(r).tobytes() == SRC.crop((102, 50, 300, 250)).tobytes()


def test_zoom_always_works_on_the_first_input(client):
    second = Image.new("RGB", (640, 480), (0, 0, 255))
    sid = make_session(client, "deepeyes", SRC, second)
    first = zoom(client, sid, [0, 0, 200, 200])
    again = zoom(client, sid, [0, 0, 200, 200])  # not a crop of observation_1, nor of the second input
    assert image_of(first).tobytes() == image_of(again).tobytes() == SRC.crop((0, 0, 200, 200)).tobytes()


def test_small_boxes_grow_about_the_centre_without_clamping(client):
    sid = make_session(client, "deepeyes", SRC)
    # [100, 100, 114, 120]: w 14, h 20 < 28 -> ratio 28/14 = 2; half-sizes ceil(20*2*0.5) = 20, ceil(14*2*0.5) = 14
    # about the centre (107, 110) -> [93, 90, 121, 130], 28x40.
    r = zoom(client, sid, [100, 100, 114, 120])
    assert r["meta"]["box_original"] == [93, 90, 121, 130]
    assert image_of(r).tobytes() == SRC.crop((93, 90, 121, 130)).tobytes()
    # At the corner: [0, 0, 14, 20] -> centre (7, 10) -> [-7, -10, 21, 30]; Pillow fills outside with black.
    r = zoom(client, sid, [0, 0, 14, 20])
    assert r["meta"]["box_original"] == [-7, -10, 21, 30]
    out = np.asarray(image_of(r))
    assert out.shape == (40, 28, 3) and not out[:10].any() and not out[:, :7].any()
    assert image_of(r).tobytes() == SRC.crop((-7, -10, 21, 30)).tobytes()


@pytest.mark.parametrize("bbox, text", [
    ([300, 10, 100, 200], "Error: ZOOM IN ARGUMENTS ARE INVALID"),  # left >= right
    ([0, 0, 600, 5], "Error: ZOOM IN ARGUMENTS ARE INVALID"),  # 600/5 = 120 > 100, checked before growing
    ([700, 10, 800, 100], "Error: ZOOM IN ARGUMENTS ARE INVALID"),  # right clamped to 640 < left
    ([10, 10, 20], "Error: VisualToolBoxV5.maybe_resize_bbox() missing 1 required positional argument: 'bottom'"),
    ([10, 10], "Error: VisualToolBoxV5.maybe_resize_bbox() missing 2 required positional arguments: 'right' and "
               "'bottom'"),
    ([1, 2, 3, 4, 5], "Error: VisualToolBoxV5.maybe_resize_bbox() takes 5 positional arguments but 6 were given"),
    (5, "Error: verl.workers.agent.envs.mm_process_engine.visual_toolbox_v5.VisualToolBoxV5.maybe_resize_bbox() "
        "argument after * must be an iterable, not int"),
    (["1", 10, 20, 30], "Error: '>' not supported between instances of 'str' and 'int'"),
])
def test_zoom_failures_read_as_the_reference(client, bbox, text):
    sid = make_session(client, "deepeyes", SRC)
    r = zoom(client, sid, bbox)
    assert not r["ok"] and r["text"] == text and r["images"] == []


def test_missing_arguments_are_python_key_errors(client):
    sid = make_session(client, "deepeyes", SRC)
    assert call(client, sid, "image_zoom_in_tool", {"bbox": [0, 0, 100, 100]})["text"] == "Error: 'bbox_2d'"
    assert call(client, sid, "image_rotate_tool", {"image_path": "x.jpg"})["text"] == "Error: 'angle'"
    r = call(client, sid, "image_rotate_tool", {"angle": "90"})  # Pillow computes angle % 360.0
    assert r["text"] == "Error: not all arguments converted during string formatting"


def test_rotate_is_pillows_counter_clockwise_same_canvas(client):
    sid = make_session(client, "deepeyes", SRC)
    r = call(client, sid, "image_rotate_tool", {"image_path": "ignored.jpg", "angle": 90})
    out = image_of(r)
    assert r["ok"] and out.size == (640, 480)
    assert out.tobytes() == SRC.rotate(90).tobytes()
    # Counter-clockwise: what was 100 px right of the centre is now 100 px above it (R = x % 256, G = y % 256).
    red, green, _ = out.getpixel((320, 140))
    assert abs(red - 420 % 256) <= 1 and abs(green - 240) <= 1
    assert out.getpixel((0, 0)) == (0, 0, 0) and out.getpixel((639, 479)) == (0, 0, 0)  # 640x480 turned: bars
    assert image_of(call(client, sid, "image_rotate_tool", {"angle": 45})).tobytes() == SRC.rotate(45).tobytes()


def test_transparency_is_dropped_as_convert_rgb_does(client):
    rgba = Image.new("RGBA", (64, 64), (200, 10, 10, 0))
    r = client.post("/v1/sessions", json={"profile": "deepeyes", "images": [{"data": b64(png_bytes(rgba))}]})
    sid = r.json()["session_id"]
    out = image_of(zoom(client, sid, [0, 0, 64, 64]))
    assert out.getpixel((5, 5)) == (200, 10, 10)  # not composited on white


def test_act_turn_renders_tool_responses_then_the_turn_prompt(client):
    sid = make_session(client, "deepeyes", SRC)
    text = ("<think>look closer</think>" + tool_call("image_zoom_in_tool", {"bbox_2d": [0, 0, 100, 100]})
            + tool_call("image_rotate_tool", {"angle": 180}))
    j = act(client, sid, text)
    assert not j["done"] and [r["ok"] for r in j["results"]] == [True, True]
    assert j["prompt"] == OPEN + RESPONSE * 2 + TURN_PROMPT + CLOSE
    content = j["observation"][0]["content"]
    assert [part["type"] for part in content] == ["text", "image_url", "text", "image_url", "text"]
    assert content[0]["text"] == "<tool_response>\n"
    assert content[2]["text"] == "\n</tool_response>\n<tool_response>\n"
    assert content[4]["text"] == "\n</tool_response>\n" + TURN_PROMPT


def test_image_tag_sessions_keep_the_env_s_image_tags(client):
    """The env's own text; its rollout replaces each `<image>` with Qwen-VL's vision tokens (the default)."""
    sid = make_session(client, "deepeyes", SRC, image_marker="image_tag")
    j = act(client, sid, tool_call("image_zoom_in_tool", {"bbox_2d": [0, 0, 100, 100]}))
    assert j["prompt"] == OPEN + "<tool_response>\n<image>\n</tool_response>\n" + TURN_PROMPT + CLOSE


def test_act_runs_at_most_three_calls(client):
    sid = make_session(client, "deepeyes", SRC)
    j = act(client, sid, "".join(tool_call("image_zoom_in_tool", {"bbox_2d": [0, 0, 50 + i, 50]}) for i in range(5)))
    assert len(j["results"]) == 3 and j["prompt"] == OPEN + RESPONSE * 3 + TURN_PROMPT + CLOSE


def test_one_error_voids_the_turn(client):
    sid = make_session(client, "deepeyes", SRC)
    good = tool_call("image_zoom_in_tool", {"bbox_2d": [0, 0, 100, 100]})
    bad = tool_call("image_zoom_in_tool", {"bbox_2d": [100, 0, 0, 100]})
    j = act(client, sid, good + bad + good)
    # The first call ran, the second failed, the third never ran; the model sees only the error.
    assert [r["ok"] for r in j["results"]] == [True, False]
    assert j["prompt"] == OPEN + "Error: ZOOM IN ARGUMENTS ARE INVALID" + CLOSE
    assert j["observation"] == [{"role": "user", "content": "Error: ZOOM IN ARGUMENTS ARE INVALID"}]


def test_broken_json_is_reached_after_the_calls_before_it(client):
    sid = make_session(client, "deepeyes", SRC)
    good = tool_call("image_zoom_in_tool", {"bbox_2d": [0, 0, 100, 100]})
    broken = '<tool_call>{"name": "image_zoom_in_tool" "arguments": {}}</tool_call>'
    j = act(client, sid, good + broken)
    assert [r["ok"] for r in j["results"]] == [True, False]
    assert j["prompt"] == OPEN + "Error: Expecting ',' delimiter: line 1 column 31 (char 30)" + CLOSE
    # A failing call before the broken one is what the model sees.
    failing = tool_call("image_zoom_in_tool", {"bbox_2d": [100, 0, 0, 100]})
    j = act(client, sid, failing + broken)
    assert j["prompt"] == OPEN + "Error: ZOOM IN ARGUMENTS ARE INVALID" + CLOSE


@pytest.mark.parametrize("block, text", [
    ('{"nam": "image_zoom_in_tool", "arguments": {}}', "Error: 'name'"),
    ('{"name": "image_zoom_in_tool"}', "Error: 'arguments'"),
    ('["image_zoom_in_tool"]', "Error: list indices must be integers or slices, not str"),
    ('{"name": "zoom", "arguments": {}}', "Error: Unknown tool name: zoom"),
    ('{"name": 7, "arguments": {}}', "Error: Unknown tool name: 7"),
    ('{"name": "image_zoom_in_tool", "arguments": [1, 2]}', "Error: list indices must be integers or slices, not str"),
])
def test_act_call_errors(client, block, text):
    sid = make_session(client, "deepeyes", SRC)
    j = act(client, sid, f"<tool_call>{block}</tool_call>")
    assert not j["done"] and j["prompt"] == OPEN + text + CLOSE


@pytest.mark.parametrize("text, runs", [
    ("<answer>42</answer>" + tool_call("image_rotate_tool", {"angle": 90}), False),  # an answer ends it first
    ("The answer is 42.", False),  # no tool call: the episode ends
    ("<answer></answer>" + tool_call("image_rotate_tool", {"angle": 90}), True),  # an empty answer does not count
])
def test_answers_and_silence_end_the_episode(client, text, runs):
    sid = make_session(client, "deepeyes", SRC)
    j = act(client, sid, text)
    assert j["done"] is not runs
    assert (j["prompt"] == "") is not runs and (j["observation"] == []) is not runs
