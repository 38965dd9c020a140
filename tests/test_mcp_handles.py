"""MCP sessions as handles (`toolserver.integrations.mcp_handles`): the MCP SDK's own client, pinned to the session-less
2026-07-28 revision and in `auto` mode, against a real server; a new client per call, as the per-call clients
(langchain-mcp-adapters, llama-index) connect."""

import asyncio
import base64
import contextlib
import io
import json
import time

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from PIL import Image

from tests.conftest import gradient, png_bytes, start_server, stop_server
from toolserver.integrations.mcp_handles import HEADER_TOKEN, SESSION_ARG, SESSION_HEADER
from toolserver.profiles import PROFILES

MODERN = "2026-07-28"
PICTURE = gradient(400, 300)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


class Recorder(httpx2.Auth):
    """Keeps the headers of every request the client sends."""

    def __init__(self):
        self.sent: list[dict[str, str]] = []

    def auth_flow(self, request):
        self.sent.append(dict(request.headers))
        yield request


async def call(url: str, name: str, arguments: dict, *, mode: str = MODERN, headers: dict | None = None,
               recorder: Recorder | None = None):
    """One tool call over a connection of its own."""
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(create_mcp_http_client(headers=headers or {}, auth=recorder))
        mcp = await stack.enter_async_context(Client(streamable_http_client(url, http_client=http), mode=mode))
        return await mcp.call_tool(name, arguments)


async def tools(url: str, mode: str = MODERN) -> dict:
    async with Client(url, mode=mode) as mcp:
        return {tool.name: tool for tool in (await mcp.list_tools()).tools}


def image_of(result) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(result.content[0].data))).convert("RGB")


def loaded_data() -> dict:
    return {"data": base64.b64encode(png_bytes(PICTURE)).decode()}


def test_a_pinned_client_keeps_a_zoom_trajectory_in_its_handle(live_server):
    """No initialize, no Mcp-Session-Id: the first load_image opens a session and answers its handle; each later
    call carries it, over a new connection each time."""
    url = f"{live_server.url}/mcp?profile=default"
    loaded = run(call(url, "load_image", loaded_data()))
    assert not loaded.is_error, loaded.content
    handle = loaded.structured_content[SESSION_ARG]
    assert f'"session": "{handle}"' in loaded.content[0].text and len(handle) == 32
    recorder = Recorder()
    first = run(call(url, "zoom_in", {"image": "original_image", "bbox_2d": [0, 0, 500, 500], SESSION_ARG: handle},
                     recorder=recorder))
    mirrored = [sent.get(SESSION_HEADER.lower()) for sent in recorder.sent if sent.get("mcp-method") == "tools/call"]
    # The SDK's x-mcp-header mirroring (a balancer may route on it): a client that has not listed the tools yet is
    # refused for the header it left out, lists them, and sends the call again with it.
    assert mirrored[-1] == handle
    second = run(call(url, "zoom_in", {"image": "observation_1", "bbox_2d": [0, 0, 500, 500], SESSION_ARG: handle}))
    assert not first.is_error and not second.is_error, (first.content, second.content)
    assert image_of(first).tobytes() == PICTURE.convert("RGB").crop((0, 0, 200, 150)).tobytes()
    assert image_of(second).tobytes() == PICTURE.convert("RGB").crop((0, 0, 100, 75)).tobytes()
    assert "`observation_2`" in second.content[-1].text
    info = httpx.get(f"{live_server.url}/v1/sessions/{handle}").json()  # the handle is the session's id
    assert [image["key"] for image in info["images"]] == ["original_image", "observation_1", "observation_2"]

    forgotten = run(call(url, "zoom_in", {"image": "original_image", "bbox_2d": [0, 0, 500, 500]}))
    assert forgotten.is_error and "named no session" in forgotten.content[-1].text


def test_pinned_and_auto_clients_share_a_handle_opened_with_open_session(live_server):
    url = f"{live_server.url}/mcp?profile=default&handles=on"
    opened = run(call(url, "open_session", {}, mode="auto"))
    handle = opened.structured_content[SESSION_ARG]
    assert not opened.is_error and f"`{handle}`" in opened.content[0].text
    steps = [("load_image", {**loaded_data(), "key": "photo"}, "auto"),
             ("zoom_in", {"image": "photo", "bbox_2d": [0, 0, 500, 500]}, MODERN),
             ("zoom_in", {"image": "observation_1", "bbox_2d": [0, 0, 500, 500]}, "auto")]
    results = [run(call(url, name, {**arguments, SESSION_ARG: handle}, mode=mode)) for name, arguments, mode in steps]
    assert not any(result.is_error for result in results), [result.content for result in results]
    assert image_of(results[2]).tobytes() == PICTURE.convert("RGB").crop((0, 0, 100, 75)).tobytes()
    # Where handles are shown, a handshake connection's own session keeps nothing: load_image opens a handle.
    fresh = run(call(url, "load_image", loaded_data(), mode="auto")).structured_content[SESSION_ARG]
    assert fresh != handle and len(fresh) == 32
    closed = run(call(url, "close_session", {SESSION_ARG: handle}))
    after = run(call(url, "zoom_in", {"image": "photo", "bbox_2d": [0, 0, 500, 500], SESSION_ARG: handle}))
    assert not closed.is_error and after.is_error
    assert after.content[0].text == (f"Error: no session {handle}: the handle is unknown, was closed, or belongs to "
                                     "another API key. Open a new one with open_session.")


