"""MMSearch-R1 (`mmsearch-r1`) against what its own rollout code did (EvolvingLMMs-Lab/multimodal-search-r1 @
583c6b49, recorded by scripts/goldens/record_mmsearch_r1.py into tests/data/mmsearch_r1_golden.json): every session
of mmsearch_sessions.py through `/act`, turn by turn — `done`, the text its rollout appends byte for byte, each
thumbnail (size, mode and pixels) — replayed from an FVQA-format cache of real photographs; then the cache's checks
and what the reference cannot answer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.conftest import PHOTOS
from tests.profiles.helpers import act_image
from tests.profiles.mmsearch_sessions import PROMPT, QUESTION, make_cache
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.formats.mmsearch_r1 import MMSEARCH_R1, search_of
from toolserver.profiles.mmsearch_r1 import original_question
from toolserver.searchcache import SearchCacheError, SearchCacheHolder, load_search_cache

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "mmsearch_r1_golden.json").read_text())
RECORDED = {session["name"]: session for session in GOLDEN["sessions"]}


@pytest.fixture(scope="module")
def cache_file(tmp_path_factory) -> Path:
    return make_cache(tmp_path_factory.mktemp("fvqa") / "cache", PHOTOS)


@pytest.fixture(scope="module")
def client(cache_file, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mmsearch")
    settings = Settings(data_dir=tmp / "data", sr_model_dir=tmp / "none", search_cache=cache_file)
    with TestClient(create_app(settings)) as client:
        yield client


def start(client: TestClient, **texts: str) -> str:
    response = client.post("/v1/sessions", json={"profile": "mmsearch-r1", "texts": texts})
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


def act(client: TestClient, sid: str, text: str) -> dict:
    response = client.post(f"/v1/sessions/{sid}/act", json={"text": text})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("name", list(RECORDED))
def test_a_session_runs_as_the_reference_ran_it(client, name):
    recorded = RECORDED[name]
    sid = start(client, prompt=PROMPT, search_key=recorded["search_key"])
    for turn in recorded["turns"]:
        answer = act(client, sid, turn["action"])
        assert answer["done"] is turn["done"], turn["action"]
        assert answer["prompt"] == turn["appended"], turn["action"]
        for i, expected in enumerate(turn["images"]):
            image = act_image(answer, i)
            assert [*image.size] == expected["size"], turn["action"]
            assert hashlib.sha256(image.convert("RGB").tobytes()).hexdigest() == expected["sha256"], turn["action"]
        images = [part for message in answer["observation"] if isinstance(message["content"], list)
                  for part in message["content"] if part["type"] == "image_url"]
        assert len(images) == len(turn["images"])


def test_the_golden_covers_every_kind_of_turn():
    appended = [t["appended"] for s in GOLDEN["sessions"] for t in s["turns"]]
    assert any("[Image Search Results] There is an error" in a for a in appended)  # an image-search miss
    assert any("[Text Search Results] There is an error" in a for a in appended)  # a text-search miss
    assert any(f"Original user's question: {QUESTION}\n" in a for a in appended)
    modes = {i["mode"] for s in GOLDEN["sessions"] for t in s["turns"] for i in t["images"]}
    assert modes == {"RGB", "P", "L"}  # thumbnails go as the cache stores them


def test_the_turn_is_read_as_the_rollout_reads_it():
    assert search_of("why <search><img></search>\n<|im_end|>") == ("image", None)
    assert search_of("<text_search>a</text_search><text_search> b </text_search><|im_end|>") == ("text", " b ")
    assert search_of("<text_search></text_search>") == ("text", None)
    assert search_of("<text_search>a\nb</text_search>") is None  # neither pattern crosses a line
    assert search_of("<search><img></search> and more") is None
    assert MMSEARCH_R1.parse("<answer>x</answer>").done is True
    parsed = MMSEARCH_R1.parse("<text_search>q</text_search>")
    assert parsed.done is False and parsed.calls[0].arguments == {"query": "q"}


def test_the_question_is_cut_as_the_rollout_cuts_it():
    assert original_question(PROMPT) == QUESTION
    assert original_question("no marker: the whole text\nassistant\nreply") == "no marker: the whole text"


def test_a_session_without_its_texts_gets_a_plain_error(client):
    sid = start(client, prompt=PROMPT)
    answer = act(client, sid, "<search><img></search>")
    assert answer["results"][0]["error"]["code"] == "no_search_key"
    sid = start(client, search_key="fvqa_train_0001")
    answer = act(client, sid, "<text_search>q</text_search>")
    assert answer["results"][0]["error"]["code"] == "no_prompt"


def test_a_server_without_a_cache_says_so(tmp_path):
    settings = Settings(data_dir=tmp_path / "data", sr_model_dir=tmp_path / "none")
    with TestClient(create_app(settings)) as client:
        sid = start(client, prompt=PROMPT, search_key="fvqa_train_0001")
        answer = act(client, sid, "<search><img></search>")
    error = answer["results"][0]["error"]
    assert error["code"] == "search_cache_invalid" and "SEARCH_CACHE" in error["message"]


def test_a_directory_of_caches_merges_in_name_order(cache_file, tmp_path):
    (tmp_path / "a.json").write_text(cache_file.read_text())
    override = {"fvqa_train_0001": {"tool_returned_web_title": ["only"], "cached_images_path": [
        str(cache_file.parent / "thumbs/altai.jpg")]}}
    (tmp_path / "b.json").write_text(json.dumps(override))
    cache = load_search_cache(tmp_path)
    assert cache.image_results("fvqa_train_0001") == [("only", cache_file.parent / "thumbs/altai.jpg")]
    assert cache.text_results(" ladybird habitat ") == cache.text_results("ladybird habitat")
    assert cache.image_results("absent") is None and cache.text_results("absent") is None


@pytest.mark.parametrize(("content", "message"), [
    ("[]", "the top level must be an object"),
    ("{", "not readable as JSON"),
    ('{"k": {"tool_returned_web_title": ["a"], "cached_images_path": []}}', "1 titles but 0 image paths"),
    ('{"k": {"tool_returned_web_title": "a", "cached_images_path": []}}', "must both be lists"),
    ('{"k": {"tool_returned_web_title": [1], "cached_images_path": ["x"]}}', "title 0 is int"),
    ('{"k": {"tool_returned_web_title": ["a"], "cached_images_path": [3]}}', "image path 0 is int"),
    ('{"q": [{"title": "t"}]}', "needs a 'title' and a 'link'"),
    ('{"q": [{"title": "t", "link": "l", "snippet": 2}]}', "'snippet' is not a string"),
    ('{"q": "text"}', "neither an image-search entry"),
])
def test_a_malformed_cache_is_refused_naming_the_entry(tmp_path, content, message):
    path = tmp_path / "cache.json"
    path.write_text(content)
    with pytest.raises(SearchCacheError, match=message):
        load_search_cache(path)


def test_a_missing_cache_and_an_empty_directory_are_refused(tmp_path):
    with pytest.raises(SearchCacheError, match="no such file or directory"):
        load_search_cache(tmp_path / "absent.json")
    with pytest.raises(SearchCacheError, match="holds no"):
        load_search_cache(tmp_path)


def test_the_cache_is_read_again_when_its_file_changes(cache_file, tmp_path):
    path = tmp_path / "cache.json"
    path.write_text(json.dumps({"q": [{"title": "t", "link": "l"}]}))
    holder = SearchCacheHolder(path)
    assert holder.get().text_results("q") is not None and holder.get() is holder.get()
    path.write_text(json.dumps({"r": [{"title": "t", "link": "l"}]}))
    import os
    os.utime(path, ns=(1, 1))
    assert holder.get().text_results("q") is None and holder.get().text_results("r") is not None


def test_a_session_picks_one_cache_of_the_directory_by_name(cache_file, tmp_path):
    caches = tmp_path / "caches"
    caches.mkdir()
    (caches / "fvqa.json").write_text(cache_file.read_text().replace('"thumbs/', f'"{cache_file.parent}/thumbs/'))
    (caches / "other.json").write_text(json.dumps({"ladybird habitat": [{"title": "t", "link": "https://x"}]}))
    holder = SearchCacheHolder(caches)
    assert holder.get("other").image_results("fvqa_train_0001") is None
    assert len(holder.get("fvqa").image_results("fvqa_train_0001") or []) == 4
    assert holder.get().text_results("ladybird habitat") == holder.get("other").text_results("ladybird habitat")
    for name, message in (("../fvqa", "letters, digits"), (".hidden", "letters, digits"), ("absent", "holds no")):
        with pytest.raises(SearchCacheError, match=message):
            holder.get(name)
    with pytest.raises(SearchCacheError, match="one file, not a directory"):
        SearchCacheHolder(cache_file).get("fvqa")
    settings = Settings(data_dir=tmp_path / "data", sr_model_dir=tmp_path / "none", search_cache=caches)
    with TestClient(create_app(settings)) as client:
        sid = start(client, prompt=PROMPT, search_key="fvqa_train_0001", search_cache="other")
        assert "There is an error encountered" in act(client, sid, "<search><img></search>")["prompt"]
        sid = start(client, prompt=PROMPT, search_key="fvqa_train_0001", search_cache="fvqa")
        assert act(client, sid, "<search><img></search>")["prompt"].count("<|image_pad|>") == 4
        sid = start(client, prompt=PROMPT, search_key="fvqa_train_0001", search_cache="../etc")
        error = act(client, sid, "<search><img></search>")["results"][0]["error"]
        assert error["code"] == "search_cache_invalid" and "'../etc'" in error["message"]
