"""DeepEyesV2's searches from the search cache, against what its own env answered (tests/data/deepeyes_v2_golden.json,
recorded by running DeepEyesV2_ENV with its `search_utils.py`: its placeholder text search, and its FVQA cache reader
over a cache of two images). The cache here holds what those searches returned, so the texts must match byte for
byte and the images in size and mode; the thumbnails of the MMSearch-R1 cache (real photographs) then go through the
same path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import PHOTOS
from tests.profiles.helpers import act_image
from tests.profiles.mmsearch_sessions import make_cache
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.profiles.deepeyes_v2_search import MAX_IMAGES

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "deepeyes_v2_golden.json").read_text())
SESSIONS = {s["name"]: s for s in GOLDEN["sessions"]}
VISION = "<|vision_start|><|image_pad|><|vision_end|>"
PLACEHOLDER = [{"title": f"Placeholder Title {i}", "link": f"http://example.com/{i}",
                "snippet": "This is a placeholder snippet for query: cat breeds"} for i in range(5)]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("deepeyes_cache")
    make_cache(root, PHOTOS)  # fvqa_cache.json: the MMSearch-R1 goldens' cache
    Image.new("RGB", (40, 30), (220, 20, 20)).save(root / "red.png")
    Image.new("RGB", (20, 3000), (20, 200, 20)).save(root / "green.png")
    many = {"tool_returned_web_title": [f"page {i}" for i in range(12)],
            "cached_images_path": ["thumbs/ladybird.jpg"] * 12}
    (root / "golden.json").write_text(json.dumps({
        "fvqa_golden_1": {"tool_returned_web_title": ["Red square page", "Tall green strip"],
                          "cached_images_path": ["red.png", "green.png"]},
        "fvqa_many": many, "notes_7": many, "cat breeds": PLACEHOLDER}))
    return root


@pytest.fixture(scope="module")
def client(cache_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("deepeyes_search")
    settings = Settings(data_dir=tmp / "data", sr_model_dir=tmp / "none", search_cache=cache_dir)
    with TestClient(create_app(settings)) as client:
        yield client


def act_in(client: TestClient, search_key: str | None, text: str) -> dict:
    body: dict = {"profile": "deepeyes-v2", "texts": {"search_key": search_key} if search_key else {}}
    sid = client.post("/v1/sessions", json=body).json()["session_id"]
    response = client.post(f"/v1/sessions/{sid}/act", json={"text": text})
    assert response.status_code == 200, response.text
    return response.json()


def images_of(answer: dict) -> list[list[int]]:
    return [[i["width"], i["height"]] for r in answer["results"] for i in r["images"]]


@pytest.mark.parametrize(("name", "search_key"), [
    ("image_search_cached", "fvqa_golden_1"), ("search_ok_placeholder", "golden_idx_41"),
    ("search_missing_arguments", "golden_idx_42"), ("search_missing_name", "golden_idx_43"),
    ("image_search_not_fvqa", "golden_idx_44"), ("search_invalid_json", None), ("search_invalid_name", None),
    ("image_search_with_args", None)])
def test_a_search_answers_as_the_env_did(client, name, search_key):
    turn = SESSIONS[name]["turns"][0]
    answer = act_in(client, search_key, turn["action"])
    assert answer["done"] is turn["done"]
    assert answer["prompt"] == ("" if turn["done"] else turn["prompt"].replace("<image>", VISION))
    assert images_of(answer) == [size for size, _ in turn["images"]]


def test_an_index_missing_from_the_cache_is_the_env_s_search_error(client):
    answer = act_in(client, "fvqa_train_9999", '<tool_call>{"name": "image_search"}</tool_call>')
    assert answer["done"] is True and answer["prompt"] == ""
    assert answer["results"][0]["error"]["code"] == "search_error"


def test_no_index_is_the_env_s_exception_text(client):
    answer = act_in(client, None, '<tool_call>{"name": "image_search"}</tool_call>')
    assert "Error: argument of type 'NoneType' is not iterable for None<|im_end|>" in answer["prompt"]


def test_the_text_lists_every_result_and_at_most_ten_images_go(client):
    answer = act_in(client, "fvqa_many", '<tool_call>{"name": "image_search"}</tool_call>')
    assert answer["prompt"].count(VISION) == 12 and "found 12 results" in answer["prompt"]
    assert len(images_of(answer)) == MAX_IMAGES
    assert act_in(client, "notes_7", '<tool_call>{"name": "image_search"}</tool_call>')["done"] is True


def test_thumbnails_keep_their_size_and_pixels(client, cache_dir):
    answer = act_in(client, "fvqa_train_0002", '<tool_call>{"name": "image_search"}</tool_call>')
    assert images_of(answer) == [[90, 160], [150, 113]]  # the null and missing paths skipped
    shown = act_image(answer, 1)
    with Image.open(cache_dir / "thumbs/wood_grey.jpg") as stored:
        assert shown.mode == "L" and shown.tobytes() == stored.tobytes()
    assert "1. " + VISION + "\n[Altai mountains] \n\n\n2. " + VISION + "\n[Wood texture] \n" in answer["prompt"]


def test_a_cached_date_and_a_missing_snippet_render_as_the_env_renders_them(client):
    answer = act_in(client, None, '<tool_call>{"name": "search", "arguments": {"query": "ladybird habitat"}}'
                                  "</tool_call>")
    assert ("2. [Coccinellidae](https://example.org/coccinellidae)\nDate published: 2024-05-01\n\nA family of small "
            "beetles; most species prey on aphids.\n</tool_response>") in answer["prompt"]
