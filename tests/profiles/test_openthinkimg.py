"""OpenThinkIMG (`openthinkimg`) against what its own code did (zhaochen0110/OpenThinkIMG @ 45d295f0, recorded by
scripts/goldens/record_openthinkimg.py into tests/data/openthinkimg_golden.json): every session of
openthinkimg_sessions.py through `/act`, turn by turn — `done`, the message its GRPO rollout appends (text byte for
byte, the image's size and pixels) — then `crop`'s cases, the points the drawing workers read, the subplot boxes,
the action JSON's reading, and the tools as OpenAI function entries and over MCP."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import PHOTOS, b64, gradient, png_bytes
from tests.profiles.openthinkimg_sessions import (
    CROP_PHOTO,
    CROPS,
    POINT_PARAMS,
    SESSIONS,
    TRANSLUCENT,
    act,
    session_image,
)
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.tools.perception.select_subplot import subplot_boxes
from toolserver.tools.perception.worker import NO_QUESTION, jpeg_bytes, text_reply, worker_points

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "openthinkimg_golden.json").read_text())
RECORDED = {session["name"]: session for session in GOLDEN["sessions"]}
SESSION = {session["name"]: session for session in SESSIONS}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("openthinkimg")
    settings = Settings(data_dir=tmp / "data", allowed_roots=[PHOTOS, tmp], sr_model_dir=tmp / "none")
    with TestClient(create_app(settings)) as client:
        yield client


def start(client: TestClient, photo: str, question: str | None = "What is shown?") -> str:
    image = {"data": b64(png_bytes(session_image(photo)))} if photo == TRANSLUCENT else {"path": str(PHOTOS / photo)}
    body = {"profile": "openthinkimg", "images": [image],
            "texts": {"question": question} if question is not None else {}}
    response = client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


def turn(client: TestClient, sid: str, text: str) -> dict:
    response = client.post(f"/v1/sessions/{sid}/act", json={"text": text})
    assert response.status_code == 200, response.text
    return response.json()


def pixels(url: str) -> dict:
    image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    return {"size": [*image.size], "sha256": hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()}


def message(observation: list[dict]) -> list[dict]:
    """Our observation in the recorder's terms: each message's role, texts and images."""
    return [{"role": m["role"], "texts": [p["text"] for p in m["content"] if p["type"] == "text"],
             "images": [pixels(p["image_url"]["url"]) for p in m["content"] if p["type"] == "image_url"]}
            for m in observation]


@pytest.mark.parametrize("name", list(RECORDED))
def test_a_session_runs_as_the_reference_ran_it(client, name):
    session = SESSION[name]
    sid = start(client, session["photo"], session["question"])
    for recorded in RECORDED[name]["turns"]:
        answer = turn(client, sid, recorded["action"])
        assert answer["done"] is recorded["done"], recorded["action"]
        if [m["role"] for m in recorded["appended"]] == ["assistant"]:
            # No call read: the rollout repeats its question as an assistant turn, the trainer's to write.
            assert recorded["appended"][0]["texts"] == [session["question"]]
            assert answer["observation"] == [] and answer["calls"] == [], recorded["action"]
        else:
            assert message(answer["observation"]) == recorded["appended"], recorded["action"]


@pytest.mark.parametrize("case", GOLDEN["crops"], ids=[str(c["param"]) for c in GOLDEN["crops"]])
def test_crop_answers_as_its_worker(client, case):
    sid = start(client, CROP_PHOTO, "QUESTION")
    answer = turn(client, sid, act("crop", {"image": "img_1", "param": case["param"]}))
    assert answer["results"][0]["text"] == case["text"]
    assert answer["results"][0]["ok"] is case["edited"]
    assert message(answer["observation"]) == [case["appended"]]


def test_the_golden_covers_the_cases():
    assert [case["param"] for case in GOLDEN["crops"]] == CROPS
    assert [case["param"] for case in GOLDEN["points"]] == POINT_PARAMS
    assert [session["name"] for session in GOLDEN["sessions"]] == list(SESSION)
    assert [[turn["action"] for turn in session["turns"]] for session in GOLDEN["sessions"]] == [
        session["turns"] for session in SESSIONS]


def test_the_points_a_drawing_worker_reads():
    for case in GOLDEN["points"]:
        assert [[float(v) for v in p] for p in worker_points(case["param"], 640, 480)] == case["points"], case


def test_the_subplot_boxes():
    for photo, recorded in GOLDEN["subplots"].items():
        with Image.open(PHOTOS / photo) as image:
            rgb = image.convert("RGB")
        if isinstance(recorded, dict):
            with pytest.raises(IndexError, match=recorded["error"].split(": ", 1)[1]):
                subplot_boxes(rgb)
        else:
            assert subplot_boxes(rgb) == recorded, photo


def test_a_model_tool_not_running_and_a_session_without_its_question(client):
    sid = start(client, "Wood.jpg", question=None)
    ocr = turn(client, sid, act("ocr", {"image": "img_1"}))
    assert ocr["observation"][0]["content"][-1]["text"] == (
        "OBSERVATION:\nocr model outputs: Tool OCR not found.\n"
        "Please summarize the model outputs and answer my first question.")
    fallback = turn(client, sid, act("ZoomInSubfigure", {"image": "img_1", "param": "the plot"}))
    assert fallback["results"][0]["text"] == NO_QUESTION and fallback["done"] is False


def test_the_tools_as_openai_functions_and_direct_calls(client):
    listed = client.get("/v1/tools", params={"profile": "openthinkimg"}).json()
    names = [t["function"]["name"] for t in listed]
    assert names == ["DrawHorizontalLineByY", "DrawVerticalLineByX", "ZoomInSubfigure", "crop", "OCR",
                     "SegmentRegionAroundPoint", "Point"]
    for entry in listed:  # OCR's worker reads the image alone
        expected = {"image"} if entry["function"]["name"] == "OCR" else {"image", "param"}
        assert set(entry["function"]["parameters"]["required"]) == expected
    sid = start(client, "LadyBird.jpg", "Where?")
    drawn = client.post(f"/v1/sessions/{sid}/tools/drawhorizontallinebyy", json={"image": "img_1", "param": "y=50"})
    assert drawn.status_code == 200 and drawn.json()["text"] == "Line drawn successfully."
    subplot = client.post(f"/v1/sessions/{sid}/tools/ZoomInSubfigure", json={"image": "img_2", "param": "left"})
    body = subplot.json()
    assert body["text"] == "Select subplot done." and body["meta"]["rollout"] == "question"
    assert body["meta"]["question"] == "Where?" and body["meta"]["subplots"]


def test_the_tools_over_mcp(live_server):
    from mcp import Client

    async def main():
        async with Client(f"{live_server.url}/mcp?profile=openthinkimg") as mcp:
            names = [t.name for t in (await mcp.list_tools()).tools]
            await mcp.call_tool("load_image", {"data": base64.b64encode(png_bytes(gradient(320, 200))).decode()})
            drawn = await mcp.call_tool("DrawVerticalLineByX", {"image": "img_1", "param": 'x="50" y="50"'})
            return names, drawn

    names, drawn = asyncio.run(asyncio.wait_for(main(), 60))
    assert {"DrawHorizontalLineByY", "DrawVerticalLineByX", "ZoomInSubfigure", "crop"} <= set(names)
    texts = [c.text for c in drawn.content if c.type == "text"]
    images = [Image.open(io.BytesIO(base64.b64decode(c.data))) for c in drawn.content if c.type == "image"]
    assert not drawn.is_error and "Line drawn successfully." in texts and images[0].size != (320, 200)


def test_a_text_reply_shows_the_newest_image_again():
    """The helper a model tool answers a text with (OCR's texts, Point's coordinates): ok, the newest image again,
    shown as the rollout encodes it; without an image in the session, the text alone."""
    newest = gradient(40, 30)
    ctx = SimpleNamespace(images=[SimpleNamespace(pixels=newest)], texts={})
    reply = text_reply(ctx, "['1970', '2000']", source="ocr")
    assert reply.ok and reply.meta == {"rollout": "observation", "source": "ocr"} and reply.images == [newest]
    assert reply.encoded == [(jpeg_bytes(newest), "image/jpeg")] and reply.encoded_is_pixels is False
    alone = text_reply(SimpleNamespace(images=[], texts={}), "x")
    assert alone.ok and alone.images == [] and alone.text == "x"
