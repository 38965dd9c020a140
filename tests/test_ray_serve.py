"""toolserver on Ray Serve, on a two-node Ray cluster on this machine (tests/ray_helpers.py), deployed from
deploy/ray/toolserver.yaml: the same answers as a uvicorn server of this checkout, the models on the GPU node,
calls of several sessions batched, an ingress replica killed mid-trajectory losing nothing, and no Ray process
left behind."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import PHOTOS, running_chroma, start_server, stop_server
from tests.docs_helpers import build_tiny_clip, make_pdf
from tests.ray_helpers import fitted_config, ray_cluster

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")

PHOTO = PHOTOS / "TwoWings.jpg"
TIMING = re.compile(r"(_ms|_s|seconds)$")  # meta fields that time a call: they differ from run to run


@pytest.fixture(scope="module")
def servers(tmp_path_factory, shared_redis):
    """(the app on Ray Serve, a uvicorn server of this checkout, the cluster), sharing Redis (each its own key
    prefix), one Chroma server and one documents directory: a document ingested through one is seen by both."""
    tmp = tmp_path_factory.mktemp("ray")
    clip = build_tiny_clip(tmp / "clip")
    with running_chroma(tmp / "chroma") as chroma_url:
        env = {"TOOLSERVER_REDIS_URL": shared_redis.url, "TOOLSERVER_CHROMA_URL": chroma_url,
               "TOOLSERVER_DATA_DIR": str(tmp / "data"), "TOOLSERVER_CLIP_MODEL": str(clip),
               "TOOLSERVER_ALLOWED_ROOTS": json.dumps([str(PHOTOS), str(tmp)]), "TOOLSERVER_LOG_LEVEL": "warning",
               "TOOLSERVER_SANDBOX_START": "first_use", "HF_HUB_OFFLINE": "1"}
        uvicorn = start_server({**env, "TOOLSERVER_SESSION_STORE": "redis", "TOOLSERVER_REDIS_PREFIX": "uv"},
                               timeout=60)
        try:
            # A batch of SMFANet calls waits 100 ms for company: on a loaded 2-core machine the 16 concurrent calls
            # below may otherwise reach the deployment one by one, each answered before the next arrives.
            with ray_cluster({**env, "TOOLSERVER_REDIS_PREFIX": "ray", "TOOLSERVER_SR_BATCH_WAIT_MS": "100"}) as cluster:
                from tests.conftest import free_port

                url = cluster.deploy(fitted_config(free_port()), timeout_s=240)
                yield url, uvicorn.url, cluster, tmp
        finally:
            stop_server(uvicorn)


def test_the_models_run_on_the_gpu_node_and_the_ingress_beside_them(servers):
    url, _, cluster, _ = servers
    _, worker = cluster.node_ids()
    ready = httpx.get(f"{url}/readyz", timeout=30).json()
    assert ready["status"] == "ready"
    sr, documents = ready["super_resolution"], ready["documents"]
    assert sr["available"] and sr["served_by"] == "ray serve deployment 'smfanet'" and sr["node"] == worker
    for role in ("clip", "text"):
        assert documents[role]["served_by"] == f"ray serve deployment '{role}'" and documents[role]["node"] == worker
    from ray import serve

    app = serve.status().applications["toolserver"]
    assert app.deployments["toolserver"].replica_states == {"RUNNING": 2}  # autoscaling's minimum


def _strip(value: Any, session_ids: tuple[str, ...] = ()) -> Any:
    """An answer without what differs between two servers by design: timings (and `bytes_held`, which counts the
    call log, whose records carry timings), and the session's id."""
    if isinstance(value, dict):
        return {k: _strip(v, session_ids) for k, v in value.items()
                if not TIMING.search(k) and k not in ("session_id", "expires_in_s", "bytes_held")}
    if isinstance(value, list):
        return [_strip(v, session_ids) for v in value]
    if isinstance(value, str):
        for sid in session_ids:
            value = value.replace(sid, "<session>")
    return value


def _trajectory(base: str, tmp: Path) -> list[Any]:
    """Every door once: a session with an upload, zoom_in, /act, super_resolution, a document query, verl-tool's
    /get_observation, and MCP's tool listing."""
    answers: list[Any] = []
    with httpx.Client(base_url=base, timeout=120) as http:
        data = base64.b64encode(PHOTO.read_bytes()).decode()
        created = http.post("/v1/sessions", json={"images": [{"data": data}]}).raise_for_status().json()
        sid = created["session_id"]
        answers.append(created)
        answers.append(http.post(f"/v1/sessions/{sid}/tools/zoom_in",
                                 json={"image": "original_image", "bbox_2d": [100, 100, 600, 500]}).json())
        turn = '<tool_call>{"name": "zoom_in", "arguments": {"image": 0, "bbox_2d": [0, 0, 500, 500]}}</tool_call>'
        answers.append(http.post(f"/v1/sessions/{sid}/act", json={"text": turn}).json())
        answers.append(http.post(f"/v1/sessions/{sid}/tools/super_resolution",
                                 json={"image": "observation_1", "bbox_2d": [0, 0, 400, 400], "scale": 2}).json())
        answers.append(http.post(f"/v1/sessions/{sid}/tools/doc_page_retrieval_by_query",
                                 json={"filename": "manual", "query": "draw_scatter_plot colour"}).json())
        answers.append(http.get(f"/v1/sessions/{sid}").json())
        image_url = "data:image/jpeg;base64," + data
        step = '<tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [0.1, 0.1, 0.6, 0.5], ' \
               '"target_image": 1}}</tool_call>'
        for fields in ({"images": [image_url]}, {"images": [image_url], "finish": True}):
            answers.append(http.post("/get_observation", json={
                "trajectory_ids": ["t-1"], "actions": [step], "extra_fields": [fields]}).json())
        answers.append(_mcp_tool_listing(http))
    return _strip(answers, (sid,))


