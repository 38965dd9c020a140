"""A rollout's tool traffic: N concurrent trajectories x M tool calls, through the async client over HTTP and
the same workload on the core in-process, alternated in one run.

Each trajectory uploads its own image once (a 1024x768 crop of a real photo, JPEG), makes M `zoom_in` calls
on it (boxes of 30-45 % of each side, inline PNG results) and releases the session: what a trainer's rollout
workers do per sample.

Run: .venv/bin/python -m bench.bench_rollout [--trajectories 256] [--calls 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import time

from PIL import Image

from bench.common import PHOTOS, Server, summary
from toolserver.client import AsyncClient
from toolserver.config import Settings
from toolserver.core import Core, RawImage
from toolserver.models import CreateSessionRequest

QUEUE_LIMIT = 1024  # above the trajectory count, so neither side refuses work during the run


def trajectory_image(i: int) -> bytes:
    photo = Image.open(PHOTOS / "Dragonfly_by_Bolly.jpg").convert("RGB")
    left, top = (i * 37) % (photo.width - 1024), (i * 23) % (photo.height - 768)
    buffer = io.BytesIO()
    photo.crop((left, top, left + 1024, top + 768)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def boxes(i: int, calls: int) -> list[list[int]]:
    out = []
    for k in range(calls):
        x, y = (i * 53 + k * 97) % 550, (i * 31 + k * 71) % 500
        out.append([x, y, x + 300 + (k * 37) % 150, y + 300 + (k * 29) % 150])
    return out


async def over_http(url: str, images: list[bytes], calls: int) -> dict:
    latencies: list[float] = []
    errors = 0

    async def one(client: AsyncClient, i: int) -> None:
        nonlocal errors
        async with await client.create_session([images[i]]) as session:
            for box in boxes(i, calls):
                started = time.perf_counter()
                result = await session.call("zoom_in", image="original_image", bbox_2d=box)
                latencies.append(time.perf_counter() - started)
                errors += not (result.ok and result.images[0].data)

    async with AsyncClient(url, timeout=600) as client:
        started = time.perf_counter()
        await asyncio.gather(*(one(client, i) for i in range(len(images))))
        wall = time.perf_counter() - started
    return {"wall_s": wall, "calls_per_s": len(latencies) / wall, "errors": errors, **summary(latencies)}


async def in_process(core: Core, images: list[bytes], calls: int) -> dict:
    latencies: list[float] = []
    errors = 0

    async def one(i: int) -> None:
        nonlocal errors
        created = await core.create_session(CreateSessionRequest(), [RawImage(images[i])])
        try:
            for box in boxes(i, calls):
                started = time.perf_counter()
                result = await core.call_tool(created.session_id, "zoom_in",
                                              {"image": "original_image", "bbox_2d": box})
                latencies.append(time.perf_counter() - started)
                errors += not (result.ok and result.images[0].data)
        finally:
            await core.release(created.session_id)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(len(images))))
    wall = time.perf_counter() - started
    return {"wall_s": wall, "calls_per_s": len(latencies) / wall, "errors": errors, **summary(latencies)}


async def main_async(args: argparse.Namespace) -> dict:
    images = [trajectory_image(i) for i in range(args.trajectories)]
    core = Core(Settings(queue_limit=QUEUE_LIMIT))
    await core.start()
    runs: dict[str, list[dict]] = {"in_process": [], "http": []}
    with Server({"TOOLSERVER_QUEUE_LIMIT": str(QUEUE_LIMIT)}) as server:
        await over_http(server.url, images[:8], 1)  # warm-up: connections, first decode
        await in_process(core, images[:8], 1)
        for r in range(args.rounds):  # ABBA over whole workloads
            order = ("in_process", "http") if r % 2 == 0 else ("http", "in_process")
            for mode in order:
                run = await (in_process(core, images, args.calls) if mode == "in_process"
                             else over_http(server.url, images, args.calls))
                runs[mode].append(run)
    await core.stop()
    best = {mode: min(results, key=lambda r: r["wall_s"]) for mode, results in runs.items()}
    return {"trajectories": args.trajectories, "calls_per_trajectory": args.calls, "runs": runs, "best": best,
            "http_wall_over_in_process": best["http"]["wall_s"] / best["in_process"]["wall_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=256)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main_async(args)), indent=2))


if __name__ == "__main__":
    main()
