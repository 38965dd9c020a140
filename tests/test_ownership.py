"""With API keys, a session belongs to the key that created it: another key gets 404 for it and does not list it;
an operator key sees every session; without keys nothing changes. Both stores."""

import pytest
from fastapi.testclient import TestClient

from tests.conftest import b64, gradient, png_bytes
from toolserver.api import create_app

A, B, OPERATOR = "team-a-key", "team-b-key", "operator-key"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_sessions_belong_to_the_key_that_created_them(settings_any_store):
    settings = settings_any_store.model_copy(update={"api_keys": [A, B], "operator_keys": [OPERATOR],
                                                     "session_list": "on"})
    with TestClient(create_app(settings)) as c:
        made = c.post("/v1/sessions", headers=auth(A),
                      json={"images": [{"data": b64(png_bytes(gradient(80, 60)))}], "texts": {"t": "hi"}})
        assert made.status_code == 201
        sid = made.json()["session_id"]
        other = c.post("/v1/sessions", headers=auth(B), json={}).json()["session_id"]
        call = {"image": 0, "bbox_2d": [0, 0, 500, 500]}
        for method, path, body in (("GET", f"/v1/sessions/{sid}", None), ("GET", f"/v1/sessions/{sid}/images/0", None),
                                   ("GET", f"/v1/sessions/{sid}/trajectory", None),
                                   ("POST", f"/v1/sessions/{sid}/tools/zoom_in", call),
                                   ("POST", f"/v1/sessions/{sid}/texts", {"texts": ["x"]}),
                                   ("DELETE", f"/v1/sessions/{sid}", None)):
            r = c.request(method, path, headers=auth(B), json=body)
            assert r.status_code == 404 and r.json()["code"] == "unknown_session", (method, path, r.text)
        assert c.post(f"/v1/sessions/{sid}/tools/zoom_in", headers=auth(A), json=call).json()["ok"]
        listed = {key: [s["session_id"] for s in c.get("/v1/sessions", headers=auth(key)).json()["sessions"]]
                  for key in (A, B, OPERATOR)}
        assert listed[A] == [sid] and listed[B] == [other] and set(listed[OPERATOR]) == {sid, other}
        assert c.get(f"/v1/sessions/{sid}", headers=auth(OPERATOR)).status_code == 200
        assert c.get(f"/v1/sessions/{sid}", headers=auth("nope")).status_code == 401
        assert c.delete(f"/v1/sessions/{sid}", headers=auth(A)).status_code == 204


def test_without_keys_every_session_is_reachable(client):
    sid = client.post("/v1/sessions", json={}).json()["session_id"]
    assert client.get(f"/v1/sessions/{sid}").status_code == 200


@pytest.mark.slow
def test_over_mcp_a_session_answers_only_its_own_key(tmp_path):
    """The MCP SDK runs tool handlers outside the HTTP request's context: the adapter sets the caller itself."""
    import asyncio
    import json

    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    from tests.conftest import start_server, stop_server

    async def call(url: str, key: str):
        async with create_mcp_http_client(headers=auth(key)) as http, \
                streamable_http_client(url, http_client=http) as streams, \
                ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            return await session.call_tool("check_whether_response_word_count_in_range",
                                           {"response": "one two", "lower_bound": 1, "upper_bound": 3})

    server = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path), "TOOLSERVER_API_KEYS": json.dumps([A, B])})
    try:
        sid = httpx.post(server.url + "/v1/sessions", headers=auth(A), json={}).json()["session_id"]
        url = f"{server.url}/mcp?profile=default&session={sid}"
        own, other = asyncio.run(call(url, A)), asyncio.run(call(url, B))
    finally:
        stop_server(server)
    assert not own.is_error and own.content[-1].text == "Check result: True"
    assert other.is_error and other.content[-1].text == (f"Error: no session {sid}: the handle is unknown, was closed, "
                                                         "or belongs to another API key.")
