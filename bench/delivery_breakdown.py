"""Where an inline image's time goes between the model's output and the bytes on the wire, step by step, on one
real SMFANet x4 output (1024x1024 from a 256x256 crop), with the very functions the server and the client run.

    python -m bench.delivery_breakdown [--json out.json]

Each step is timed best-of-N and median (ms). Then the GIL: how long an asyncio loop (the server's event loop)
is kept from running while another thread encodes (its longest tick delay), and how encodes scale on two threads
against two encode processes.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pybase64
from PIL import Image

from bench.bench_sr_http import crop
from bench.common import print_report
from toolserver import jsonio
from toolserver.client.shm import read_shm
from toolserver.config import SHIPPED_SMFANET
from toolserver.core.shm import ShmFiles
from toolserver.encodepool import EncodePool
from toolserver.imaging import encode_image, encode_png
from toolserver.models import ResultImage, ToolResult


def timed(fn: Callable[[], Any], n: int = 9) -> dict[str, float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return {"best_ms": round(min(times) * 1e3, 3), "median_ms": round(statistics.median(times) * 1e3, 3)}


def sr_output(side: int) -> np.ndarray:
    from toolserver.sr.engine import SREngine

    engine = SREngine(SHIPPED_SMFANET, device="cpu")
    try:
        outcome = engine.run_jobs([(np.asarray(crop(3, side)), 4, None)])[0]
    finally:
        engine.close()
    assert not isinstance(outcome, Exception)
    return outcome[0]


def loop_stall(work: Callable[[], Any], seconds: float = 1.5) -> dict[str, float]:
    """The longest and the 99th-percentile delay of a 1 ms asyncio ticker while `work` runs over and over in
    another thread: how long the event loop waits for the GIL."""
    delays: list[float] = []
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            work()

    async def ticker() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            delays.append(time.perf_counter() - started - 0.001)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        asyncio.run(ticker())
    finally:
        stop.set()
        thread.join()
    delays.sort()
    return {"max_ms": round(delays[-1] * 1e3, 2), "p99_ms": round(delays[int(len(delays) * 0.99)] * 1e3, 2)}


def scaling(encode: Callable[[], Any], workers: int, count: int) -> float:
    """Encodes per second with `workers` threads calling `encode`."""
    with ThreadPoolExecutor(workers) as pool:
        started = time.perf_counter()
        list(pool.map(lambda _: encode(), range(count)))
        return round(count / (time.perf_counter() - started), 2)


def steps(out: np.ndarray) -> dict[str, Any]:
    img = Image.fromarray(out)
    png = encode_png(img)
    text = pybase64.b64encode_as_string(png)
    result = ToolResult(ok=True, tool="super_resolution", text="Enlarged.", images=[ResultImage(
        key="observation_1", index=1, width=img.width, height=img.height, mime="image/png", data=text)])
    body = jsonio.dump_model(result)
    pool = EncodePool(2)
    pool.start()
    report: dict[str, Any] = {
        "engine array -> PIL (Image.fromarray)": timed(lambda: Image.fromarray(out)),
        "PIL -> raw bytes (tobytes, fpng's input)": timed(img.tobytes),
        "PNG, fpng in the calling thread": timed(lambda: encode_png(img)),
        "PNG, fpng in an encode process": timed(lambda: encode_png(img, fpng_writer=pool.fpng)),
        "PNG, Pillow zlib level 1": timed(lambda: encode_png(img, encoder="pillow"), 3),
        "JPEG q95 (Pillow)": timed(lambda: encode_image(img, "jpeg")),
        "base64 of the PNG": timed(lambda: pybase64.b64encode_as_string(png)),
        "ToolResult -> JSON bytes (orjson)": timed(lambda: jsonio.dump_model(result)),
        "client: JSON parse (orjson)": timed(lambda: orjson.loads(body)),
        "client: base64 decode": timed(lambda: pybase64.b64decode(text)),
        "client: PNG decode to pixels": timed(lambda: np.asarray(Image.open(io.BytesIO(png)))),
        "sizes": {"raw_bytes": out.nbytes, "png_bytes": len(png), "json_bytes": len(body)},
    }
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        files = ShmFiles(Path(tmp) / "shm", 1 << 34, 600)
        sid = "A" * 32
        handle = files.write(sid, "k", img)
        report["shm: write the raw pixels (server)"] = timed(lambda: files.write(sid, "k", img))
        report["shm: map them (client)"] = timed(lambda: read_shm(handle))
        report["shm: copy them into the client's own array"] = timed(lambda: read_shm(handle, copy=True))
    report["event loop stall while another thread encodes"] = {
        "idle": loop_stall(lambda: time.sleep(0.005)),
        "fpng in the thread": loop_stall(lambda: encode_png(img)),
        "fpng in an encode process": loop_stall(lambda: encode_png(img, fpng_writer=pool.fpng)),
        "JPEG q95": loop_stall(lambda: encode_image(img, "jpeg")),
    }
    report["encodes per second, 1 vs 2 threads"] = {
        "fpng in threads": [scaling(lambda: encode_png(img), w, 16) for w in (1, 2)],
        "fpng in 2 encode processes": [scaling(lambda: encode_png(img, fpng_writer=pool.fpng), w, 16)
                                       for w in (1, 2)],
        "JPEG q95": [scaling(lambda: encode_image(img, "jpeg"), w, 16) for w in (1, 2)],
    }
    pool.close()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", type=int, default=256, help="crop side; the output is 4x")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    out = sr_output(args.side)
    print_report({"output": f"{out.shape[1]}x{out.shape[0]}", **steps(out)}, args.json)


if __name__ == "__main__":
    main()
