"""verl-tool's tool-server protocol: every exchange recorded from verl-tool's own server (TIGER-AI-Lab/verl-tool
@ 980962b, `python -m verl_tool.servers.tool_server --tool_type pixel_reasoner`, Pillow 13.0.0; recorded by
`bench/verl_tool/record_exchanges.py`) is replayed in order and must be answered identically: texts, dones,
valids, and the very JPEG bytes of every image."""

import base64
import copy
import io
import json
from pathlib import Path

from fastapi.testclient import TestClient
from PIL import Image

EXCHANGES = json.loads((Path(__file__).parent / "data" / "verl_tool_exchanges.json").read_text())
INPUT = next(e for e in EXCHANGES if e["name"] == "input_image")
RECORDED = [e for e in EXCHANGES if e.get("endpoint") == "POST /get_observation"]
VOLATILE = ("processing_time_ms", "queue_time_ms")


def with_image(value):
    """The request as it was sent: the recording stores the input image once, under a placeholder."""
    if isinstance(value, dict):
        return {k: with_image(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_image(v) for v in value]
    return INPUT["data_url"] if value == INPUT["placeholder"] else value


def observe(client: TestClient, body: dict, path: str = "/get_observation") -> dict:
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer.keys() == {"observations", "dones", "valids", *VOLATILE}
    return {k: v for k, v in answer.items() if k not in VOLATILE}


def test_every_recorded_exchange_is_answered_as_verl_tool_answers_it(client):
    assert len(RECORDED) >= 30
    for exchange in RECORDED:  # in recorded order: the scenarios build on their earlier calls
        assert exchange["status"] == 200
        got = observe(client, with_image(exchange["request"]))
        assert got == exchange["response"], exchange["name"]


def test_the_recorded_crops_decode_to_the_reference_pixels(client):
    """What the model sees: the decoded JPEG, identical to the reference's (same bytes, same decoder)."""
    crops = [e for e in RECORDED if isinstance(e["response"]["observations"][0], dict)]
    assert len(crops) >= 8
    first = crops[0]
    got = observe(client, with_image(first["request"]))["observations"][0]
    theirs = Image.open(io.BytesIO(base64.b64decode(first["response"]["observations"][0]["image"].split(",")[1])))
    ours = Image.open(io.BytesIO(base64.b64decode(got["image"].split(",")[1])))
    assert ours.size == theirs.size and ours.tobytes() == theirs.tobytes()


def test_health_has_verl_tools_shape(client):
    recorded = next(e for e in EXCHANGES if e["name"] == "health")
    answer = client.get("/health").json()
    assert sorted(answer) == recorded["response"]["keys"]
    assert answer["status"] == "healthy" and answer["tools"] == ["pixel_reasoner", "finish"]


def test_a_batch_runs_its_trajectories_and_keeps_each_ones_order(client):
    crop = ('<tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [0.1, 0.1, 0.5, 0.5], '
            '"target_image": %d}}</tool_call>')
    ids = ["a", "b", "a", "c"]  # trajectory a twice: its second action sees its first result as image 2
    body = {"trajectory_ids": ids, "actions": [crop % 1, crop % 1, crop % 2, "no call"],
            "finish": [False] * 4, "is_last_step": [False] * 4,
            "extra_fields": [{"images": [INPUT["data_url"]]} for _ in ids]}
    got = observe(client, body)
    assert got["valids"] == [True, True, True, False] and got["dones"] == [False] * 4
    assert got["observations"][2]["obs"].startswith("Here is the cropped image.")
    assert got["observations"][3]["invalid_reason"] == "No valid tool found for action"
    assert client.get("/health").json()["active_tasks"] == 3 - 1  # c sent no action: no session
    observe(client, {"trajectory_ids": ["a", "b"], "actions": ["", ""], "finish": [True, True]})
    assert client.get("/health").json()["active_tasks"] == 0


def test_images_are_read_once_and_finish_releases_the_session(client):
    app_core = client.app.state.core
    crop = '<tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [0, 0, 100, 100], "target_image": 1}}</tool_call>'
    other = io.BytesIO()
    Image.new("RGB", (56, 56), (255, 0, 0)).save(other, format="JPEG")
    other_url = "data:image/jpeg;base64," + base64.b64encode(other.getvalue()).decode()
    first = observe(client, {"trajectory_ids": ["t"], "actions": [crop], "extra_fields": [{"images": [INPUT["data_url"]]}]})
    again = observe(client, {"trajectory_ids": ["t"], "actions": [crop], "extra_fields": [{"images": [other_url]}]})
    assert first["observations"][0]["image"] == again["observations"][0]["image"]  # still the first image
    bridge = app_core.verl_tool()
    session_id = bridge._sessions["t"]
    observe(client, {"trajectory_ids": ["t"], "actions": [""], "finish": [True]})
    assert client.get(f"/v1/sessions/{session_id}").status_code in (404, 410)


def test_an_image_that_does_not_decode_is_a_processing_error_and_keeps_nothing(client):
    crop = '<tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [0, 0, 1, 1], "target_image": 1}}</tool_call>'
    broken = {"trajectory_ids": ["x"], "actions": [crop],
              "extra_fields": [{"images": ["data:image/jpeg;base64," + base64.b64encode(b"not a jpeg").decode()]}]}
    got = observe(client, broken)
    assert got["valids"] == [False] and got["dones"] == [False]
    assert got["observations"][0].startswith("Processing error: ")
    fixed = copy.deepcopy(broken)
    fixed["extra_fields"][0]["images"] = [INPUT["data_url"]]
    assert observe(client, fixed)["valids"] == [True]  # nothing was kept: the next call reads its images


def test_malformed_requests_are_422(client):
    for raw in (b'{"trajectory_ids": [', b"[" * 2000 + b"]" * 2000):  # broken, and nested past the limit
        assert client.post("/get_observation", content=raw,
                           headers={"content-type": "application/json"}).status_code == 422
    assert client.post("/get_observation", json={"trajectory_ids": ["a"], "actions": ["x", "y"]}).status_code == 422
    assert client.post("/get_observation", json={"trajectory_ids": [], "actions": []}).status_code == 422
    assert client.post("/get_observation", json={"trajectory_ids": ["a"], "actions": ["x"],
                                                 "extra_fields": [{}, {}]}).status_code == 422
    bad_images = {"trajectory_ids": ["a"], "actions": ['<tool_call>{"name": "crop_image", "arguments": {}}</tool_call>'],
                  "extra_fields": [{"images": [5]}]}
    got = observe(client, bad_images)
    assert got["observations"][0].startswith("Processing error: extra_fields 'images' must be a list")


def test_another_profile_through_its_path(client):
    """Any profile whose turn is one text in, one observation out: here DeepEyes' raw-text turn."""
    text = '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [10, 10, 300, 200]}}</tool_call>'
    got = observe(client, {"trajectory_ids": ["d"], "actions": [text],
                           "extra_fields": [{"images": [INPUT["data_url"]]}]}, "/verl-tool/deepeyes/get_observation")
    assert got["valids"] == [True] and isinstance(got["observations"][0], dict)
    assert got["observations"][0]["image"].startswith("data:image/")
    assert client.get("/verl-tool/deepeyes/health").json()["tools"] == ["deepeyes", "finish"]
    assert client.post("/verl-tool/nope/get_observation", json={"trajectory_ids": ["a"], "actions": ["x"]}
                       ).status_code == 422
