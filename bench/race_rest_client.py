"""The REST side of the race (`bench.bench_race_verl_tool --api rest`): trajectories as a TRL or OpenEnv user's
rollout loop drives toolserver, through this project's `AsyncClient`.

Each trajectory uploads its original photo (the bytes as they are on disk, multipart) with `POST /v1/sessions`
(profile `pixel-reasoner`, whose model view of an original is what verl-tool's agent loop sends: the qwen-vl
resize, JPEG at quality 75), sends `calls` turns of model text through `POST /v1/sessions/{id}/act` (the same
`crop_image` calls as verl-tool's client sends), decodes each image of the observation (the messages to append)
with Pillow (what the user's
processor does next), and releases the session.

Run by the race with this project's python, after its imports, on a "go" line (so that start-up is not timed):

    python -m bench.race_rest_client < spec.json     # {"url", "calls", "inputs": [path per trajectory], "tag"}

Prints one JSON line: the wall time and this process's CPU from "go" to the end, when each trajectory's first
observation was back, each act's latency, the
bytes sent and received, how many calls succeeded, and the first trajectory's observations (text, image bytes
as base64) for the comparison with verl-tool's.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import sys
import time
from pathlib import Path

import httpx
from PIL import Image

from toolserver.client import AsyncClient

BOXES = [[1200, 900, 2000, 1500], [2400, 1400, 3300, 2200], [300, 300, 1100, 900], [1800, 1800, 2600, 2600],
         [3000, 400, 3900, 1000]]  # as bench/verl_tool/probe.py: pixels of the model's view


def action(index: int, call: int) -> str:
    bbox = BOXES[(index + call) % len(BOXES)]
    return ('Let me look closer.<tool_call>{"name": "crop_image", "arguments": '
            f'{{"bbox_2d": {json.dumps(bbox)}, "target_image": 1}}}}</tool_call>')


async def trajectory(client: AsyncClient, index: int, calls: int, photo: bytes, out: dict) -> None:
    session = await client.create_session([photo], profile="pixel-reasoner")
    try:
        for call in range(calls):
            text = action(index, call)
            started = time.perf_counter()
            acted = await session.act(text)
            images = [base64.b64decode(part["image_url"]["url"].split(",", 1)[1]) for message in acted.observation
                      if isinstance(message.get("content"), list)
                      for part in message["content"] if part.get("type") == "image_url"]
            for data in images:  # what the user's processor does with each returned image
                Image.open(io.BytesIO(data)).load()
            if call == 0:  # this trajectory's first observation is back
                out["first_done"].append(time.perf_counter() - out["t0"])
            out["latency"].append(time.perf_counter() - started)
            out["ok"] += all(result.ok for result in acted.results) and bool(acted.results)
            if index == 0:
                out["first"].append((acted.prompt, [base64.b64encode(d).decode() for d in images]))
    finally:
        await session.release()


async def drive(url: str, calls: int, photos: list[bytes], out: dict) -> None:
    async def count_sent(request: httpx.Request) -> None:
        out["sent"] += int(request.headers.get("content-length", 0))

    async def count_received(response: httpx.Response) -> None:
        out["received"] += int(response.headers.get("content-length", 0))

    async with AsyncClient(url, timeout=600) as client:
        client._http.event_hooks = {"request": [count_sent], "response": [count_received]}
        await asyncio.gather(*(trajectory(client, i, calls, photo, out) for i, photo in enumerate(photos)))


def main() -> None:
    spec = json.loads(sys.stdin.readline())
    photos = {path: Path(path).read_bytes() for path in set(spec["inputs"])}
    inputs = [photos[path] for path in spec["inputs"]]
    out: dict = {"latency": [], "sent": 0, "received": 0, "ok": 0, "first": [], "first_done": []}
    print("ready", flush=True)
    sys.stdin.readline()  # "go"
    cpu0, t0 = time.process_time(), time.perf_counter()
    out["t0"] = t0
    asyncio.run(drive(spec["url"], spec["calls"], inputs, out))
    out.update(wall_s=time.perf_counter() - t0, client_cpu_s=time.process_time() - cpu0)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
