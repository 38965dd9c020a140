"""`super_resolution` x4 over HTTP by delivery: inline PNG, inline JPEG, `shm` (and `ref`), beside the in-process
front (`SRFront`, bench.bench_models) in the same run.

    python -m bench.bench_sr_http                          # here: 48x48 crops (-> 192x192), 1 / 16 / 64 sessions
    python -m bench.bench_sr_http --side 256 --calls 6     # a GPU host: 256x256 crops (-> 1024x1024), as in #41
    python -m bench.bench_sr_http --encode-processes 0 4   # the inline path with fpng in threads vs in 4 processes
    python -m bench.bench_sr_http --tool zoom_in --side 256 --encode-processes 0 2   # delivery alone, 1 MP

`run(base_url, sessions, calls_per_session, delivery, fmt)` is importable (bench_node calls it against its own
server): each session uploads its own crop, then calls `super_resolution` (scale 4, the whole image) one call
after another, all sessions at once. A call is timed until its answer is parsed and, for `shm`, its pixels mapped
(`decode=True`: until the client holds the pixels as an array: PNG/JPEG decoded, shm copied). Reported: output
megapixels and calls per second, p50/p95 of one call (the client's and the server's own `X-Process-Time`),
errors, the server's delivery stages per call (`toolserver_delivery_seconds` from /metrics: encode, base64,
write; one worker's view when the server runs several), and how long /healthz took meanwhile (a blocked event
loop shows there).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import io
import multiprocessing
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pybase64
from PIL import Image

from bench.common import PHOTOS, Server, percentile, print_report
from toolserver.client.shm import read_shm
from toolserver.config import SHIPPED_SMFANET
from toolserver.imaging import encode_png
from toolserver.models import ShmHandle

MODES = ("inline:png", "inline:jpeg", "shm:png")
ZERO_COPY = ("shm",)  # the deliveries a trainer on the same node reads without a second encode
_STAGE = re.compile(r'^toolserver_delivery_seconds_(sum|count)\{stage="(\w+)"\} (\S+)$', re.MULTILINE)


@functools.lru_cache(maxsize=16)
def _photo(index: int) -> Image.Image:
    photos = sorted(PHOTOS.glob("*.jpg"))
    with Image.open(photos[index % len(photos)]) as img:
        return img.convert("RGB")


def crop(index: int, side: int) -> Image.Image:
    """The `index`-th side x side crop of a shared photograph (each session its own)."""
    page = _photo(index % len(list(PHOTOS.glob("*.jpg"))))
    x = (index * 97) % max(1, page.width - side)
    y = (index * 53) % max(1, page.height - side)
    return page.crop((x, y, x + side, y + side))


@functools.lru_cache(maxsize=256)
def _upload(index: int, side: int) -> str:
    """A session's image, as a PNG (fpng: the client's encoding stays out of the way) in base64."""
    return pybase64.b64encode_as_string(encode_png(crop(index, side)))


async def _stages(http: httpx.AsyncClient) -> dict[str, list[float]]:
    text = (await http.get("/metrics")).text
    out: dict[str, list[float]] = {}
    for kind, stage, value in _STAGE.findall(text):
        out.setdefault(stage, [0.0, 0.0])[0 if kind == "sum" else 1] = float(value)
    return out


def _pixels(body: dict[str, Any], decode: bool) -> int:
    """The output's pixels, after taking them as a trainer would (mapped, or decoded with `decode`)."""
    image = body["images"][0]
    if image.get("shm"):
        mapped = read_shm(ShmHandle.model_validate(image["shm"]), copy=decode)
        return mapped.shape[0] * mapped.shape[1]
    if decode and image.get("data"):
        with Image.open(io.BytesIO(pybase64.b64decode(image["data"]))) as img:
            np.asarray(img)
    return image["width"] * image["height"]