def _mcp_tool_listing(http: httpx.Client) -> Any:
    """MCP's handshake (initialize, initialized), then tools/list with the session id the server gave."""
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    hello = http.post("/mcp?profile=default", headers=headers, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
    headers["Mcp-Session-Id"] = hello.raise_for_status().headers["mcp-session-id"]
    http.post("/mcp?profile=default", headers=headers,
              json={"jsonrpc": "2.0", "method": "notifications/initialized"}).raise_for_status()
    listing = http.post("/mcp?profile=default", headers=headers,
                        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
    http.delete("/mcp?profile=default", headers=headers)
    return listing.raise_for_status().json()


def _ingest(base: str, pdf: Path) -> None:
    with httpx.Client(base_url=base, timeout=120) as http:
        http.post("/v1/documents", files={"file": ("manual.pdf", pdf.read_bytes())}).raise_for_status()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            info = http.get("/v1/documents/manual").json()
            if info.get("status") == "ready":
                assert set(info["embedded"]) == {"clip", "text"}
                return
            time.sleep(0.5)
    raise AssertionError(f"the document was not ingested: {info}")


def test_a_whole_trajectory_is_answered_as_uvicorn_answers_it(servers):
    url, uvicorn_url, _, tmp = servers
    _ingest(url, make_pdf(tmp / "manual.pdf"))  # through Ray: pages embedded by the encoder deployments
    on_ray, on_uvicorn = _trajectory(url, tmp), _trajectory(uvicorn_url, tmp)
    assert on_ray[1]["ok"] and on_ray[2]["results"][0]["ok"] and on_ray[3]["ok"] and on_ray[4]["ok"], on_ray[:5]
    assert on_ray[3]["meta"]["method"] == "smfanet" and on_ray[4]["meta"]["rankings"]
    assert len(on_ray[-1]["result"]["tools"]) > 20  # MCP answered
    for step, (ours, theirs) in enumerate(zip(on_ray, on_uvicorn, strict=True)):
        assert ours == theirs, f"step {step} differs"


def _batch_counts(url: str, replicas: int) -> dict[str, float]:
    """toolserver_model_batch_size for smfanet, summed over the ingress replicas (each its own /metrics)."""
    seen: dict[str, dict[str, float]] = {}
    deadline = time.monotonic() + 30
    while len(seen) < replicas and time.monotonic() < deadline:
        response = httpx.get(f"{url}/metrics", timeout=10)
        counts = {}
        for line in response.text.splitlines():
            match = re.match(r'toolserver_model_batch_size_(bucket\{le="([^"]+)",|count\{)model="smfanet"\} (\S+)',
                             line)
            if match:
                counts[match.group(2) or "count"] = float(match.group(3))
        seen[response.headers["x-toolserver-replica"]] = counts
    assert len(seen) == replicas
    keys = set().union(*seen.values())
    return {k: sum(c.get(k, 0.0) for c in seen.values()) for k in keys}


def test_sixteen_concurrent_super_resolution_calls_reach_the_model_together(servers):
    url = servers[0]
    before = _batch_counts(url, 2)
    with httpx.Client(base_url=url, timeout=120) as http:
        data = base64.b64encode(PHOTO.read_bytes()).decode()
        sids = [http.post("/v1/sessions", json={"images": [{"data": data}]}).json()["session_id"] for _ in range(16)]
    barrier = threading.Barrier(16)

    def enlarge(sid: str) -> dict:
        with httpx.Client(base_url=url, timeout=120) as http:
            barrier.wait()
            return http.post(f"/v1/sessions/{sid}/tools/super_resolution",
                             json={"image": "original_image", "bbox_2d": [0, 0, 100, 100], "scale": 2}).json()

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(enlarge, sids))
    assert all(r.get("ok") and r["meta"]["method"] == "smfanet" for r in results), [r for r in results if not r.get("ok")][:2]
    assert len({r["images"][0]["data"] for r in results}) == 1  # one image, one answer
    after = _batch_counts(url, 2)
    calls = after["count"] - before.get("count", 0.0)
    alone = after["1.0"] - before.get("1.0", 0.0)
    assert calls == 16 and alone < 16, (before, after)  # some calls ran in a batch of several sessions


def test_an_ingress_replica_killed_mid_trajectory_loses_and_doubles_nothing(servers):
    from toolserver.client import Client

    url = servers[0]
    client = Client(url, retries=8, backoff=0.2)
    session = client.create_session([PHOTO.read_bytes()])
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def trajectory() -> None:
        try:
            for i in range(40):
                result = session.call("zoom_in", image="original_image", bbox_2d=[0, 0, 500 + i, 500])
                outcomes.append(result.images[0].key)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    worker = threading.Thread(target=trajectory)
    worker.start()
    while len(outcomes) < 8 and not errors:
        time.sleep(0.05)
    replicas = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                if a["name"].startswith("SERVE_REPLICA::toolserver#toolserver#")]
    ray.kill(ray.get_actor(replicas[0], namespace="serve"), no_restart=True)
    worker.join(120)
    assert not worker.is_alive() and not errors, errors
    keys = [image.key for image in session.info().images]
    assert outcomes == [f"observation_{i}" for i in range(1, 41)]  # every call answered once, in order
    assert keys == ["original_image", *outcomes]  # and held once
    session.release()


def test_the_cluster_leaves_no_process_behind(servers):
    cluster = servers[2]
    left = cluster.stop()
    assert left == [], f"Ray processes still alive after shutdown: {left}"
