"""The reward doors beyond each profile's own tests: OpenEnv's step carries the reward and `done` as the reference
assigns them, a profile without a reward says so, the listing, and the rewards in the inspector's trajectory."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.conftest import b64, gradient, png_bytes

PICTURE = "data:image/png;base64," + b64(png_bytes(gradient(400, 300)))
CROP = ('<tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [0.1, 0.1, 0.5, 0.5], "target_image": 1}}'
        '</tool_call>')


def send(ws, kind: str, data: Any = None) -> dict[str, Any]:
    ws.send_text(json.dumps({"type": kind} if data is None else {"type": kind, "data": data}))
    return ws.receive_json()


def test_openenv_step_carries_the_reward_at_the_end(client) -> None:
    with client.websocket_connect("/openenv/pixel-reasoner/ws") as ws:
        reset = send(ws, "reset", {"images": [PICTURE], "reward": {"ground_truth": "red"}})
        assert reset["data"]["reward"] is None
        first = send(ws, "step", {"text": CROP})["data"]
        assert first["done"] is False and first["reward"] == 0.0
        last = send(ws, "step", {"text": "The answer is \\boxed{red}."})["data"]
        assert last["done"] is True and last["reward"] == 1.0
        terms = last["observation"]["metadata"]["reward"]
        assert terms["terms"] == {"accuracy": 1.0, "curiosity": 0.0, "action_redundancy": 0.0}
        sid = terms["session_id"]
        exported = client.get(f"/v1/sessions/{sid}/trajectory").json()
        assert exported["rewards"][0]["total"] == 1.0 and exported["rewards"][0]["details"]["valid_actions"] == 1
        send(ws, "reset", {"images": [PICTURE]})
        assert send(ws, "step", {"text": "\\boxed{red}"})["data"]["reward"] is None  # no reward asked: null


def test_openenv_reset_with_a_reward_for_a_profile_without_one(client) -> None:
    with client.websocket_connect("/openenv/default/ws") as ws:
        failed = send(ws, "reset", {"images": [PICTURE], "reward": {"ground_truth": "x"}})
    assert failed["type"] == "error" and failed["data"]["toolserver_code"] == "no_reward"


def test_one_shot_step_scores_its_episode(client) -> None:
    r = client.post("/openenv/arm-thinker/step", json={
        "action": {"text": "<think>ok</think><answer>Overall Judgment: True</answer>"},
        "reward": {"ground_truth": True}})
    assert r.status_code == 200, r.text
    assert r.json()["done"] is True and r.json()["reward"] == 1.0


def test_listing_and_session_errors(client) -> None:
    listed = client.get("/v1/rewards").json()
    served = {r["profile"]: r for r in listed["rewards"]}
    assert {"deepeyes", "arm-thinker", "arm-thinker-qwen3vl", "mini-o3", "chain-of-focus", "pixel-reasoner"} <= set(
        served)
    assert served["deepeyes"]["judged"] and not served["pixel-reasoner"]["judged"]
    assert served["deepeyes"]["source"].endswith("@6c5e796")
    sid = client.post("/v1/sessions", json={"profile": "default"}).json()["session_id"]
    r = client.post(f"/v1/sessions/{sid}/reward", json={"response": "x", "ground_truth": "x"})
    assert r.status_code == 422 and r.json()["code"] == "no_reward"
    gone = client.post("/v1/sessions/nope/reward", json={"response": "x"})
    assert gone.status_code in (404, 410)
    bad = client.post("/v1/rewards", json={"profile": "arm-thinker", "items": [{"turns": "not a list"}]})
    assert bad.status_code == 422


class Forward(httpx.BaseTransport):
    """The Python client's requests, answered by the app under test."""

    def __init__(self, app_client):
        self.app_client = app_client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self.app_client.request(request.method, request.url.raw_path.decode(), content=request.read(),
                                         headers=dict(request.headers))
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


def test_python_client_scores_a_session_and_a_group(client) -> None:
    from toolserver.client import Client

    turns = ["<think>check</think><tool_call>{\"name\": \"check_whether_response_word_count_in_range\", "
             "\"arguments\": {\"response\": \"a b\", \"lower_bound\": 1, \"upper_bound\": 5}}</tool_call>",
             "<think>fine</think><answer>Overall Judgment: True</answer>"]
    sid = client.post("/v1/sessions", json={"profile": "arm-thinker"}).json()["session_id"]
    with Client("http://testserver", transport=Forward(client), binary=False) as ts:
        session = ts.session(sid)
        session.act(turns[0])
        scored = session.reward("True", turns=turns)
        group = ts.rewards("arm-thinker", [{"turns": turns, "ground_truth": "true"},
                                           {"turns": turns, "ground_truth": "false"}])
    assert scored.total == 1.0 and scored.profile == "arm-thinker" and scored.session_id == sid
    assert [r.total for r in group.results] == [1.0, 0.0] and group.source.endswith("@96b1baf")
