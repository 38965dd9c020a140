"""One node, all of it: `toolserver serve --workers N` against its own limits, measured in one run.

Rows (each beside the limit it is judged against, in the same run, on the same machine):
- `zoom_in` (default profile: rel1000 boxes, JPEG by ref; GRPO groups of 8 sessions sharing a photograph) at
  16 / 128 / 512 sessions x `--calls` calls: calls/s, p50, the cores the server's processes kept busy, and the
  server's peak memory (PSS summed over its processes, and RSS summed, which counts shared pages once per process;
  and the node's files on tmpfs, its shared pixels, which no process's PSS counts)
  for N workers, for one process (today's server) and for one process pinned to one core (`taskset`);
- super-resolution x4 over HTTP (inline PNG, inline JPEG, the zero-copy delivery where the server has one) at
  1 / 16 / 64 sessions, beside the in-process front, the engine alone and the network's forward
  (`bench.bench_sr_http`, `bench.bench_models`), when `--sr` is given.

The load comes from `--clients` processes (default: a quarter of the cores), so that the client is not what
limits a node's rate; they are on the same host and take cores from the server, as a trainer's would. They send
their calls with `bench.loadgen` (raw keep-alive HTTP/1.1) rather than httpx, whose CPU per call would take several
of the cores measured; each row gives the server's CPU per call and the clients'.

Run: .venv/bin/python -m bench.bench_node [--workers auto] [--sessions 16 128 512] [--calls 12] [--sr]
     [--out node.json]   (on a 2-core machine: --workers 2 --sessions 16 64 --calls 6; ~2 minutes)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import PHOTOS, percentile
from bench.node_server import NodeServer
from toolserver.node import available_cores

GROUP = 8  # sessions of a GRPO group share one photograph

def photos() -> list[str]:
    names = sorted(p for p in PHOTOS.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))[:4]
    return [base64.b64encode(p.read_bytes()).decode() for p in names]


def create_sessions(urls: list[str], count: int, images: list[str]) -> list[tuple[str, str]]:
    """`count` sessions, a GRPO group of 8 per photograph, created by 16 threads; session i on `urls[i % len]`. Each
    as (the server's URL, the session's id)."""
    from concurrent.futures import ThreadPoolExecutor

    body = {"output": {"format": "jpeg", "delivery": "ref"}}

    def one(i: int) -> tuple[str, str]:
        url = urls[i % len(urls)]
        with httpx.Client(base_url=url, timeout=300) as client:
            r = client.post("/v1/sessions", json={**body, "images": [{"data": images[(i // GROUP) % len(images)]}]})
            r.raise_for_status()
            return url, str(r.json()["session_id"])

    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(one, range(count)))


def _client_process(targets: list[tuple[str, str]], calls: int, seed: int, start_at: float, out: Any) -> None:
    """One load process: each of its sessions makes `calls` zoom_in calls in turn on a connection of its own."""
    from urllib.parse import urlsplit

    from bench.loadgen import RawConnection, answered_ok

    async def session_calls(url: str, sid: str, rng: random.Random, lat: list[float]) -> int:
        errors = 0
        where = urlsplit(url)
        connection = RawConnection(where.hostname or "127.0.0.1", where.port or 80)
        try:
            for _ in range(calls):
                x, y = rng.randint(0, 700), rng.randint(0, 700)
                box = [x, y, x + rng.randint(100, 300), y + rng.randint(100, 300)]
                t = time.perf_counter()
                status, body = await connection.post_json(f"/v1/sessions/{sid}/tools/zoom_in",
                                                          {"image": 0, "bbox_2d": box})
                lat.append(time.perf_counter() - t)
                errors += int(not answered_ok(status, body))
        finally:
            await connection.close()
        return errors

    async def run() -> dict:
        rng = random.Random(seed)
        lat: list[float] = []
        await asyncio.sleep(max(0.0, start_at - time.time()))
        cpu = time.process_time()
        errors = await asyncio.gather(*(session_calls(url, sid, rng, lat) for url, sid in targets))
        return {"latencies": lat, "errors": sum(errors), "ended": time.time(), "cpu_s": time.process_time() - cpu}

    out.put(asyncio.run(run()))


def _cpu(fleet: list[NodeServer]) -> tuple[float, float]:
    both = [server.cpu_seconds() for server in fleet]
    return sum(c for c, _ in both), sum(r for _, r in both)


def _memory(fleet: list[NodeServer]) -> tuple[tuple[int, int], int]:
    both = [server.memory() for server in fleet]
    return (sum(p for p, _ in both), sum(r for _, r in both)), sum(server.node_files() for server in fleet)


def zoom_load(servers: NodeServer | list[NodeServer], sessions: int, calls: int, clients: int,
              images: list[str]) -> dict[str, Any]:
    """The zoom_in load on one server, or spread over several (independent processes: session i on the i-th)."""
    fleet = servers if isinstance(servers, list) else [servers]
    ids = create_sessions([server.url for server in fleet], sessions, images)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    clients = max(1, min(clients, sessions))
    start_at = time.time() + 3.0  # every client process ready before the clock starts
    procs = [ctx.Process(target=_client_process, args=(ids[i::clients], calls, i, start_at, queue))
             for i in range(clients)]
    for p in procs:
        p.start()
    peak = [0, 0, 0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            (pss, rss), files = _memory(fleet)
            peak[:] = max(peak[0], pss), max(peak[1], rss), max(peak[2], files)

    sampler = threading.Thread(target=sample, daemon=True)
    time.sleep(max(0.0, start_at - time.time()))
    cpu0, redis0 = _cpu(fleet)
    sampler.start()
    results = [queue.get(timeout=1800) for _ in procs]
    wall = max(r["ended"] for r in results) - start_at
    cpu, redis = (b - a for a, b in zip((cpu0, redis0), _cpu(fleet), strict=True))
    stop.set()
    sampler.join()
    (pss, rss), files = _memory(fleet)  # a load shorter than the sampler's period, once
    peak[:] = max(peak[0], pss), max(peak[1], rss), max(peak[2], files)
    for p in procs:
        p.join()
    lat = [x for r in results for x in r["latencies"]]
    with httpx.Client(timeout=60) as client:
        for url, sid in ids:
            client.delete(f"{url}/v1/sessions/{sid}")
    return {"sessions": sessions, "calls": len(lat), "errors": sum(r["errors"] for r in results),
            "calls_per_s": round(len(lat) / wall, 1), "p50_ms": round(1000 * percentile(lat, 50), 2),
            "p95_ms": round(1000 * percentile(lat, 95), 2), "cores_busy": round(cpu / wall, 2),
            "server_cpu_ms_per_call": round(1000 * cpu / max(1, len(lat)), 2),
            "redis_cpu_ms_per_call": round(1000 * redis / max(1, len(lat)), 3),
            "client_cpu_ms_per_call": round(1000 * sum(r["cpu_s"] for r in results) / max(1, len(lat)), 3),
            "peak_pss_mb": round(peak[0] / 2**20), "peak_rss_mb": round(peak[1] / 2**20),
            "peak_node_files_mb": round(peak[2] / 2**20)}


def profile(server: NodeServer, out: Path, seconds: int, clients: int, images: list[str]) -> None:
    """py-spy's samples of every process of the node (collapsed stacks, `--format raw`) under 128 sessions of
    load, taken after the measured rows so that they do not slow those."""
    spy_exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))  # or the venv's own
    spy = subprocess.Popen([spy_exe, "record", "--pid", str(server.proc.pid),
                            "--subprocesses", "--nonblocking", "--rate", "97", "--format", "raw", "-o", str(out),
                            "-d", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while spy.poll() is None:
        zoom_load(server, 128, 24, clients, images)
    print(json.dumps({"profile": str(out), "py_spy_exit": spy.returncode}), flush=True)


def zoom_rows(workers: int, levels: list[int], calls: int, clients: int, scratch: Path,
              profile_out: Path | None = None, independent: bool = True, node_only: bool = False) -> dict[str, Any]:
    """The zoom_in rows: N workers, one process, one process pinned to one core, and (`independent`, where taskset
    is) N independent single-process servers each pinned to a core of its own, the sessions dealt among them: the
    most N cores give this load with nothing shared (each decodes its sessions' photographs itself)."""
    images = photos()
    rows: dict[str, Any] = {}
    setups = [(f"{workers} workers", workers, None), ("1 process", 1, None), ("1 process on 1 core", 1, 0)]
    if workers == 1:
        setups = setups[1:]
    elif node_only:  # the N-worker row alone (an A/B of two checkouts: TOOLSERVER_BENCH_SERVER_TREE)
        setups = setups[:1]
    elif independent:
        setups.append((f"{workers} independent processes, a core each", workers, -1))
    for label, n, pin in setups:
        if pin is not None and shutil.which("taskset") is None:
            continue
        where = scratch / label.replace(" ", "_").replace(",", "")
        if pin == -1:  # started side by side: each waits for its own readiness
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(n) as pool:
                fleet = list(pool.map(lambda i, w=where: NodeServer(1, w / str(i), i % available_cores()), range(n)))
        else:
            fleet = [NodeServer(n, where, pin)]
        try:
            zoom_load(fleet, min(levels), 2, clients, images)  # warm: kernels, caches, connections
            rows[label] = [zoom_load(fleet, s, calls, clients, images) for s in levels]
            print(json.dumps({label: rows[label]}), flush=True)
            if profile_out is not None and n == workers and pin is None:
                profile(fleet[0], profile_out, 12, clients, images)
        finally:
            for server in fleet:
                server.stop()
    return rows


def ratios(rows: dict[str, Any], workers: int, levels: list[int]) -> dict[str, Any]:
    """What the acceptance reads: N workers against N x one pinned core, and against today's single process."""
    node, single, pinned = rows.get(f"{workers} workers"), rows.get("1 process"), rows.get("1 process on 1 core")
    apart = rows.get(f"{workers} independent processes, a core each")
    out: dict[str, Any] = {}
    for i, s in enumerate(levels):
        row: dict[str, Any] = {}
        if node and pinned:
            row["vs_cores_x_pinned"] = round(node[i]["calls_per_s"] / (workers * pinned[i]["calls_per_s"]), 2)
        if node and apart:
            row["vs_independent_pinned"] = round(node[i]["calls_per_s"] / apart[i]["calls_per_s"], 2)
            row["independent_vs_cores_x_pinned"] = round(
                apart[i]["calls_per_s"] / (workers * pinned[i]["calls_per_s"]), 2) if pinned else None
        if node and single:
            row["vs_one_process"] = round(node[i]["calls_per_s"] / single[i]["calls_per_s"], 2)
            row["pss_vs_one_process"] = round(node[i]["peak_pss_mb"] / max(1, single[i]["peak_pss_mb"]), 2)
            with_files = node[i]["peak_pss_mb"] + node[i].get("peak_node_files_mb", 0)
            row["pss_and_node_files_vs_one_process"] = round(with_files / max(1, single[i]["peak_pss_mb"]), 2)
        out[str(s)] = row
    return out


def sr_rows(workers: int, levels: list[int], calls: int, side: int, scratch: Path, clients: int = 1) -> dict[str, Any]:
    """Super-resolution over HTTP on the node (bench.bench_sr_http, its sessions shared by `clients` client
    processes), then, with the node stopped, its limits on the same crops in this process: the in-process front, the
    engine alone and the network's forward."""
    import torch

    from bench import bench_sr_http

    device = "cuda" if torch.cuda.is_available() else "cpu"
    shm = Path(bench_sr_http._tmpfs() or scratch) / f"bench-node-shm-{os.getpid()}"
    server = NodeServer(workers, scratch / "sr", env=bench_sr_http._server_env(shm, None))
    out: dict[str, Any] = {"device": device, "side": side, "out_side": 4 * side, "client_processes": clients}
    try:
        bench_sr_http.run(server.url, 2, 1, "inline", "png", side=side)  # every model host loaded
        for delivery, fmt in [("inline", "png"), ("inline", "jpeg")] + [(d, "png") for d in bench_sr_http.ZERO_COPY]:
            out[f"{delivery}/{fmt}"] = [bench_sr_http.run(server.url, s, calls, delivery, fmt, side=side,
                                                          processes=clients) for s in levels]
            print(json.dumps({f"sr {delivery}/{fmt}": out[f"{delivery}/{fmt}"]}), flush=True)
    finally:
        server.stop()
        shutil.rmtree(shm, ignore_errors=True)
    out["front_mp_per_s"] = bench_sr_http.front_rate(side, levels, calls, device)
    out.update(bench_sr_http.engine_rate(side, device))
    print(json.dumps({k: v for k, v in out.items() if "/" not in k}), flush=True)
    return out


def sr_ratios(sr: dict[str, Any], levels: list[int]) -> dict[str, Any]:
    """What the acceptance reads: HTTP (inline PNG) over the front at the most sessions, the front over the engine
    alone, and one call's p50 at one session."""
    top = max(levels)
    inline = {row["sessions"]: row for row in sr["inline/png"]}
    return {"inline_png_vs_front": round(inline[top]["mp_per_s"] / sr["front_mp_per_s"][top], 2),
            "front_vs_engine": round(sr["front_mp_per_s"][top] / sr["engine_mp_per_s"], 2),
            "one_call_p50_ms": inline[min(levels)]["p50_ms"]}


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="auto")
    parser.add_argument("--sessions", type=int, nargs="+", default=[16, 128, 512])
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--clients", type=int, default=0, help="load processes (default: a quarter of the cores)")
    parser.add_argument("--sr", action="store_true", help="also the super-resolution rows")
    parser.add_argument("--sr-sessions", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--sr-calls", type=int, default=6)
    parser.add_argument("--sr-side", type=int, default=0, help="SR crop side (default: 256 on CUDA, else 48)")
    parser.add_argument("--skip-zoom", action="store_true", help="only the super-resolution rows")
    parser.add_argument("--no-independent", action="store_true",
                        help="without the row of N independent single-process servers, a core each")
    parser.add_argument("--node-only", action="store_true", help="only the N-worker zoom_in row (no ratios)")
    parser.add_argument("--profile", type=Path, help="py-spy's collapsed stacks of the N-worker node under load")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cores = available_cores()
    workers = cores if args.workers == "auto" else int(args.workers)
    clients = args.clients or max(1, cores // 4)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-node-") as tmp:
        scratch = Path(tmp)
        report: dict[str, Any] = {"cores": cores, "workers": workers, "client_processes": clients,
                                  "zoom_in": {}}
        if not args.skip_zoom:
            report["zoom_in"] = zoom_rows(workers, args.sessions, args.calls, clients, scratch, args.profile,
                                          not args.no_independent, args.node_only)
            if not args.node_only:
                report["zoom_in_ratios"] = ratios(report["zoom_in"], workers, args.sessions)
        if args.sr:
            side = args.sr_side or (256 if _has_cuda() else 48)
            report["super_resolution"] = sr_rows(workers, args.sr_sessions, args.sr_calls, side, scratch, clients)
            report["super_resolution_ratios"] = sr_ratios(report["super_resolution"], args.sr_sessions)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if report["zoom_in"]:
        print("median p50 across rows:", statistics.median(
            r["p50_ms"] for rows in report["zoom_in"].values() for r in rows), file=sys.stderr)


if __name__ == "__main__":
    main()
