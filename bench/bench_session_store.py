"""The Redis session store against the in-memory one, side by side in one process (ABBA order).

Three cases on a real 1280-px photo: a `zoom_in` call on the replica that received the image (its decoded
pixels are in the replica's cache), the same call on a second replica that has to fetch and decode the
image once (then it is cached, so the first call is reported separately), and session creation with the
upload. A real `redis-server` is started on a spare loopback port.

Run: .venv/bin/python -m bench.bench_session_store [--iterations 60]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import tempfile
import time
from pathlib import Path

from PIL import Image

from bench.common import RedisProcess, abba, summary
from toolserver.config import Settings
from toolserver.core import Core
from toolserver.models import CreateSessionRequest, ImageInput

PHOTO = Path(__file__).resolve().parents[2] / "shared" / "data" / "photos" / "LadyBird.jpg"
ZOOM = {"image": "original_image", "bbox_2d": [200, 200, 700, 600]}


def photo_b64() -> str:
    img = Image.open(PHOTO).convert("RGB")
    img.thumbnail((1280, 1280))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return base64.b64encode(buf.getvalue()).decode()


async def run(iterations: int, redis_url: str, work: Path) -> dict:
    image = photo_b64()
    memory = Core(Settings(data_dir=work / "m"))
    first = Core(Settings(data_dir=work / "r1", session_store="redis", redis_url=redis_url))
    second = Core(Settings(data_dir=work / "r2", session_store="redis", redis_url=redis_url))
    request = CreateSessionRequest(images=[ImageInput(data=image)])
    m_sid = (await memory.create_session(request)).session_id
    r_sid = (await first.create_session(request)).session_id

    async def zoom(core: Core, sid: str) -> None:
        result = await core.call_tool(sid, "zoom_in", ZOOM)
        assert result.ok

    # The other replica's first call fetches and decodes the upload; later ones hit its cache.
    started = time.perf_counter()
    await zoom(second, r_sid)
    cold = time.perf_counter() - started
    mem_zoom, redis_zoom = await abba(lambda: zoom(memory, m_sid), lambda: zoom(first, r_sid), iterations)
    mem_zoom2, redis_zoom_other = await abba(lambda: zoom(memory, m_sid), lambda: zoom(second, r_sid), iterations)

    async def create(core: Core) -> None:
        created = await core.create_session(request)
        await core.release(created.session_id)

    mem_create, redis_create = await abba(lambda: create(memory), lambda: create(first), iterations)
    for core in (memory, first, second):
        await core.stop()
    out = {
        "zoom_in, same replica": (summary(mem_zoom), summary(redis_zoom)),
        "zoom_in, other replica (cached after its first call)": (summary(mem_zoom2), summary(redis_zoom_other)),
        "create + release with a 1280-px JPEG": (summary(mem_create), summary(redis_create)),
    }
    return {"cold_first_call_other_replica_ms": round(cold * 1000, 1),
            **{k: {"memory": m, "redis": r, "redis_over_memory_p50": round(r["p50_ms"] / m["p50_ms"], 2)}
               for k, (m, r) in out.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=60)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="toolserver-store-bench-"))
    redis = RedisProcess(work)
    try:
        print(json.dumps(asyncio.run(run(args.iterations, redis.url, work)), indent=2))
    finally:
        redis.stop()


if __name__ == "__main__":
    main()
