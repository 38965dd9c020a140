"""Mini-o3 through /act, turn by turn, against what its own rollout appended (tests/data/mini_o3_golden.json,
recorded by running the reference's `AsyncvLLMEngine._async_rollout_a_request` with its `process_tool_call`,
`process_image`, `prepare_grounding_inputs_multi_turn`, `crop_image` and constants): the text byte for byte,
`done`, each image shown (size and pixels) and each crop as cut (its size), in 0-1 and in pixel boxes."""

from __future__ import annotations

import hashlib
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
from toolserver.formats import parse
from toolserver.profiles.mini_o3 import evaluate, process_image

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "mini_o3_golden.json").read_text())
SESSIONS = {s["name"]: s for s in GOLDEN["sessions"]}
VISION = "<|vision_start|><|image_pad|><|vision_end|>"


@cache
def upload(name: str) -> str:
    return b64(png_bytes(golden_image(*GOLDEN["inputs"][name])))


def digest(image: Image.Image) -> str:
    return hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), sr_model_dir=tmp_path_factory.mktemp("none"))
    with TestClient(create_app(settings)) as client:
        yield client


def new_session(client: TestClient, name: str, relative: bool = True, **settings) -> str:
    body = {"profile": "mini-o3", "coords": "rel1" if relative else "abs_view",
            "images": [{"data": upload(name)}], **settings}
    response = client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


def act(client: TestClient, sid: str, text: str) -> dict:
    response = client.post(f"/v1/sessions/{sid}/act", json={"text": text})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("name", slow_cases(SESSIONS, {"zoom_then_zoom_the_observation"}))
def test_a_session_answers_as_the_reference_did(client, name):
    session = SESSIONS[name]
    sid = new_session(client, session["input"], session["relative"])
    original = client.get(f"/v1/sessions/{sid}").json()["images"][0]
    assert [original["view_width"], original["view_height"]] == session["first_view"]["size"]  # the dataset's view
    for turn in session["turns"]:
        answer = act(client, sid, turn["action"])
        assert answer["done"] is ("appended" not in turn), turn["action"]
        assert answer["prompt"] == turn.get("appended", ""), turn["action"]
        if "image" not in turn:
            assert answer["observation"] == [] or all(isinstance(m["content"], str) for m in answer["observation"])
            continue
        recorded, shown = turn["image"], act_image(answer)
        assert [shown.width, shown.height] == recorded["size"] and digest(shown) == recorded["sha256"]
        key = answer["results"][0]["images"][0]["key"]
        info = next(i for i in client.get(f"/v1/sessions/{sid}").json()["images"] if i["key"] == key)
        assert [info["width"], info["height"]] == recorded["raw_size"]  # kept as cut, for the next crops
        assert [info["view_width"], info["view_height"]] == recorded["size"]
        fetched = Image.open(__import__("io").BytesIO(client.get(f"/v1/sessions/{sid}/images/{key}").content))
        assert digest(fetched) == recorded["sha256"]  # what a fetch returns is what the model is shown


def test_the_observation_places_the_image_in_the_turn_s_text(client):
    sid = new_session(client, "large")
    answer = act(client, sid, SESSIONS["zoom_then_zoom_the_observation"]["turns"][0]["action"])
    [message] = answer["observation"]
    assert message["role"] == "user" and [part["type"] for part in message["content"]] == ["text", "image_url", "text"]
    assert message["content"][0]["text"].endswith("(Observation 1):\n")
    assert message["content"][2]["text"].startswith(".\nContinue your reasoning process")


def test_image_tag_sessions_get_the_tag_where_the_rollout_writes_vision_tokens(client):
    sid = new_session(client, "large", image_marker="image_tag")
    turns = SESSIONS["errors_count_as_actions"]["turns"]
    assert act(client, sid, turns[0]["action"])["prompt"] == turns[0]["appended"]  # an error holds no image
    sid = new_session(client, "large", image_marker="image_tag")
    turn = SESSIONS["zoom_then_zoom_the_observation"]["turns"][0]
    assert act(client, sid, turn["action"])["prompt"] == turn["appended"].replace(VISION, "<image>")


