"""Validators as session tools (default and ARM-Thinker profiles) and the batch endpoint /v1/validate."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.conftest import PHOTOS
from tests.profiles.helpers import call
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.validation.specs import SPECS

WORDS = "check_whether_response_word_count_in_range"
ESSAY = "First paragraph here. It has two sentences.\n\nSecond one."


@pytest.fixture
def settings(settings_any_store: Settings) -> Settings:
    return settings_any_store  # every test here runs with the in-memory and with the Redis session store


def session(client, profile="default", texts=None):
    r = client.post("/v1/sessions", json={"profile": profile, "texts": texts if texts is not None else [ESSAY]})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def test_listing_matches_arm_thinker_names_and_parameters(client):
    tools = {t["function"]["name"]: t["function"] for t in client.get("/v1/tools?profile=arm-thinker").json()}
    assert set(SPECS) <= set(tools) and len(SPECS) == 19
    para = tools["check_whether_response_paragraph_number_in_range"]
    assert para["description"] == ("Checks if the total number of paragraphs in the response is within a specified "
                                   "range [lower_bound, upper_bound].")
    assert para["parameters"] == {
        "type": "object",
        "properties": {
            "response": {"type": "string",
                         "description": "Text name to be checked (e.g., 'text_0', 'text_1', 'text_2', etc.)"},
            "lower_bound": {"type": "integer", "description": "The minimum allowed number of paragraphs."},
            "upper_bound": {"type": "integer", "description": "The maximum allowed number of paragraphs."},
        },
        "required": ["response", "lower_bound", "upper_bound"],
    }
    assert tools["check_whether_has_no_arabic_number_in_response"]["parameters"]["required"] == ["response"]
    keywords = tools["check_whether_each_keyword_in_list_mentioned_in_range"]["parameters"]
    assert list(keywords["properties"]) == ["response", "keywords", "lower_bound_times", "upper_bound_times"]
    assert keywords["properties"]["keywords"] == {"type": "array", "items": {"type": "string"},
                                                  "description": "A list of keywords to count."}
    strict = client.get("/v1/tools?profile=arm-thinker&strict=true").json()
    assert all(t["function"]["strict"] for t in strict)


def test_check_a_stored_text_by_key(client):
    sid = session(client)
    r = call(client, sid, "check_whether_response_paragraph_number_in_range",
             {"response": "text_0", "lower_bound": 2, "upper_bound": 2})
    assert r["ok"] and r["text"] == "Check result: True" and r["meta"] == {"result": True, "text": "text_0"}
    r = call(client, sid, "check_whether_response_sentence_number_in_range",
             {"response": "text_0", "lower_bound": 4, "upper_bound": 10})
    assert r["ok"] and r["text"] == "Check result: False"
    r = call(client, sid, "check_whether_has_no_arabic_number_in_response", {"response": "text_0"})
    assert r["text"] == "Check result: True"


def test_inline_text_and_unknown_keys(client):
    sid = session(client)
    r = call(client, sid, WORDS, {"response": "three words here", "lower_bound": 3, "upper_bound": 3})
    assert r["ok"] and r["text"] == "Check result: True" and r["meta"]["text"] == "inline"
    r = call(client, sid, WORDS, {"response": "text_7", "lower_bound": 1, "upper_bound": 3})
    assert r["ok"] is False and r["error"]["code"] == "unknown_text"
    assert r["text"] == ("Error: Cannot resolve text response key 'text_7'. Current text responses you have are: "
                         "['text_0']. ")
    arm = session(client, "arm-thinker")
    r = call(client, arm, WORDS, {"response": "text_1", "lower_bound": 1, "upper_bound": 3})
    assert r["text"] == ("Error when executing tool: Cannot resolve text response key 'text_1'. Current text "
                         "responses you have are: ['text_0']. ")
    empty = session(client, texts=[])
    r = call(client, empty, WORDS, {"response": "text_0", "lower_bound": 1, "upper_bound": 3})
    assert r["text"].endswith("Current text responses you have are: []. ")


def test_values_are_checked_in_default_but_not_in_arm_thinker(client):
    sid = session(client)
    r = call(client, sid, WORDS, {"response": "text_0", "lower_bound": 5, "upper_bound": 3})
    assert r["ok"] is False and r["error"]["code"] == "invalid_arguments"
    assert "lower_bound (5) must not be above upper_bound (3)" in r["text"]
    r = call(client, sid, "check_number_precision_in_response", {"response": "text_0", "precision": -1})
    assert "precision must not be negative" in r["text"]
    # ARM-Thinker does not check values: an empty range is simply never met.
    arm = session(client, "arm-thinker")
    r = call(client, arm, WORDS, {"response": "text_0", "lower_bound": 5, "upper_bound": 3})
    assert r["ok"] and r["text"] == "Check result: False"
    r = call(client, arm, "check_whether_each_paragraph_sentence_number_in_range_list",
             {"response": "text_0", "ranges": [[2, 2, 9], [1, 1]]})
    assert r["ok"] is False and r["text"].startswith("Error when executing tool: too many values to unpack")
    r = call(client, arm, WORDS, {"response": "text_0", "lower_bound": "1", "upper_bound": 100})  # lax ints
    assert r["text"] == "Check result: True"
    r = call(client, arm, WORDS, {"response": "text_0", "lower_bound": "many", "upper_bound": 100})
    assert r["error"]["code"] == "invalid_arguments"


def test_tool_calls_round_trip(client):
    sid = session(client, "arm-thinker")
    body = {"tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "check_whether_whole_response_end_with_certain_substring",
        "arguments": '{"response": "text_0", "substring": "second one"}'}}]}
    messages = client.post(f"/v1/sessions/{sid}/tool_calls", json=body).json()["messages"]
    assert messages == [{"role": "tool", "tool_call_id": "c1", "content": "Check result: True"}]


# ------------------------------------------------------------------------------------- /v1/validate
def test_batch_validate_in_order_with_per_item_errors(client):
    items = [
        {"tool": WORDS, "params": {"lower_bound": 1, "upper_bound": 3}, "text": "a b c"},
        {"tool": WORDS, "params": {"lower_bound": 5, "upper_bound": 3}, "text": "a"},
        {"tool": "check_number_precision_in_response", "params": {"precision": -2}, "text": "1.5"},
        {"tool": "check_whether_whole_response_not_contain_certain_substrings", "params": {"substrings": "x"},
         "text": "a"},
        {"tool": "check_whether_no_such_thing", "params": {}, "text": "a"},
        {"tool": WORDS, "params": {"lower_bound": 0, "upper_bound": 0}, "text": ""},
        {"tool": WORDS, "params": {"lower_bound": 0}, "text": "a"},
        {"tool": WORDS, "params": [1, 3], "text": "a"},
        {"tool": WORDS, "params": {"lower_bound": 0, "upper_bound": 3}, "text": 42},
        {"tool": "check_whether_each_paragraph_sentence_number_in_range_list",
         "params": {"ranges": [[1, 2], [3]]}, "text": "a"},
        {"tool": "check_whether_has_no_arabic_number_in_response", "text": "I have 2."},
    ]
    r = client.post("/v1/validate", json={"items": items})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == len(items)
    assert results[0] == {"ok": True, "result": True, "text": "Check result: True", "error": None}
    codes = [x["error"]["code"] if not x["ok"] else x["result"] for x in results]
    assert codes == [True, "invalid_params", "invalid_params", "invalid_params", "unknown_validator", True,
                     "invalid_params", "invalid_params", "invalid_text", "invalid_params", False]
    assert results[1]["error"]["message"] == "params: lower_bound (5) must not be above upper_bound (3)"
    assert results[3]["error"]["message"] == "substrings: Input should be a valid list"
    assert results[6]["error"]["message"] == "upper_bound: Field required"
    assert "ranges[1] must be a [lower_bound, upper_bound] pair" in results[9]["error"]["message"]


def test_batch_limits(tmp_path):
    settings = Settings(data_dir=tmp_path, allowed_roots=[PHOTOS], max_validate_items=3, max_text_chars=10)
    with TestClient(create_app(settings)) as c:
        item = {"tool": WORDS, "params": {"lower_bound": 0, "upper_bound": 9}, "text": "a"}
        assert c.post("/v1/validate", json={"items": [item] * 4}).status_code == 413
        r = c.post("/v1/validate", json={"items": [item, {**item, "text": "x" * 11}]}).json()["results"]
        assert r[0]["ok"] and r[1]["error"]["code"] == "text_too_long"
        assert c.post("/v1/validate", json={"item": []}).status_code == 422
        assert c.post("/v1/validate", json={"items": []}).json() == {"results": []}
