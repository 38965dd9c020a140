"""zoom_in through HTTP vs the same core call in-process, side by side; then 64 concurrent clients.

Run: .venv/bin/python -m bench.bench_http [--iterations 40] [--clients 64] [--calls 5]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import time

import httpx

from bench.common import Server, abba, photo_4000x3000, summary
from toolserver.config import Settings
from toolserver.core import Core
from toolserver.models import CreateSessionRequest, ImageInput

ARGS = {"image": "original_image", "bbox_2d": [400, 400, 650, 650]}  # a 1000x750 crop, inline PNG


async def side_by_side(iterations: int, image_b64: str, server: Server) -> dict:
    core = Core(Settings())
    local = await core.create_session(CreateSessionRequest(images=[ImageInput(data=image_b64)]))
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        remote = (await client.post("/v1/sessions", json={"images": [{"data": image_b64}]})).json()["session_id"]
        server_side: list[float] = []

        async def local_call() -> None:
            result = await core.call_tool(local.session_id, "zoom_in", ARGS)
            assert result.ok and result.images[0].data

        async def http_call() -> None:
            response = await client.post(f"/v1/sessions/{remote}/tools/zoom_in", json=ARGS)
            body = response.json()
            server_side.append(float(response.headers["x-process-time"]))
            assert body["ok"] and body["images"][0]["data"]

        in_process, over_http = await abba(local_call, http_call, iterations, warmup=4)
    await core.stop()
    a, b, s = summary(in_process), summary(over_http), summary(server_side[4:])
    return {"in_process": a, "http": b, "http_server_side": s,
            "http_over_in_process_p50": b["p50_ms"] / a["p50_ms"], "crop": "1000x750"}


async def concurrent(server: Server, image_b64: str, clients: int, calls: int) -> dict:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=server.url, timeout=300, limits=limits) as client:
        sessions = []
        for _ in range(clients):
            r = await client.post("/v1/sessions", json={"images": [{"data": image_b64}]})
            sessions.append(r.json()["session_id"])
        latencies: list[float] = []
        errors = 0

        async def run(sid: str) -> None:
            nonlocal errors
            for _ in range(calls):
                t = time.perf_counter()
                r = await client.post(f"/v1/sessions/{sid}/tools/zoom_in", json=ARGS)
                latencies.append(time.perf_counter() - t)
                errors += r.status_code != 200 or not r.json()["ok"]

        start = time.perf_counter()
        await asyncio.gather(*(run(s) for s in sessions))
        wall = time.perf_counter() - start
        for sid in sessions:
            await client.delete(f"/v1/sessions/{sid}")
    return {"clients": clients, "calls": clients * calls, "wall_s": wall, "calls_per_s": clients * calls / wall,
            "errors": errors, **summary(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    image_b64 = base64.b64encode(photo_4000x3000()).decode()
    with Server({"TOOLSERVER_QUEUE_LIMIT": "1024"}) as server:
        report = {"side_by_side": asyncio.run(side_by_side(args.iterations, image_b64, server)),
                  "concurrent": asyncio.run(concurrent(server, image_b64, args.clients, args.calls))}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
