"""Malformed and deeply nested JSON gets a 4xx on every endpoint that takes JSON, never a 500.

Against a live server (the real uvicorn/FastAPI stack, as a prober would meet it). The endpoints are read
from the committed OpenAPI document, so a new JSON endpoint is covered without editing this test.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.conftest import b64, gradient, png_bytes
from toolserver import jsonio

OPENAPI = Path(__file__).resolve().parents[1] / "openapi" / "openapi.json"
DEEP = 100_000


def json_endpoints() -> list[tuple[str, str]]:
    spec = json.loads(OPENAPI.read_text())
    return [(method.upper(), path) for path, ops in spec["paths"].items() for method, op in ops.items()
            if "application/json" in op.get("requestBody", {}).get("content", {})]


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def test_every_json_endpoint_is_covered():
    assert len(json_endpoints()) >= 8


@pytest.mark.parametrize("body", [nested(DEEP), '{"a":' * DEEP + "1" + "}" * DEEP, nested(jsonio.MAX_DEPTH + 1),
                                  '{"images": [' + nested(5000) + "]}", "{", "[1,]", "\xff"],
                         ids=["list-100k", "object-100k", "just-over-limit", "deep-inside", "truncated",
                              "trailing-comma", "not-utf8"])
def test_malformed_bodies_get_a_4xx_on_every_json_endpoint(live_server, body):
    with httpx.Client(base_url=live_server.url, timeout=60) as http:
        sid = http.post("/v1/sessions", json={"images": [{"data": b64(png_bytes(gradient(64, 48)))}]}).json()[
            "session_id"]
        content = body.encode("latin-1") if body == "\xff" else body.encode()
        for method, path in json_endpoints():
            url = path.replace("{session_id}", sid).replace("{name}", "zoom_in")
            response = http.request(method, url, content=content, headers={"content-type": "application/json"})
            assert 400 <= response.status_code < 500, (method, path, response.status_code, response.text[:200])
            assert "detail" in response.json()
        # The server and the session are unharmed.
        ok = http.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 500, 500]})
        assert ok.status_code == 200 and ok.json()["ok"]


def test_deep_argument_strings_and_model_output_are_model_readable_errors(live_server):
    """Inside a valid body, too-deep JSON written by the model is a tool-level error, not a protocol one."""
    with httpx.Client(base_url=live_server.url, timeout=60) as http:
        sid = http.post("/v1/sessions", json={"images": [{"data": b64(png_bytes(gradient(64, 48)))}]}).json()[
            "session_id"]
        call = {"id": "c1", "type": "function", "function": {"name": "zoom_in", "arguments": nested(DEEP)}}
        response = http.post(f"/v1/sessions/{sid}/tool_calls", json={"tool_calls": [call]})
        assert response.status_code == 200
        result = response.json()["results"][0]
        assert not result["ok"] and result["error"]["code"] == "invalid_json"
        assert "nested deeper than 64 levels" in result["text"]

        text = "<tool_call>" + nested(DEEP) + "</tool_call>"
        response = http.post(f"/v1/sessions/{sid}/act", json={"text": text, "format": "hermes"})
        assert response.status_code == 200
        assert not response.json()["results"][0]["ok"]


def test_deep_mcp_message_is_refused(live_server):
    response = httpx.post(f"{live_server.url}/mcp", content=nested(DEEP).encode(),
                          headers={"content-type": "application/json",
                                   "accept": "application/json, text/event-stream"}, timeout=60)
    assert 400 <= response.status_code < 500, response.text[:200]


def test_loads_is_json_loads_under_the_limit():
    text = '{"a": [1, 2.5, "x", null, true, 123456789012345678901234567890, {"b": [[[]]]}]}'
    assert jsonio.loads(text) == json.loads(text)
    assert jsonio.loads(nested(jsonio.MAX_DEPTH - 1)) == json.loads(nested(jsonio.MAX_DEPTH - 1))
    for too_deep in (nested(jsonio.MAX_DEPTH + 1), nested(DEEP)):
        with pytest.raises(json.JSONDecodeError, match="nested deeper"):
            jsonio.loads(too_deep)
