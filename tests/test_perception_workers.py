"""OpenThinkIMG's model workers (`toolserver/tools/perception/model_workers.py`) as its rollout drives them, through
`/act` on a profile that is `openthinkimg` with the model tools in: the newest image handed to the worker, the
worker's texts written back in the rollout's OBSERVATION lines, an empty image field answered with the question."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import b64, png_bytes
from tests.perception_helpers import build_tiny_got_ocr2, build_tiny_sam2
from tests.profiles.openthinkimg_sessions import act
from tests.test_perception_models import picture
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.profiles import PROFILES, register_profile
from toolserver.profiles.base import tools_by_name
from toolserver.profiles.openthinkimg import IMAGE_TOOLS
from toolserver.profiles.openthinkimg import PROFILES as OPENTHINKIMG
from toolserver.tools.perception.model_workers import WorkerOcr, WorkerSegmentRegionAroundPoint

NAME = "openthinkimg-model-workers-test"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("workers")
    (profile,) = OPENTHINKIMG
    register_profile(type(profile)(NAME, profile.description,
                                   tools_by_name(*IMAGE_TOOLS, WorkerOcr(), WorkerSegmentRegionAroundPoint()),
                                   coords=profile.coords, call_format=profile.format, alpha=profile.alpha),
                     source="test")
    settings = Settings(data_dir=tmp / "data", workers=2, clip_model="", sam2_model=str(build_tiny_sam2(tmp / "sam2")),
                        ocr_model=str(build_tiny_got_ocr2(tmp / "ocr")), ocr_max_new_tokens=6)
    try:
        with TestClient(create_app(settings)) as client:
            yield client
    finally:
        PROFILES.unregister(NAME)


def start(client: TestClient) -> str:
    body = {"profile": NAME, "images": [{"data": b64(png_bytes(Image.fromarray(picture(5))))}],
            "texts": {"question": "What is shown?"}}
    response = client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


def turn(client: TestClient, sid: str, name: str, arguments: dict) -> dict:
    response = client.post(f"/v1/sessions/{sid}/act", json={"text": act(name, arguments)})
    assert response.status_code == 200, response.text
    return response.json()


def texts(answer: dict) -> list[str]:
    return [p["text"] for m in answer["observation"] for p in m["content"] if p["type"] == "text"]


def test_ocr_answers_its_texts_in_the_rollouts_observation(client):
    sid = start(client)
    answer = turn(client, sid, "OCR", {"image": "img_1"})
    result = answer["results"][0]
    assert result["ok"] and isinstance(ast.literal_eval(result["text"]), list)
    assert any(f"OCR model outputs: {result['text']}" in text for text in texts(answer))
    missing = turn(client, sid, "ocr", {})["results"][0]  # any case of its name, as the rollout maps it
    assert missing["text"] == "Failed to call tool OCR: Expecting value: line 1 column 1 (char 0)"


def test_segmenting_answers_its_picture_or_the_question(client):
    sid = start(client)
    answer = turn(client, sid, "SegmentRegionAroundPoint", {"image": "img_1", "param": 'x="50" y="50"'})
    assert answer["results"][0]["text"] == "Segmentation completed." and answer["results"][0]["ok"]
    assert any("SegmentRegionAroundPoint model outputs: Segmentation completed." in t for t in texts(answer))
    none = turn(client, sid, "SegmentRegionAroundPoint", {"image": "img_1", "param": 'x="500" y="50"'})
    assert none["results"][0]["text"] == "No valid points extracted."
    assert "What is shown?" in texts(none)  # an empty image field: the rollout asks its question again


def test_a_model_this_server_lacks_is_a_worker_not_running(tmp_path: Path):
    (profile,) = OPENTHINKIMG
    register_profile(type(profile)(NAME + "-bare", profile.description,
                                   tools_by_name(*IMAGE_TOOLS, WorkerOcr(), WorkerSegmentRegionAroundPoint()),
                                   coords=profile.coords, call_format=profile.format, alpha=profile.alpha),
                     source="test")
    settings = Settings(data_dir=tmp_path / "data", workers=2, clip_model="", sam2_model="", ocr_model="")
    try:
        with TestClient(create_app(settings)) as client:
            body = {"profile": NAME + "-bare", "images": [{"data": b64(png_bytes(Image.fromarray(picture(5))))}]}
            sid = client.post("/v1/sessions", json=body).json()["session_id"]
            answer = turn(client, sid, "ocr", {"image": "img_1"})
            assert answer["observation"][0]["content"][-1]["text"] == (
                "OBSERVATION:\nocr model outputs: Tool OCR not found.\n"
                "Please summarize the model outputs and answer my first question.")
            result = answer["results"][0]
            assert result["ok"] is False and result["meta"]["reason"] == (
                "Error: GOT-OCR2 is not available on this server: no model configured (set TOOLSERVER_OCR_MODEL)")
            seg = turn(client, sid, "SegmentRegionAroundPoint", {"image": "img_1", "param": 'x="5" y="5"'})
            assert seg["results"][0]["text"] == "Tool SegmentRegionAroundPoint not found."
    finally:
        PROFILES.unregister(NAME + "-bare")