async def _run(base_url: str, sessions: int, calls: int, delivery: str, fmt: str, side: int, decode: bool,
               scale: int, tool: str, first: int = 0, ready: Callable[[], None] | None = None) -> dict[str, Any]:
    """One client process's share: sessions `first`.. (their uploads differ), then, once `ready()` returns (every
    process has created its sessions), their calls. The summary, with the raw figures `_merged` sums."""
    # zoom_in on an upload of the output's size: the same delivery of the same megapixels, without the network
    upload, arguments = ((side, {"image": 0, "scale": scale}) if tool == "super_resolution" else
                         (side * scale, {"image": 0, "bbox_2d": [0, 0, 999, 999]}))
    limits = httpx.Limits(max_connections=sessions + 2, max_keepalive_connections=sessions + 2)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits) as http:
        gate = asyncio.Semaphore(8)

        async def create(i: int) -> str:
            async with gate:
                r = await http.post("/v1/sessions", json={"images": [{"data": _upload(first + i, upload)}],
                                                          "output": {"delivery": delivery, "format": fmt}})
                r.raise_for_status()
                return str(r.json()["session_id"])

        sids = await asyncio.gather(*(create(i) for i in range(sessions)))
        latencies: list[float] = []
        server: list[float] = []
        probes: list[float] = []
        errors, pixels, done = 0, 0, False

        async def session(sid: str) -> None:
            nonlocal errors, pixels
            for _ in range(calls):
                started = time.perf_counter()
                r = await http.post(f"/v1/sessions/{sid}/tools/{tool}", json=arguments)
                body = orjson.loads(r.content) if r.status_code == 200 else {}
                if not body.get("ok"):
                    errors += 1
                    continue
                pixels += _pixels(body, decode)
                latencies.append(time.perf_counter() - started)
                server.append(float(r.headers.get("x-process-time", "nan")))

        async def probe() -> None:  # the event loop's responsiveness while the calls run
            while not done:
                started = time.perf_counter()
                await http.get("/healthz")
                probes.append(time.perf_counter() - started)
                await asyncio.sleep(0.02)

        if ready is not None:
            await asyncio.to_thread(ready)
        before = await _stages(http)
        prober = asyncio.create_task(probe())
        started, began = time.perf_counter(), time.time()
        await asyncio.gather(*(session(sid) for sid in sids))
        wall, ended = time.perf_counter() - started, time.time()
        done = True
        await prober
        after = await _stages(http)
        await asyncio.gather(*(http.delete(f"/v1/sessions/{sid}") for sid in sids))
    stages = {stage: round((after[stage][0] - before.get(stage, [0, 0])[0]) * 1e3 / n, 3)
              for stage in after if (n := after[stage][1] - before.get(stage, [0, 0])[1]) > 0}
    return {"tool": tool, "delivery": delivery, "format": fmt, "sessions": sessions, "calls": sessions * calls,
            "wall_s": round(wall, 3), "mp_per_s": round(pixels / wall / 1e6, 3),
            "calls_per_s": round(len(latencies) / wall, 3), "p50_ms": round(percentile(latencies, 50) * 1e3, 2),
            "p95_ms": round(percentile(latencies, 95) * 1e3, 2),
            "server_p50_ms": round(percentile(server, 50) * 1e3, 2), "errors": errors,
            "server_stage_ms_per_call": stages, "healthz_p95_ms": round(percentile(probes, 95) * 1e3, 2),
            "client_processes": 1, "raw": {"latencies": latencies, "server": server, "probes": probes,
                                           "pixels": pixels, "began": began, "ended": ended}}


def _part(args: tuple[Any, ...], ready: Any, out: Any) -> None:
    """A client process: its share of the sessions, its calls started with the others' (`ready`, a barrier)."""
    out.put(asyncio.run(_run(*args, ready=ready.wait)))


