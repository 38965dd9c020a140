"""VisionThink through /act, turn by turn, against what its own rollout appended (tests/data/visionthink_golden.json,
recorded by running the reference's `vLLMRollout_MultiTurn_ToolCall.generate_sequences` with its function tools and
constants, fed by its dataset's `process_image`): the text byte for byte, `done`, the first view and each image
returned (size and pixels), with originals (`use_raw_image`) and with views (the last image doubled)."""

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
from tests.profiles.alpha_inputs import png
from tests.profiles.helpers import act_image
from tests.profiles.test_pyvision_rl import golden_image
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.profiles.visionthink import VisionThinkFormat, first_view, prepare_tool_call_inputs

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "visionthink_golden.json").read_text())
SESSIONS = {s["name"]: s for s in GOLDEN["sessions"]}
VISION = "<|vision_start|><|image_pad|><|vision_end|>"


@cache
def original(name: str) -> Image.Image:
    return golden_image(*GOLDEN["inputs"][name])


def digest(image: Image.Image) -> str:
    return hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), sr_model_dir=tmp_path_factory.mktemp("none"))
    with TestClient(create_app(settings)) as client:
        yield client


def new_session(client: TestClient, image: Image.Image, **settings) -> str:
    body = {"profile": "visionthink", "images": [{"data": b64(png_bytes(image))}], **settings}
    response = client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


def act(client: TestClient, sid: str, text: str) -> dict:
    response = client.post(f"/v1/sessions/{sid}/act", json={"text": text})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("name", slow_cases(SESSIONS, {"resize_then_answer"}))
def test_a_session_answers_as_the_reference_did(client, name):
    session = SESSIONS[name]
    shown_first = first_view(original(session["input"]))
    assert [*shown_first.size] == session["first_view"]["size"] and digest(shown_first) == session["first_view"][
        "sha256"]
    if session["use_raw_image"]:
        sid = new_session(client, original(session["input"]))
        info = client.get(f"/v1/sessions/{sid}").json()["images"][0]
        assert [info["view_width"], info["view_height"]] == session["first_view"]["size"]
    else:  # the trainer shows the first view and uploads it as it is
        sid = new_session(client, shown_first, input_form="view")
    for turn in session["turns"]:
        answer = act(client, sid, turn["action"])
        assert answer["done"] is ("appended" not in turn), turn["action"]
        assert answer["prompt"] == turn.get("appended", ""), turn["action"]
        if "image" in turn:
            image = act_image(answer)
            assert [image.width, image.height] == turn["image"]["size"] and digest(image) == turn["image"]["sha256"]


def test_image_tag_sessions(client):
    turn = SESSIONS["odd_sides"]["turns"][0]
    sid = new_session(client, original("odd"), image_marker="image_tag")
    assert act(client, sid, turn["action"])["prompt"] == turn["appended"].replace(VISION, "<image>")


def test_direct_calls(client):
    sid = new_session(client, original("odd"))
    call = {"id": "c1", "type": "function", "function": {"name": "resize_image", "arguments": '{"action": "resize"}'}}
    ok = client.post(f"/v1/sessions/{sid}/tool_calls", json={"tool_calls": [call]}).json()["results"][0]
    assert ok["ok"] and [ok["images"][0]["width"], ok["images"][0]["height"]] == [1000, 750]
    bad = client.post(f"/v1/sessions/{sid}/tools/resize_image", json={"action": "zoom"}).json()
    assert bad["text"].startswith("<tool_response>\nERROR occurs during the function tool call. Error Information: "
                                  "Unknown Tool Type: zoom. Available function tools are: `resize`.\n</tool_response>")


def test_the_turn_and_the_check():
    assert VisionThinkFormat().parse("<answer>A</answer>").done is True
    assert VisionThinkFormat().parse("<tool_call>x</tool_call>").calls[0].arguments == {"turn": "<tool_call>x</tool_call>"}
    with pytest.raises(UnboundLocalError):
        prepare_tool_call_inputs([])
    assert prepare_tool_call_inputs([{"arguments": {"action": "resize"}}]) == "resize"


ALPHA = json.loads((Path(__file__).parents[1] / "data" / "visionthink_alpha_golden.json").read_text())["cases"]


@pytest.mark.parametrize("case", ALPHA, ids=[c["name"] for c in ALPHA])
def test_alpha_and_palettes_are_dropped_after_the_resize_as_the_reference_does(client, case):
    """tests/data/visionthink_alpha_golden.json: VisionThink's own `process_image` on RGBA, LA and palette PNGs
    (scripts/goldens/record_visionthink_alpha.py) resizes in the image's own mode, then converts to RGB."""
    data = png(*case["input"])
    assert hashlib.sha256(data).hexdigest() == case["png_sha256"]
    shown_first = first_view(Image.open(io.BytesIO(data)))
    assert [*shown_first.size] == case["first_view"]["size"] and raw_digest(shown_first) == case["first_view"]["sha256"]
    response = client.post("/v1/sessions", json={"profile": "visionthink", "images": [{"data": b64(data)}]})
    sid = response.json()["session_id"]
    answer = act(client, sid, SESSIONS["resize_then_answer"]["turns"][0]["action"])
    image = act_image(answer)
    assert [*image.size] == case["resized"]["size"] and raw_digest(image) == case["resized"]["sha256"]
    if case["input_mode"] == "RGBA":  # dropping alpha first gives other pixels: the order is what is tested
        dropped_first = Image.open(io.BytesIO(data)).convert("RGB").resize(image.size, Image.Resampling.LANCZOS)
        assert raw_digest(dropped_first) != case["resized"]["sha256"]


def raw_digest(image: Image.Image) -> str:
    assert image.mode == "RGB"
    return hashlib.sha256(image.tobytes()).hexdigest()
