"""Every profile's `strict=true` schemas are inside OpenAI's Structured Outputs subset (`schema.strict_violations`
holds its rules): objects closed, every property required, every node typed, only the subset's keywords. Strict
forms are ours to shape; the non-strict ones stay as the papers wrote them."""

import json

import pytest

from toolserver.profiles import PROFILES
from toolserver.schema import STRICT_ONLY, strict_violations


@pytest.mark.parametrize("name", list(PROFILES))
def test_every_strict_schema_of_every_profile_is_in_the_subset(name):
    tools = PROFILES[name].openai_tools(strict=True)
    assert tools
    for entry in tools:
        assert entry["function"]["strict"] is True
        assert strict_violations(entry["function"]["parameters"]) == [], (name, entry["function"]["name"])


def test_the_served_strict_schemas_are_in_the_subset(client):
    """What `/v1/tools?strict=true` serves (installed models and plugins filled in), for every registered profile."""
    profiles = client.get("/v1/profiles").json()
    names = [p["name"] if isinstance(p, dict) else p for p in profiles]
    assert set(PROFILES) <= set(names)
    for name in names:
        for entry in client.get("/v1/tools", params={"profile": name, "strict": True}).json():
            assert strict_violations(entry["function"]["parameters"]) == [], (name, entry["function"]["name"])


def test_nemo_gym_arrays_are_typed_in_strict_form_only():
    strict = {t["function"]["name"]: t["function"]["parameters"] for t in PROFILES["nemo-gym"].openai_tools(strict=True)}
    loose = {t["function"]["name"]: t["function"]["parameters"] for t in PROFILES["nemo-gym"].openai_tools()}
    assert strict["image_zoom_in_tool"]["properties"]["bbox_2d"]["items"] == {"type": "number"}
    assert strict["image_zoom_in_tool"]["properties"]["bbox_2d"]["minItems"] == 4
    side = strict["image_side_by_side_tool"]["properties"]
    assert side["img_indices"]["items"] == {"type": "integer"}
    assert side["labels"]["anyOf"] == [{"items": {"type": "string"}, "type": "array"}, {"type": "null"}]
    # The model's (non-strict) schemas, as the reference shows them: untyped items, no added keywords.
    assert loose["image_zoom_in_tool"]["properties"]["bbox_2d"] == {
        "description": strict["image_zoom_in_tool"]["properties"]["bbox_2d"]["description"], "items": {},
        "type": "array"}
    assert loose["image_side_by_side_tool"]["properties"]["labels"]["items"] == {}
    for profile in PROFILES.values():
        for strict_form in (False, True):
            assert STRICT_ONLY not in json.dumps(profile.openai_tools(strict=strict_form)), profile.name


@pytest.mark.parametrize(("schema", "reason"), [
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, "additionalProperties"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}, "not required: a"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": {}}}, "required": ["a"],
      "additionalProperties": False}, "$.a.items: has no `type`"),
    ({"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}, "required": ["a"],
      "additionalProperties": False}, "`minLength` is not in the strict subset"),
    ({"type": "object", "properties": {"a": {"type": "array"}}, "required": ["a"], "additionalProperties": False},
     "an array without `items`"),
    ({"type": "object", "properties": {"a": {"anyOf": [{"type": "object", "properties": {}}, {"type": "null"}]}},
      "required": ["a"], "additionalProperties": False}, "$.a.anyOf[0]: an object without"),
    ({"type": "object", "properties": {"a": {"type": "string", "format": "uri"}}, "required": ["a"],
      "additionalProperties": False}, "format 'uri'"),
    ({"anyOf": [{"type": "object"}]}, "the root must be an object"),
])
def test_the_checker_names_each_rule_broken(schema, reason):
    assert any(reason in found for found in strict_violations(schema)), strict_violations(schema)