def _merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Client processes' figures as one run's: their calls over the time from the first start to the last end."""
    raw = [p["raw"] for p in parts]
    latencies = [x for r in raw for x in r["latencies"]]
    wall = max(r["ended"] for r in raw) - min(r["began"] for r in raw)
    pixels = sum(r["pixels"] for r in raw)
    first = parts[0]
    return {**first, "sessions": sum(p["sessions"] for p in parts), "calls": sum(p["calls"] for p in parts),
            "wall_s": round(wall, 3), "mp_per_s": round(pixels / wall / 1e6, 3),
            "calls_per_s": round(len(latencies) / wall, 3), "p50_ms": round(percentile(latencies, 50) * 1e3, 2),
            "p95_ms": round(percentile(latencies, 95) * 1e3, 2),
            "server_p50_ms": round(percentile([x for r in raw for x in r["server"]], 50) * 1e3, 2),
            "errors": sum(p["errors"] for p in parts),
            "healthz_p95_ms": round(percentile([x for r in raw for x in r["probes"]], 95) * 1e3, 2),
            "client_processes": len(parts)}


def run(base_url: str, sessions: int, calls_per_session: int, delivery: str, fmt: str, *, side: int = 256,
        decode: bool = False, scale: int = 4, tool: str = "super_resolution", processes: int = 1) -> dict[str, Any]:
    """`sessions` sessions at once, each making `calls_per_session` `super_resolution` calls (side x side crops,
    x`scale`) with `delivery` ("inline", "shm", "ref", "path") and `fmt` ("png", "jpeg", "webp"), against a server
    already running at `base_url` (with `shm_delivery` on for "shm"). `tool="zoom_in"`: the same output size
    delivered by zoom_in (an upload of that size, cropped by a pixel), to measure delivery without the network.

    `processes` > 1: the sessions are shared among that many client processes, which start their calls together,
    so that one Python client parsing megabyte answers is not what limits a node (BENCHMARKS.md, "One node on the
    GPU host"); the server's stage figures are then the first process's window's."""
    shares = [n for n in (sessions // processes + (i < sessions % processes) for i in range(processes)) if n]
    if len(shares) <= 1:
        out = asyncio.run(_run(base_url, sessions, calls_per_session, delivery, fmt, side, decode, scale, tool))
        del out["raw"]
        return out
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Barrier(len(shares)), ctx.Queue()
    firsts = [sum(shares[:i]) for i in range(len(shares))]
    procs = [ctx.Process(target=_part, args=((base_url, n, calls_per_session, delivery, fmt, side, decode, scale,
                                                tool, first), ready, results))
             for n, first in zip(shares, firsts, strict=True)]
    for proc in procs:
        proc.start()
    parts = sorted((results.get(timeout=1800) for _ in procs), key=lambda p: p["raw"]["began"])
    for proc in procs:
        proc.join()
    out = _merged(parts)
    del out["raw"]
    return out


def front_rate(side: int, levels: list[int], calls: int, device: str) -> dict[int, float]:
    """The in-process front's MP/s (`SRFront` → `LocalTransport` → the engine, threads as sessions)."""
    from bench.bench_models import run_sr, sr_front

    front = sr_front(device, True)
    inputs = [np.asarray(crop(i, side)) for i in range(max(levels))]
    run_sr(front, inputs[:2], 1, 1)  # the network loaded
    try:
        return {level: round(run_sr(front, inputs, level, calls)[0], 3) for level in levels}
    finally:
        front.close()


def engine_rate(side: int, device: str, count: int = 64, repeats: int = 3,
                cuda_graphs: bool | None = None) -> dict[str, float]:
    """The limits under the front, on the same crops: the engine alone (`count` crops queued at once, as the
    server's rule would hand them over, best of `repeats`) and the network's own forward on 1 and 16 tiles. CUDA
    graphs as the server's settings say, unless `cuda_graphs` is given (as `bench_models.sr_front` builds the front)."""
    from toolserver.config import Settings
    from toolserver.sr.engine import SREngine

    graphs = Settings().sr_cuda_graphs if cuda_graphs is None else cuda_graphs
    engine = SREngine(SHIPPED_SMFANET, device=device, batch_tiles="auto", max_batch=16, cuda_graphs=graphs)
    inputs = [np.asarray(crop(i, side)) for i in range(count)]
    out_mp = (side * 4) ** 2 / 1e6

    def best(action: Any) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            action()
            times.append(time.perf_counter() - started)
        return min(times)

    def all_jobs() -> None:
        failed = [o for o in engine.run_jobs([(x, 4, None) for x in inputs]) if isinstance(o, Exception)]
        if failed:
            raise failed[0]

    try:
        engine.run_jobs([(inputs[0], 4, None)])  # the network loaded (and on CUDA, its kernels)
        report = {"engine_mp_per_s": round(count * out_mp / best(all_jobs), 2)}
        for tiles in (1, 16):
            windows = inputs[:tiles]
            engine._forward(4, windows)  # this batch shape's kernels
            report[f"forward_{tiles}_tiles_mp_per_s"] = round(tiles * out_mp / best(
                lambda w=windows: engine._forward(4, w)), 2)
        return report
    finally:
        engine.close()


def _tmpfs() -> str | None:
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


def _server_env(shm_dir: Path, processes: str | None) -> dict[str, str]:
    env = {"TOOLSERVER_QUEUE_LIMIT": "4096", "TOOLSERVER_SHM_DELIVERY": "true", "TOOLSERVER_SHM_DIR": str(shm_dir),
           "TOOLSERVER_MAX_IMAGES_PER_SESSION": "4096"}
    if processes not in (None, "auto"):
        env["TOOLSERVER_ENCODE_PROCESSES"] = str(processes)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 16, 64], help="sessions at once")
    parser.add_argument("--calls", type=int, default=1, help="calls per session")
    parser.add_argument("--side", type=int, default=None, help="crop side (default 256 on CUDA, else 48)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), help="delivery:format, e.g. inline:png ref:png")
    parser.add_argument("--encode-processes", nargs="+", default=["auto"],
                        help="one server per value, all up at once and measured alternately (0: fpng in threads)")
    parser.add_argument("--decode", action="store_true", help="time until the client holds the pixels")
    parser.add_argument("--device", default=None, help="the front's device (default: cuda when present)")
    parser.add_argument("--skip-front", action="store_true")
    parser.add_argument("--tool", default="super_resolution", choices=["super_resolution", "zoom_in"],
                        help="zoom_in: the same output size without the network (delivery alone)")
    parser.add_argument("--client-processes", type=int, default=1,
                        help="client processes sharing the sessions (a node: a quarter of its cores)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    side = args.side or (256 if device != "cpu" else 48)
    report: dict[str, Any] = {"side": side, "out_side": side * 4, "device": device, "cores": os.cpu_count(),
                              "calls_per_session": args.calls, "servers": {}}
    with contextlib.ExitStack() as stack:  # every server up at once, measured alternately (ABBA), row by row
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=_tmpfs())))
        servers = {p: stack.enter_context(Server(_server_env(tmp / f"shm-{i}", p), start_timeout_s=120))
                   for i, p in enumerate(args.encode_processes)}
        for server in servers.values():
            run(server.url, 2, 1, "inline", "png", side=side, tool=args.tool)  # the network loaded, pools started
        rows: dict[str, list[dict[str, Any]]] = {p: [] for p in servers}
        for k, (level, mode) in enumerate((level, mode) for level in args.levels for mode in args.modes):
            delivery, fmt = mode.split(":")
            for processes, server in list(servers.items())[:: 1 if k % 2 == 0 else -1]:
                rows[processes].append(run(server.url, level, args.calls, delivery, fmt, side=side,
                                           decode=args.decode, tool=args.tool, processes=args.client_processes))
                print(orjson.dumps({"encode_processes": processes, **rows[processes][-1]}).decode(), flush=True)
        report["servers"] = {f"encode_processes={p}": r for p, r in rows.items()}
    if not args.skip_front and args.tool == "super_resolution":
        report["front_mp_per_s"] = front_rate(side, args.levels, args.calls, device)
        for server_rows in report["servers"].values():
            for row in server_rows:
                row["over_front"] = round(row["mp_per_s"] / report["front_mp_per_s"][row["sessions"]], 3)
    print_report(report, args.json)


if __name__ == "__main__":
    main()
