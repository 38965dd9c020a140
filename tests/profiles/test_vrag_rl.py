"""VRAG-RL (`vrag-rl`) against what its own rollout code did (Alibaba-NLP/VRAG @ 24f8d055, recorded by
scripts/goldens/record_vrag_rl.py into tests/data/vrag_rl_golden.json): every session of vrag_sessions.py through
`/act`, turn by turn — `done`, the text its rollout appends byte for byte, each image it shows (size and pixels),
the page it last retrieved — over a library holding the sessions' corpus; then the search endpoints in VRAG's own
request and answer shapes, the turn's reading, and what the reference cannot answer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.conftest import PHOTOS
from tests.profiles.helpers import act_image
from tests.profiles.vrag_sessions import DOCUMENT, LIBRARY_SETTINGS, PAGES, make_corpus_pdf
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.formats.vrag import INVALID_ACTION, INVALID_BBOX, VragFormat, action_of, extract_tags

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "vrag_rl_golden.json").read_text())
RECORDED = {session["name"]: session for session in GOLDEN["sessions"]}
VISION = "<|vision_start|><|image_pad|><|vision_end|>"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    import nltk.stem.porter  # noqa: F401 - before the server's start-up check imports nltk in a thread beside ours

    tmp = tmp_path_factory.mktemp("vrag")
    pdf = make_corpus_pdf(tmp / f"{DOCUMENT}.pdf", PHOTOS)
    settings = Settings(data_dir=tmp / "data", allowed_roots=[tmp], sr_model_dir=tmp / "none", **LIBRARY_SETTINGS)
    with TestClient(create_app(settings)) as client:
        ingested = client.post("/v1/documents?wait=true", json={"path": str(pdf)})
        assert ingested.status_code == 200, ingested.text
        yield client


def page_of(client: TestClient, path: str) -> list:
    library = client.app.state.core.documents
    return next([DOCUMENT, page] for page in range(1, len(PAGES) + 1)
                if str(path) in {str(p) for p in library.page_candidates(DOCUMENT, page)})


def start(client: TestClient, **settings) -> str:
    response = client.post("/v1/sessions", json={"profile": "vrag-rl", **settings})
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


def act(client: TestClient, sid: str, text: str) -> dict:
    response = client.post(f"/v1/sessions/{sid}/act", json={"text": text})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("name", list(RECORDED))
def test_a_session_runs_as_the_reference_ran_it(client, name):
    sid = start(client)
    for turn in RECORDED[name]["turns"]:
        answer = act(client, sid, turn["action"])
        assert answer["done"] is turn["done"], turn["action"]
        assert answer["prompt"] == turn["appended"], turn["action"]
        for i, recorded in enumerate(turn["images"]):
            image = act_image(answer, i)
            assert [*image.size] == recorded["size"], turn["action"]
            assert hashlib.sha256(image.convert("RGB").tobytes()).hexdigest() == recorded["sha256"], turn["action"]
        if turn["images"]:
            meta = answer["results"][0]["meta"]
            assert page_of(client, meta["page_file"]) == turn["last_retrieved"]


def test_the_recorded_texts_are_the_formats():
    appended = {turn["appended"] for session in GOLDEN["sessions"] for turn in session["turns"]}
    user, assistant = "\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"
    assert appended == {"", user + VISION + assistant, user + INVALID_BBOX + assistant,
                        user + INVALID_ACTION + assistant}
    for session in GOLDEN["sessions"]:
        for turn in session["turns"]:
            assert extract_tags(turn["action"]) + "<|im_end|>" == turn["kept"]


def test_the_turn():
    fmt = VragFormat()
    assert action_of("<think>a</think><search> q </search>") == ("search", "q")
    assert fmt.parse("<answer>x</answer><search>y</search>").done is True
    parsed = fmt.parse("<bbox>[1, 2, 3, 4]</bbox>")
    assert parsed.done is False and parsed.calls[0].name == "bbox" and parsed.calls[0].arguments == {
        "bbox": "[1, 2, 3, 4]"}
    assert fmt.parse("nothing").notices == [INVALID_ACTION]


def test_image_tags_and_direct_calls(client):
    sid = start(client, image_marker="image_tag")
    assert act(client, sid, "<search>bridge</search>")["prompt"] == (
        "\n<|im_start|>user\n<image><|im_end|>\n<|im_start|>assistant\n")
    crop = client.post(f"/v1/sessions/{sid}/tools/bbox", json={"bbox": "[0, 0, 100, 100]"}).json()
    assert crop["ok"] and crop["meta"]["crop_area"][:2] == [0, 0]
    bad = client.post(f"/v1/sessions/{sid}/tools/bbox", json={"bbox": "[0, 0]"}).json()
    assert not bad["ok"] and bad["text"] == INVALID_BBOX


def test_a_search_whose_pages_were_all_shown_shows_its_best_page_again(client):
    """The reference reuses a stale image or fails here (docs/decisions.md): the best page again, nothing new kept."""
    sid = start(client)
    shown = [act(client, sid, "<search>insect</search>")["results"][0]["meta"] for _ in range(3)]
    assert [m["new"] for m in shown] == [True, True, False] and len(shown[0]["results"]) == 2  # two pages say insect
    assert shown[-1]["page_file"] == shown[0]["page_file"]
    crop = act(client, sid, "<bbox>[0, 0, 50, 50]</bbox>")["results"][0]["meta"]
    assert crop["page_file"] == shown[1]["page_file"]  # the last page retrieved, not the one shown again


def test_the_search_endpoints_answer_in_vrags_shapes(client):
    got = client.get("/vrag/search", params={"queries": ["insect", "bridge over the river"]})
    assert got.status_code == 200, got.text
    first, second = got.json()
    assert [item["idx"] for item in first] == list(range(len(first))) and len(first) <= 10
    assert [page_of(client, item["image_file"]) for item in first][:2] == [[DOCUMENT, 2], [DOCUMENT, 1]]
    assert page_of(client, second[0]["image_file"]) == [DOCUMENT, 3]
    assert len(client.get("/vrag/search", params={"queries": ["insect"], "top_k": 1}).json()[0]) == 1
    posted = client.post("/vrag/search", json={"queries": ["insect"], "top_k": 2}).json()["results"]
    assert len(posted) == 1 and posted[0]["indice"] == [0, 1] and len(posted[0]["score"]) == 2
    assert [d["type"] for d in posted[0]["data"]] == ["image", "image"]
    assert page_of(client, posted[0]["data"][0]["file_path"]) == [DOCUMENT, 2]
    assert client.post("/vrag/search", json={"queries": ["x"], "search_corpus": "nope"}).json() == {"results": []}
    only = client.post("/vrag/search", json={"queries": ["bridge"], "search_corpus": DOCUMENT}).json()["results"]
    assert page_of(client, only[0]["data"][0]["file_path"]) == [DOCUMENT, 3]
    assert client.get("/vrag/search").status_code == 422
    assert client.post("/vrag/search", json={"queries": "x"}).status_code == 422
