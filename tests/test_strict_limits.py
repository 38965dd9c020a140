"""OpenAI strict mode refuses string-length keywords (`minLength`, `maxLength`): strict schemas leave them out for
every tool of every profile, and the server keeps the limits itself, for tools that validate their arguments and
for those that read them raw (the code profiles)."""

from typing import Any

import pytest

from toolserver.profiles import PROFILES
from toolserver.tools.run_python import MAX_CODE_CHARS

NOT_STRICT = {"minLength", "maxLength"}


def keywords(node: Any) -> set[str]:
    """Every schema keyword used anywhere in `node` (property names are names, not keywords)."""
    if isinstance(node, list):
        return set().union(*(keywords(v) for v in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = set(node) - {"properties"}
    for key, value in node.items():
        if key == "properties":
            found |= set().union(*(keywords(v) for v in value.values())) if value else set()
        else:
            found |= keywords(value)
    return found


@pytest.mark.parametrize("name", list(PROFILES))
def test_strict_schemas_carry_no_string_length_keywords(name):
    for entry in PROFILES[name].openai_tools(strict=True):
        assert not keywords(entry["function"]["parameters"]) & NOT_STRICT, entry["function"]["name"]


def test_the_code_fields_lose_their_limits_in_strict_form_only(client):
    for profile in ("default", "pyvision-rl", "thyme", "deepeyes-v2", "codedance"):
        loose = client.get("/v1/tools", params={"profile": profile}).json()
        strict = client.get("/v1/tools", params={"profile": profile, "strict": True}).json()
        code = {t["function"]["name"]: t["function"]["parameters"]["properties"].get("code") for t in loose}
        assert any(c and "maxLength" in c for c in code.values()), profile
        for tool in strict:
            assert tool["function"]["strict"] is True
            assert not keywords(tool["function"]["parameters"]) & NOT_STRICT, (profile, tool["function"]["name"])


@pytest.mark.parametrize(("profile", "tool", "limit"), [("default", "run_python", MAX_CODE_CHARS),
                                                        ("pyvision-rl", "python", 100_000),
                                                        ("thyme", "python", 100_000),
                                                        ("deepeyes-v2", "python", 100_000),
                                                        ("codedance", "execute_python_code", 100_000)])
def test_the_server_keeps_the_limits(client, profile, tool, limit):
    sid = client.post("/v1/sessions", json={"profile": profile}).json()["session_id"]
    result = client.post(f"/v1/sessions/{sid}/tools/{tool}", json={"code": "x = 1\n" + "#" * limit}).json()
    assert not result["ok"] and result["error"]["code"] == "invalid_arguments", result
    assert "code" in result["text"] and str(limit) in result["text"]
