"""The OpenEnv door (`/openenv/{profile}`) in-process: its protocol's edges (capacity, episodes ending with their
connection, a failed reset, keys on the handshake), the one-shot HTTP routes and the MCP endpoint's two dialects.
`tests_frameworks/test_openenv.py` drives it with openenv-core's own clients against a live server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client as McpClient
from starlette.websockets import WebSocketDisconnect

from tests.conftest import b64, gradient, png_bytes
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.profiles import PROFILES

PICTURE = "data:image/png;base64," + b64(png_bytes(gradient(400, 300)))
ZOOM = '<tool_call>{"name": "zoom_in", "arguments": {"image": 0, "bbox_2d": [0, 0, 500, 500]}}</tool_call>'


@pytest.fixture
def app(settings: Settings):
    settings.openenv_max_episodes = 2
    with TestClient(create_app(settings)) as client:
        yield client


def send(ws, kind: str, data: Any = None) -> dict[str, Any]:
    ws.send_text(json.dumps({"type": kind} if data is None else {"type": kind, "data": data}))
    return ws.receive_json()


def test_every_profile_is_an_environment(app):
    for name in PROFILES:
        schema = app.get(f"/openenv/{name}/schema").json()
        listed = schema["action"]["properties"]["tool_name"]["anyOf"][0]["enum"]
        assert listed == [*PROFILES[name].tools, *PROFILES[name].aliases]
        assert app.get(f"/openenv/{name}/metadata").json()["name"] == name


def test_an_episode_is_its_connections_session(app):
    with app.websocket_connect("/openenv/default/ws") as ws:
        reset = send(ws, "reset", {"images": [PICTURE]})
        sid = reset["data"]["observation"]["metadata"]["session_id"]
        assert app.get(f"/v1/sessions/{sid}").status_code == 200
        failed = send(ws, "reset", {"images": ["data:image/png;base64,AAAA"]})
        assert failed["data"]["code"] == "VALIDATION_ERROR"
        step = send(ws, "step", {"text": ZOOM})  # the failed reset left the episode as it was
        assert step["data"]["observation"]["metadata"]["session_id"] == sid
        again = send(ws, "reset", {"images": [PICTURE]})
        assert app.get(f"/v1/sessions/{sid}").status_code == 404  # the next reset released the previous episode
        sid = again["data"]["observation"]["metadata"]["session_id"]
    assert app.get(f"/v1/sessions/{sid}").status_code == 404  # so did the connection's end
    assert app.app.state.core.episodes.active == 0


def test_capacity_is_reached_and_comes_back(app):
    with app.websocket_connect("/openenv/default/ws") as one, app.websocket_connect("/openenv/default/ws") as two:
        send(one, "reset", {"images": [PICTURE]})
        send(two, "reset", {"images": [PICTURE]})
        with app.websocket_connect("/openenv/default/ws") as three:
            refused = three.receive_json()
            assert refused["data"]["code"] == "CAPACITY_REACHED" and refused["data"]["max_sessions"] == 2
            three.send_text('{"type": "reset"}')  # the refused client's first message, then the server closes
            with pytest.raises(WebSocketDisconnect):
                three.receive_json()
        assert app.post("/openenv/default/reset", json={}).status_code == 503  # the one-shot routes count too
        one.send_text('{"type": "close"}')
        with pytest.raises(WebSocketDisconnect):
            one.receive_json()
    with app.websocket_connect("/openenv/default/ws") as four:
        assert send(four, "reset", {})["type"] == "observation"


def test_an_unknown_profile_is_a_factory_error(app):
    with app.websocket_connect("/openenv/nope/ws") as ws:
        refused = ws.receive_json()
        assert refused["data"]["code"] == "FACTORY_ERROR" and refused["data"]["factory_name"] == "nope"
    assert app.get("/openenv/nope/health").status_code == 404


def test_a_structured_call_is_a_turn_of_the_profile(app):
    with app.websocket_connect("/openenv/deepeyes/ws") as ws:
        send(ws, "reset", {"images": [PICTURE], "settings": {"max_tool_calls": 1}})
        zoom = send(ws, "step", {"tool_name": "image_zoom_in_tool", "arguments": {"bbox_2d": [0, 0, 100, 100]}})
        observation = zoom["data"]["observation"]
        assert observation["prompt"].startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\n"
                                                "<|vision_start|><|image_pad|><|vision_end|>")
        assert observation["metadata"]["results"][0]["images"][0]["data"] is None  # the image is in `messages`
        assert [p["type"] for p in observation["messages"][0]["content"]] == ["text", "image_url", "text"]
        over = send(ws, "step", {"tool_name": "image_rotate_tool", "arguments": '{"angle": 90}'})
        assert over["data"]["observation"]["metadata"]["results"][0]["error"]["code"] == "call_limit"
        state = send(ws, "state")
        assert state["type"] == "state" and state["data"]["tool_calls"] == 1 and state["data"]["step_count"] == 2


def test_a_reset_names_its_profile(app):
    with app.websocket_connect("/openenv/default/ws") as ws:
        answer = send(ws, "reset", {"settings": {"profile": "deepeyes"}})
        assert answer["data"]["toolserver_code"] == "profile_mismatch"


def test_keys_guard_the_handshake(settings: Settings):
    settings.api_keys = ["k1", "k2"]
    with TestClient(create_app(settings)) as app:
        with pytest.raises(WebSocketDisconnect) as refused, app.websocket_connect("/openenv/default/ws"):
            pass
        assert refused.value.code == 1008
        with app.websocket_connect("/openenv/default/ws", headers={"Authorization": "Bearer k1"}) as ws:
            sid = send(ws, "reset", {"images": [PICTURE]})["data"]["observation"]["metadata"]["session_id"]
            other = app.get(f"/v1/sessions/{sid}", headers={"Authorization": "Bearer k2"})
            mine = app.get(f"/v1/sessions/{sid}", headers={"Authorization": "Bearer k1"})
            assert other.status_code == 404 and mine.status_code == 200


def rpc(app, method: str, params: dict | None = None, profile: str = "default") -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, **({"params": params} if params is not None else {})}
    return app.post(f"/openenv/{profile}/mcp", json=body).json()


def test_openenv_json_rpc_sessions(app):
    created = rpc(app, "openenv/session/create", {"images": [PICTURE]})
    sid = created["result"]["session_id"]
    zoom = rpc(app, "tools/call", {"name": "zoom_in", "arguments": {"image": 0, "bbox_2d": [0, 0, 500, 500]},
                                   "session_id": sid})
    assert [block["type"] for block in zoom["result"]["content"]] == ["image", "text"]
    assert rpc(app, "tools/call", {"name": "zoom_in", "session_id": "other"})["error"]["message"] == \
        "Unknown session_id: other"
    assert rpc(app, "tools/call", {"name": "nope"})["error"] == {"code": -32602, "message": "Tool not found: nope"}
    assert rpc(app, "resources/list")["error"]["code"] == -32601
    assert rpc(app, "tools/list", profile="nope")["error"]["code"] == -32602
    assert app.post("/openenv/default/mcp", content=b"{bad").json()["error"]["code"] == -32700
    assert rpc(app, "openenv/session/create")["result"]["session_id"]
    full = rpc(app, "openenv/session/create")
    assert full["error"]["code"] == -32000 and full["error"]["data"] == {"active_sessions": 2, "max_sessions": 2}
    assert rpc(app, "openenv/session/close", {"session_id": sid})["result"] == {"session_id": sid, "closed": True}
    assert app.get(f"/v1/sessions/{sid}").status_code == 404
    assert rpc(app, "openenv/session/close", {"session_id": sid})["error"]["code"] == -32602


def test_mcp_clients_reach_the_mcp_endpoint(live_server):
    async def main():
        async with McpClient(f"{live_server.url}/openenv/deepeyes/mcp") as mcp:
            names = [tool.name for tool in (await mcp.list_tools()).tools]
            await mcp.call_tool("load_image", {"data": PICTURE})
            zoom = await mcp.call_tool("image_zoom_in_tool", {"bbox_2d": [0, 0, 100, 100]})
            return names, zoom

    names, zoom = asyncio.run(asyncio.wait_for(main(), 60))
    assert names == ["load_image", "image_zoom_in_tool", "image_rotate_tool"]
    assert not zoom.is_error and zoom.content[0].type == "image"


def test_the_websocket_messages_are_on_the_docs_page(app):
    document = app.get("/openapi.json").json()
    openenv = next(tag for tag in document["tags"] if tag["name"] == "openenv")
    assert "WS /openenv/{profile}/ws" in openenv["description"]
    assert "| `CAPACITY_REACHED` |" in openenv["description"]
    for message in ("ResetMessage", "StepMessage", "StateMessage", "CloseMessage", "ObservationReply", "StateReply",
                    "ErrorReply", "EpisodeAction", "EpisodeObservation"):
        assert message in document["components"]["schemas"], message


def test_an_idle_connection_ends_its_episode(settings: Settings):
    settings.default_ttl_s = 0.5
    with TestClient(create_app(settings)) as app, app.websocket_connect("/openenv/default/ws") as ws:
        sid = send(ws, "reset", {})["data"]["observation"]["metadata"]["session_id"]
        ended = ws.receive_json()  # nothing sent for longer than a session may idle
        assert ended["data"]["code"] == "SESSION_ERROR" and ended["data"]["message"].startswith("Idle for 0.5 s")
        with pytest.raises(WebSocketDisconnect):
            ws.receive_json()
        assert app.get(f"/v1/sessions/{sid}").status_code in (404, 410)
        assert app.app.state.core.episodes.active == 0