def test_direct_calls_read_the_same_box(client):
    """/tool_calls and the tools route take the grounding argument itself; the rollout's checks are the same."""
    sid = new_session(client, "large")
    first = SESSIONS["zoom_then_zoom_the_observation"]["turns"][0]["image"]
    call = {"id": "c1", "type": "function", "function": {"name": "grounding", "arguments": json.dumps(
        {"bbox_2d": [0.25, 0.25, 0.5, 0.5], "source": "original_image"})}}
    response = client.post(f"/v1/sessions/{sid}/tool_calls", json={"tool_calls": [call]}).json()
    result = response["results"][0]
    assert result["ok"] and result["text"].startswith("After the above Action 0, here is the the zoom-in image")
    assert [result["images"][0]["width"], result["images"][0]["height"]] == first["size"]
    missing = client.post(f"/v1/sessions/{sid}/tools/grounding", json={"bbox_2d": [0, 0, 1, 1]}).json()
    assert missing["text"].startswith("ERROR occurs during grounding. Error Information: There is no 'source' in "
                                      "grounding argument: {'bbox_2d': [0, 0, 1, 1]}.\n")


def test_a_text_without_grounding_ends_the_episode():
    assert parse("<answer>B</answer>", "mini-o3").done is True
    parsed = parse('<grounding>{"bbox_2d": [0, 0, 1, 1], "source": "original_image"}</grounding>', "mini-o3")
    assert parsed.done is False and parsed.calls[0].name == "grounding"


def test_the_box_is_evaluated_without_running_code():
    """A deviation (docs/decisions.md): the reference runs Python's eval on the model's text."""
    assert evaluate("[0.1, 0.2, 1/4, 2*0.25]") == [0.1, 0.2, 0.25, 0.5]
    for source, error in (("[__import__('os').getcwd(), 0, 1, 1]", "not Call"), ("[0] * 10**9", "longer than"),
                          ("[open, 0, 1, 1]", "name 'open' is not defined"), ("[2 ** 10**9]", "too large")):
        with pytest.raises(Exception, match=error):
            evaluate(source)


def test_process_image_keeps_what_needs_no_resize_and_tames_thin_crops():
    image = Image.new("RGB", (300, 200))
    assert process_image(image) is image
    assert process_image(Image.new("RGB", (1, 99))).size == (29, 2785)  # recorded: small_image_relative, turn 2


@pytest.mark.parametrize("delivery", ["inline", "ref"])
def test_the_copy_shown_is_what_every_store_delivers_and_the_crop_what_it_keeps(settings_any_store, delivery):
    """The second crop is cut from the first as cut (24x15 of 48x30), not from the 252x158 copy shown."""
    session = SESSIONS["tiny_crop_upscaled_nearest"]
    with TestClient(create_app(settings_any_store)) as client:
        sid = new_session(client, "large", output={"delivery": delivery})
        for turn in session["turns"][:2]:
            answer = act(client, sid, turn["action"])
            assert answer["prompt"] == turn["appended"]
            image = answer["results"][0]["images"][0]
            assert [image["width"], image["height"]] == turn["image"]["size"]
            fetched = Image.open(__import__("io").BytesIO(client.get(f"/v1/sessions/{sid}/images/{image['key']}").content))
            assert digest(fetched) == turn["image"]["sha256"]
        sizes = [[i["width"], i["height"]] for i in client.get(f"/v1/sessions/{sid}").json()["images"]]
        assert sizes[1:] == [turn["image"]["raw_size"] for turn in session["turns"][:2]]
        turn, key = session["turns"][0], {"Idempotency-Key": "retry-1"}
        first = client.post(f"/v1/sessions/{sid}/act", json={"text": turn["action"]}, headers=key).json()
        again = client.post(f"/v1/sessions/{sid}/act", json={"text": turn["action"]}, headers=key).json()
        assert again["observation"] == first["observation"] and again["prompt"] == first["prompt"]  # a replay
        if delivery == "inline":
            assert digest(act_image(again)) == turn["image"]["sha256"]


@pytest.mark.parametrize("case", GOLDEN["prepare"], ids=[str(i) for i in range(len(GOLDEN["prepare"]))])
def test_the_checks_of_a_direct_call_are_the_reference_s(case):
    """`prepare_grounding_inputs_multi_turn` on what only a direct call hands it (recorded by calling the reference's
    own function on an original of 2400x1500 shown at 1788x1118 and a 600x375 crop)."""
    from toolserver.profiles.mini_o3 import prepare

    try:
        index, box = prepare(case["argument"], [(2400, 1500), (600, 375)], [(1788, 1118), (600, 375)],
                             case["relative"])
    except Exception as exc:
        assert str(exc) == case["error"]
    else:
        assert "error" not in case and [index, box] == [case["index"], case["bbox"]]
