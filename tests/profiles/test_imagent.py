"""Golden tests of profile `imagent`: zoom_in and lookback_reuse by image index, at most 5 calls, Hermes calls."""

from tests.conftest import gradient
from tests.profiles.helpers import call, make_session


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
