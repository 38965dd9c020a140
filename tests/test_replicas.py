"""State that used to live in one process, shared by replicas through the session store: names of sessions
(verl-tool's trajectories, MCP's sessions), so that any replica serves any call; and the start-up refusal of a
multi-replica Ray Serve app whose state could not be shared."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from PIL import Image

from tests.conftest import PHOTOS, start_server, stop_server
from toolserver.config import Settings
from toolserver.stores.aliases import Aliases, RedisAliases

PHOTO = PHOTOS / "TwoWings.jpg"


def test_process_aliases_name_a_session_once_and_expire():
    async def main():
        aliases = Aliases()
        assert await aliases.claim("mcp", "a", "s1", ttl_s=60) == "s1"
        assert await aliases.claim("mcp", "a", "s2", ttl_s=60) == "s1"  # taken: the first name stands
        assert await aliases.get("mcp", "a") == "s1" and await aliases.get("verl", "a") is None
        assert await aliases.drop("mcp", "a") == "s1" and await aliases.get("mcp", "a") is None
        await aliases.claim("mcp", "b", "s3", ttl_s=0.05)
        await asyncio.sleep(0.1)
        assert await aliases.get("mcp", "b") is None

    asyncio.run(main())


def test_redis_aliases_let_one_of_racing_replicas_win(shared_redis):
    import redis.asyncio as aredis

    async def main():
        client = aredis.Redis.from_url(shared_redis.url)
        import contextlib

        replicas = [RedisAliases(client, "alias-test", contextlib.nullcontext) for _ in range(8)]
        winners = await asyncio.gather(*(r.claim("verl-tool:x", "t1", f"s{i}", 30) for i, r in enumerate(replicas)))
        assert len(set(winners)) == 1  # every replica now names the same session
        assert await replicas[3].get("verl-tool:x", "t1", ttl_s=30) == winners[0]
        assert await replicas[5].drop("verl-tool:x", "t1") == winners[0]
        assert await replicas[0].get("verl-tool:x", "t1") is None
        await client.aclose()

    asyncio.run(main())


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory, shared_redis):
    """Two `toolserver serve` processes sharing one Redis (one key prefix), MCP sessions shared."""
    tmp = tmp_path_factory.mktemp("replicas")
    env = {"TOOLSERVER_SESSION_STORE": "redis", "TOOLSERVER_REDIS_URL": shared_redis.url,
           "TOOLSERVER_REDIS_PREFIX": "replicas", "TOOLSERVER_MCP_SESSIONS": "shared",
           "TOOLSERVER_DATA_DIR": str(tmp), "TOOLSERVER_ALLOWED_ROOTS": json.dumps([str(PHOTOS)]),
           "TOOLSERVER_SANDBOX_START": "first_use"}
    servers = [start_server(env), start_server(env)]
    yield servers
    for server in servers:
        stop_server(server)


class RoundRobin(httpx2.AsyncBaseTransport):
    """Each request to the next replica (what a load balancer without affinity does)."""

    def __init__(self, ports: list[int]):
        self.ports = ports
        self.sent = [0] * len(ports)
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        i = sum(self.sent) % len(self.ports)
        self.sent[i] += 1
        request.url = request.url.copy_with(port=self.ports[i])
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_an_mcp_session_is_served_by_whichever_replica_gets_each_request(two_replicas):
    ports = [int(s.url.rsplit(":", 1)[1]) for s in two_replicas]
    balancer = RoundRobin(ports)
    data = base64.b64encode(PHOTO.read_bytes()).decode()

    async def main():
        http = httpx2.AsyncClient(transport=balancer, timeout=60)
        async with Client(streamable_http_client(f"{two_replicas[0].url}/mcp?profile=default", http_client=http)) \
                as mcp:
            loaded = await mcp.call_tool("load_image", {"data": data, "key": "photo"})
            crops = [await mcp.call_tool("zoom_in", {"image": "photo", "bbox_2d": [0, 0, 500 + i, 500]})
                     for i in range(4)]
            again = await mcp.call_tool("lookback_reuse", {"image": "observation_2"})
        await http.aclose()
        return loaded, crops, again

    loaded, crops, again = asyncio.run(asyncio.wait_for(main(), 120))
    assert not loaded.is_error and all(not c.is_error for c in crops) and not again.is_error
    assert [c.content[-1].text.split("`")[-2] for c in crops] == [f"observation_{i}" for i in range(1, 5)]
    assert min(balancer.sent) >= 3  # both replicas served calls of the one MCP session
    size = Image.open(io.BytesIO(base64.b64decode(crops[0].content[0].data))).size
    assert size == (Image.open(PHOTO).width // 2, Image.open(PHOTO).height // 2)
    # The client ended its MCP session (DELETE, to whichever replica): the toolserver session is gone.
    listed = httpx.get(f"{two_replicas[1].url}/v1/sessions").json()
    assert not [s for s in listed["sessions"] if s["profile"] == "default" and s["images"] == 6]


def test_a_verl_tool_trajectory_moves_between_replicas_and_racing_first_steps_make_one_session(two_replicas):
    url = "data:image/jpeg;base64," + base64.b64encode(PHOTO.read_bytes()).decode()
    step = '<tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [0.1, 0.1, 0.6, 0.5], ' \
           '"target_image": 1}}</tool_call>'
    body = {"trajectory_ids": ["race"], "actions": [step], "extra_fields": [{"images": [url]}]}

    async def first_steps():
        async with httpx.AsyncClient(timeout=60) as http:
            return await asyncio.gather(*(http.post(f"{s.url}/get_observation", json=body) for s in two_replicas))

    answers = [r.json() for r in asyncio.run(first_steps())]
    assert all(a["valids"] == [True] for a in answers)
    third = httpx.post(f"{two_replicas[0].url}/get_observation", json=body, timeout=60).json()
    assert third["valids"] == [True]
    sessions = httpx.get(f"{two_replicas[1].url}/v1/sessions").json()["sessions"]
    mine = [s for s in sessions if s["profile"] == "pixel-reasoner"]
    assert len(mine) == 1 and mine[0]["calls"] == 3  # one session took all three steps
    done = httpx.post(f"{two_replicas[1].url}/get_observation", timeout=60, json={
        **body, "extra_fields": [{"images": [url], "finish": True}]}).json()
    assert done["dones"] == [True]
    assert not [s for s in httpx.get(f"{two_replicas[0].url}/v1/sessions").json()["sessions"]
                if s["profile"] == "pixel-reasoner"]


@pytest.mark.ray
def test_a_multi_replica_ray_app_refuses_state_it_cannot_share():
    pytest.importorskip("ray")
    from toolserver.rayapp import build, refuse_process_state

    refuse_process_state(Settings(), 1)  # one replica: anything goes
    with pytest.raises(RuntimeError) as refused:
        refuse_process_state(Settings(), 4)
    message = str(refused.value)
    assert "up to 4 replicas" in message and "TOOLSERVER_SESSION_STORE=redis" in message
    assert "TOOLSERVER_CHROMA_URL" in message and "TOOLSERVER_MCP_SESSIONS=shared" in message
    refuse_process_state(Settings(session_store="redis", chroma_url="http://chroma:8000", mcp_sessions="shared"), 8)
    with pytest.raises(ValueError, match="unknown model"):
        build({"models": "smfanet,resnet"})
