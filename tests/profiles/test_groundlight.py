"""Golden tests of profile `groundlight` (Groundlight r1_vlm: zoom on a keypoint, <tool> key-value calls,
images <= 1024 px). The environment's texts are those of r1_vlm's tool_vision_env.py, whose env_response sends
"No tool call or answer found" bare while tool errors are wrapped in <result>."""

import pytest
from PIL import Image

from tests.conftest import gradient
from tests.profiles.helpers import call, image_of, make_session


@pytest.mark.slow
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


def test_groundlight_no_call_reply_is_not_wrapped(client):
    sid = make_session(client, "groundlight", gradient(640, 480))
    body = client.post(f"/v1/sessions/{sid}/act", json={"text": "<think>hmm</think>"}).json()
    assert body["observation"] == [{"role": "user", "content": "Error: No tool call or answer found in your last "
                                                               "message."}]
    tool_error = client.post(f"/v1/sessions/{sid}/act", json={"text": "<tool>\nkeypoint: [1, 2]\n</tool>"}).json()
    assert tool_error["observation"][0]["content"] == ("<result>\nError: Tool call must specify 'name' in key-value "
                                                       "format.\n</result>")
