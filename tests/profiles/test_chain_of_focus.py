"""Chain-of-Focus through /act, turn by turn, against what its own inference loop did (tests/data/
chain_of_focus_golden.json, recorded by running the reference's `run_inference_loop` with its `do_crop`,
`find_absolute_bboxes`, `resize_image`, qwen-vl-utils' `smart_resize`, and rendering each turn with the Qwen2.5-VL
chat template the repository carries): the text appended byte for byte, `done`, and each image's size and
pixels (zooms, refused boxes zooming the whole view, failures showing the view itself)."""

from __future__ import annotations

import hashlib
import io
import json
from functools import cache
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import b64, png_bytes, slow_cases
from tests.profiles.helpers import act_image
from tests.profiles.test_pyvision_rl import golden_image
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.profiles.chain_of_focus import SCALE_UP, USER_PROMPT, ChainOfFocusFormat, do_crop

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "chain_of_focus_golden.json").read_text())
SESSIONS = {s["name"]: s for s in GOLDEN["sessions"]}
VISION = "<|vision_start|><|image_pad|><|vision_end|>"


@cache
def upload(width: int, height: int, seed: int) -> str:
    return b64(png_bytes(golden_image(width, height, seed)))


def digest(image: Image.Image) -> str:
    return hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), sr_model_dir=tmp_path_factory.mktemp("none"))
    with TestClient(create_app(settings)) as client:
        yield client


def new_session(client: TestClient, size: list[int], **settings) -> str:
    body = {"profile": "chain-of-focus", "images": [{"data": upload(*size)}], **settings}
    response = client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


def act(client: TestClient, sid: str, text: str) -> dict:
    response = client.post(f"/v1/sessions/{sid}/act", json={"text": text})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("name", slow_cases(SESSIONS, {"whole_view_x2_over_the_pixel_cap"}))
def test_a_session_answers_as_the_reference_did(client, name):
    session = SESSIONS[name]
    sid = new_session(client, session["input"])
    original = client.get(f"/v1/sessions/{sid}").json()["images"][0]
    assert [original["view_width"], original["view_height"]] == session["first_view"]["size"]
    for turn in session["turns"]:
        answer = act(client, sid, turn["action"])
        assert answer["done"] is ("appended" not in turn), turn["action"]
        assert answer["prompt"] == turn.get("appended", ""), turn["action"]
        if "image" in turn:
            shown = act_image(answer)
            assert [shown.width, shown.height] == turn["image"]["size"], turn["action"]
            assert digest(shown) == turn["image"]["sha256"], turn["action"]


def test_failures_show_the_view_itself_and_refused_boxes_the_whole_view_zoomed(client):
    sid = new_session(client, SESSIONS["broken_calls"]["input"])
    turns = SESSIONS["broken_calls"]["turns"]
    refused, missing = act(client, sid, turns[0]["action"]), act(client, sid, turns[1]["action"])
    assert refused["results"][0]["ok"] is False and refused["results"][0]["error"]["code"] == "invalid_box"
    assert missing["results"][0]["ok"] is False and missing["results"][0]["error"]["code"] == "tool_error"
    assert digest(act_image(missing)) == SESSIONS["broken_calls"]["first_view"]["sha256"]  # the model's first view
    assert [part["type"] for part in missing["observation"][0]["content"]] == ["image_url", "text"]
    assert missing["observation"][0]["content"][1]["text"] == USER_PROMPT


def test_direct_calls_take_the_call_s_arguments(client):
    sid = new_session(client, SESSIONS["zoom_twice"]["input"])
    first = SESSIONS["zoom_twice"]["turns"][0]["image"]
    call = {"id": "c1", "type": "function", "function": {"name": "image_zoom_in_tool", "arguments": json.dumps(
        {"bbox_2d": [100, 120, 400, 380], "label": "cup"})}}
    result = client.post(f"/v1/sessions/{sid}/tool_calls", json={"tool_calls": [call]}).json()["results"][0]
    assert result["ok"] and result["text"] == USER_PROMPT
    image = Image.open(io.BytesIO(__import__("base64").b64decode(result["images"][0]["data"])))
    assert [image.width, image.height] == first["size"] and digest(image) == first["sha256"]


def test_image_tag_sessions(client):
    sid = new_session(client, SESSIONS["zoom_twice"]["input"], image_marker="image_tag")
    turn = SESSIONS["zoom_twice"]["turns"][0]
    assert act(client, sid, turn["action"])["prompt"] == turn["appended"].replace(VISION, "<image>")


def test_the_turn_and_the_zoom_factor():
    fmt = ChainOfFocusFormat()
    assert fmt.parse("<answer>A</answer>").done is True
    assert fmt.parse("<tool_call>").calls[0].arguments == {"turn": "<tool_call>"}
    assert do_crop(Image.new("RGB", (600, 400)), [10, 10, 110, 70]).size == (196, 112)  # 200x120 to factor 28
    assert do_crop(Image.new("RGB", (100, 80)), [10, 10, 38, 24]).size == (168, 84)  # 56x28 grown to 112² pixels
    assert SCALE_UP == 2