def test_the_handshake_tool_lists_are_unchanged_and_the_modern_ones_carry_the_handle(live_server):
    for profile in ("default", "nemo-gym", "deepeyes"):
        base = f"{live_server.url}/mcp?profile={profile}"
        handshake, off = run(tools(base, "auto")), run(tools(base + "&handles=off", MODERN))
        modern, on = run(tools(base, MODERN)), run(tools(base + "&handles=on", "auto"))
        assert [t.model_dump() for t in handshake.values()] == [t.model_dump() for t in off.values()]
        assert {"open_session", "close_session"}.isdisjoint(handshake)
        assert list(modern) == list(on) == ["load_image", "open_session", "close_session", *list(handshake)[1:]]
        assert SESSION_ARG not in modern["open_session"].input_schema["properties"]
        for name, tool in modern.items():
            if name == "open_session":
                continue
            properties = tool.input_schema["properties"]
            assert properties[SESSION_ARG]["x-mcp-header"] == HEADER_TOKEN, (profile, name)
            if name in handshake and name != "load_image":  # a profile tool: its own texts, as the handshake shows
                assert tool.description == handshake[name].description
                assert {k: v for k, v in properties.items() if k != SESSION_ARG} == \
                    handshake[name].input_schema["properties"]
                assert list(properties)[-1] == SESSION_ARG
    reserved = [(p.name, t) for p in PROFILES.values() for t in p.tools
                if SESSION_ARG in p.tools[t].validation_schema().get("properties", {})]
    assert reserved == []  # no tool of any profile has an argument of that name


def test_a_handle_in_the_header_serves_a_client_that_cannot_add_arguments(live_server):
    """A per-call handshake client that sends `Mcp-Param-Toolserver-Session` on every request, schemas unchanged."""
    url = f"{live_server.url}/mcp?profile=default"
    handle = run(call(url, "open_session", {})).structured_content[SESSION_ARG]
    header = {SESSION_HEADER: handle}
    run(call(url, "load_image", loaded_data(), mode="auto", headers=header))
    zoom = run(call(url, "zoom_in", {"image": "original_image", "bbox_2d": [0, 0, 500, 500]}, mode="auto",
                    headers=header))
    assert not zoom.is_error and image_of(zoom).size == (200, 150)
    other = "x" * 32
    clash = run(call(url, "zoom_in", {"image": 0, "bbox_2d": [0, 0, 9, 9], SESSION_ARG: other}, mode="auto",
                     headers=header))
    assert clash.is_error and "name different sessions" in clash.content[0].text


def test_handles_are_owned_by_their_key_and_refused_once_expired(tmp_path):
    keys = ["key-a-0123456789", "key-b-0123456789"]
    server = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path), "TOOLSERVER_API_KEYS": json.dumps(keys),
                           "TOOLSERVER_MCP_IDLE_TIMEOUT_S": "4"}, timeout=120)
    url = f"{server.url}/mcp?profile=default"
    a, b = ({"Authorization": f"Bearer {key}"} for key in keys)
    try:
        handle = run(call(url, "load_image", loaded_data(), headers=a)).structured_content[SESSION_ARG]
        own = run(call(url, "zoom_in", {"image": 0, "bbox_2d": [0, 0, 500, 500], SESSION_ARG: handle}, headers=a))
        foreign = run(call(url, "zoom_in", {"image": 0, "bbox_2d": [0, 0, 500, 500], SESSION_ARG: handle},
                           headers=b))
        malformed = run(call(url, "zoom_in", {"image": 0, "bbox_2d": [0, 0, 500, 500], SESSION_ARG: "guess"},
                             headers=a))
        time.sleep(5)
        expired = run(call(url, "zoom_in", {"image": 0, "bbox_2d": [0, 0, 500, 500], SESSION_ARG: handle}, headers=a))
    finally:
        stop_server(server)
    assert not own.is_error
    assert foreign.is_error and foreign.content[0].text.startswith(f"Error: no session {handle}: the handle is "
                                                                    "unknown, was closed, or belongs to another")
    assert malformed.is_error and "a session handle is the 32 characters" in malformed.content[0].text
    assert expired.is_error and expired.content[0].text == (
        f"Error: session {handle} has expired (idle longer than its ttl); open a new one with open_session.")


def test_the_docs_show_the_tested_examples():
    """docs/mcp.md shows each `examples/mcp/*.py` whole (after its docstring), as tests_frameworks runs it."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "mcp.md").read_text()
    examples = sorted((root / "examples" / "mcp").glob("*.py"))
    assert examples
    for path in examples:
        source = path.read_text()
        body = ast.parse(source).body
        code = "\n".join(source.splitlines()[body[0].end_lineno:]).strip()  # after the module docstring
        assert f"```python\n{code}\n```" in page, path.name
