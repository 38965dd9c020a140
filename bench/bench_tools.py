"""Each tool's in-process latency on a 4000x3000 photo, and HTTP/in-process for zoom_in and keypoint_zoom.

Run: .venv/bin/python -m bench.bench_tools [--iterations 15]
In-process means `Core.call_tool` (tool + PNG encode + base64), as a trainer embedding the core would pay.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import time
from pathlib import Path

import httpx

from bench.common import ROOT, Server, abba, photo_4000x3000, summary
from toolserver.config import Settings
from toolserver.core import Core
from toolserver.models import CreateSessionRequest, ImageInput

# (profile, tool, arguments, session settings)
CASES = [
    ("default", "zoom_in", {"image": 0, "bbox_2d": [400, 400, 650, 650]}, {}),
    ("default", "keypoint_zoom", {"image": 0, "keypoint": [500, 500]}, {}),
    ("default", "lookback_reuse", {"image": 0, "reason": "bench"}, {"output": {"delivery": "ref"}}),
    ("arm-thinker", "image_zoom_in_tool", {"image": "original_image", "bbox_2d": [400, 400, 650, 650]}, {}),
    ("arm-thinker-qwen3vl", "image_zoom_in_tool", {"img_idx": 0, "label": "x", "bbox_2d": [400, 400, 650, 650]}, {}),
    ("qwen3-vl", "image_zoom_in_tool", {"img_idx": 0, "label": "x", "bbox_2d": [400, 400, 650, 650]}, {}),
    ("groundlight", "zoom", {"keypoint": [500, 400]}, {}),
    ("mgpo", "grounding", {"bbox_2d": [300, 300, 600, 500], "label": "x"}, {"max_tool_calls": 10**6}),
    ("imagent", "zoom_in", {"image_index": 0, "bbox_2d": [400, 400, 650, 650], "label": "x"},
     {"max_tool_calls": 10**6}),
    ("mags-rl", "zoom", {"boxes": [[1000, 1000, 1500, 1300], [2000, 500, 2400, 900]]}, {"max_tool_calls": 10**6}),
    ("default", "super_resolution", {"image": 0, "bbox_2d": [400, 400, 450, 450]}, {}),
    ("default", "magnify", {"boxes": [[400, 400, 450, 450], [600, 300, 650, 340]]}, {}),
]
# The SMFANet checkpoints for the SR tools (without them they fall back or fail, which is not what we time).
MODEL_DIR = Path(os.environ.get("TOOLSERVER_SR_MODEL_DIR", ROOT.parent / "shared" / "models" / "smfanet"))


async def in_process(image_b64: str, iterations: int, only: str | None = None) -> dict:
    core = Core(Settings(sr_model_dir=MODEL_DIR))
    out = {}
    for profile, tool, args, settings in CASES:
        if only and only not in f"{profile}/{tool}":
            continue
        created = await core.create_session(CreateSessionRequest(profile=profile, images=[ImageInput(data=image_b64)],
                                                                 **settings))
        times = []
        for i in range(iterations + 2):
            t = time.perf_counter()
            result = await core.call_tool(created.session_id, tool, args)
            if i >= 2:
                times.append(time.perf_counter() - t)
            assert result.ok, result.text
        sizes = [(im.width, im.height) for im in result.images]
        out[f"{profile}/{tool}"] = {**summary(times), "outputs": sizes}
        await core.release(created.session_id)
    await core.stop()
    return out


async def side_by_side(image_b64: str, server: Server, iterations: int) -> dict:
    core = Core(Settings())
    out = {}
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        for _profile, tool, args, _ in CASES[:2]:
            local = (await core.create_session(CreateSessionRequest(images=[ImageInput(data=image_b64)]))).session_id
            remote = (await client.post("/v1/sessions", json={"images": [{"data": image_b64}]})).json()["session_id"]

            async def local_call(sid=local, tool=tool, args=args):
                assert (await core.call_tool(sid, tool, args)).ok

            async def http_call(sid=remote, tool=tool, args=args):
                assert (await client.post(f"/v1/sessions/{sid}/tools/{tool}", json=args)).json()["ok"]

            a, b = await abba(local_call, http_call, iterations)
            sa, sb = summary(a), summary(b)
            out[tool] = {"in_process_p50_ms": sa["p50_ms"], "http_p50_ms": sb["p50_ms"],
                         "ratio_p50": sb["p50_ms"] / sa["p50_ms"]}
    await core.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--only", help="run only the in-process cases whose profile/tool contains this")
    args = parser.parse_args()
    image_b64 = base64.b64encode(photo_4000x3000()).decode()
    report = {"in_process": asyncio.run(in_process(image_b64, args.iterations, args.only))}
    if args.only:
        print(json.dumps(report, indent=2))
        return
    with Server() as server:
        report["http_vs_in_process"] = asyncio.run(side_by_side(image_b64, server, args.iterations))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
