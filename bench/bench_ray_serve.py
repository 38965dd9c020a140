"""toolserver on Ray Serve (two nodes on this machine, bench/ray_cluster.py) against `toolserver serve` (uvicorn),
one server alive at a time, the same Redis behind both.

    .venv/bin/python -m bench.bench_ray_serve [--only overhead sr affinity] [--json out.json]

- overhead: the latency Serve adds per call, one call at a time: a trivial route (`GET /healthz`) and a 1.3 MB
  body (`POST /v1/validate`, one cheap check on a 1.3 MB text), p50 and p99 of each; through Serve's Python proxy
  and through its HAProxy ingress (`RAY_SERVE_ENABLE_HA_PROXY=1`, what docs/deploy.md recommends).
- sr: super-resolution calls per second at 1, 4 and 16 concurrent sessions (each its own image; x2 of a 250x250
  crop, one tile): through the SMFANet deployment with the server's batching rule, and through it unbatched
  (`TOOLSERVER_SR_BATCH_CALLS=1`), each beside a uvicorn server running the model in process (both up at once,
  measured alternately); the outputs must be the same bytes. Behind HAProxy, as docs/deploy.md advises.
- affinity: 48 sessions of 6 calls each through the two ingress replicas, without and with Ray's consistent-hash
  router on `X-Session-ID`: the share of sessions whose every call one replica answered.
The race on verl-tool's own workload through Serve is `bench.bench_race_verl_tool --serve`.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from bench.common import PHOTOS, ChromaProcess, RedisProcess, Server, free_port, percentile, print_report

ROOT = Path(__file__).resolve().parents[1]


class ServeApp:
    """bench/ray_cluster.py in its own process group: the cluster, the app, and its shutdown on exit."""

    def __init__(self, env: dict[str, str], *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="toolserver-ray-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.ray_cluster", "--port", str(self.port), *extra],
                                     cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, start_new_session=True)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("READY "):
                return
        raise RuntimeError(f"the Ray app did not start; log: {self.log.name}")

    def __enter__(self) -> ServeApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


def base_env(redis_url: str, chroma_url: str, data_dir: Path, prefix: str) -> dict[str, str]:
    return {"TOOLSERVER_SESSION_STORE": "redis", "TOOLSERVER_REDIS_URL": redis_url, "TOOLSERVER_REDIS_PREFIX": prefix,
            "TOOLSERVER_CHROMA_URL": chroma_url, "TOOLSERVER_DATA_DIR": str(data_dir),
            "TOOLSERVER_LOG_LEVEL": "warning", "HF_HUB_OFFLINE": "1", "TOOLSERVER_SANDBOX_START": "first_use",
            "TOOLSERVER_MCP_SESSIONS": "shared"}


# -- overhead ---------------------------------------------------------------------------------------------------
def latencies(url: str, n: int) -> dict[str, float]:
    text = ("word " * 270_000)[: 1_300_000]
    body = json.dumps({"items": [{"tool": "check_whether_whole_response_end_with_certain_substring",
                                  "text": text, "params": {"substring": "word"}}]})
    out: dict[str, float] = {}
    with httpx.Client(base_url=url, timeout=60) as http:
        for name, send in (("trivial", lambda: http.get("/healthz")),
                           ("body_1_3mb", lambda: http.post("/v1/validate", content=body,
                                                            headers={"content-type": "application/json"}))):
            for _ in range(10):
                send().raise_for_status()
            times = []
            for _ in range(n):
                started = time.perf_counter()
                send().raise_for_status()
                times.append(time.perf_counter() - started)
            out[f"{name}_p50_ms"] = percentile(times, 50) * 1e3
            out[f"{name}_p99_ms"] = percentile(times, 99) * 1e3
    return out


# -- super-resolution -------------------------------------------------------------------------------------------
def sr_rate(url: str, sessions: int, calls: int) -> tuple[float, str]:
    """Calls per second with `sessions` concurrent sessions; the first result's image (base64)."""
    photo = Image.open(PHOTOS / "TwoWings.jpg").convert("RGB")
    with httpx.Client(base_url=url, timeout=120) as http:
        sids = []
        for i in range(sessions):
            img = photo.crop((i * 10, 0, i * 10 + 640, 480))
            buf = io.BytesIO()
            img.save(buf, format="PNG")
            sids.append(http.post("/v1/sessions", json={"images": [{"data": base64.b64encode(buf.getvalue())
                                                                    .decode()}]}).json()["session_id"])
    first: list[str] = []
    barrier = threading.Barrier(sessions)

    def session(sid: str) -> None:
        with httpx.Client(base_url=url, timeout=300) as http:
            barrier.wait()
            for _ in range(calls):
                result = http.post(f"/v1/sessions/{sid}/tools/super_resolution", json={
                    "image": "original_image", "bbox_2d": [0, 0, 250, 250], "scale": 2}).json()
                assert result["ok"] and result["meta"]["method"] == "smfanet", result
                if sid == sids[0] and not first:
                    first.append(result["images"][0]["data"])

    threads = [threading.Thread(target=session, args=(sid,)) for sid in sids]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sessions * calls / (time.perf_counter() - started), first[0]


def bench_sr(env: dict[str, str], levels: list[int], calls: int, rounds: int) -> dict[str, Any]:
    """Each Serve variant beside a uvicorn server, both up at once, measured alternately (ABBA) at each level, so
    that the load of the moment weighs on both alike; medians of `rounds` pairs."""
    report: dict[str, Any] = {}
    images: dict[str, str] = {}
    variants = (("batched", ()), ("unbatched", ("--set", "smfanet:TOOLSERVER_SR_BATCH_CALLS=1")))
    for name, extra in variants:
        with Server(env) as uvicorn, ServeApp(env, "--models", "smfanet", "--haproxy", *extra) as app:
            for url in (uvicorn.url, app.url):
                sr_rate(url, 2, 1)  # the network loaded, the engine's workers started
            rows = {}
            for level in levels:
                rates: dict[str, list[float]] = {"uvicorn": [], "serve": []}
                for r in range(rounds):
                    order = [("uvicorn", uvicorn.url), ("serve", app.url)]
                    for who, url in order if r % 2 == 0 else order[::-1]:
                        rate, images[f"{name}/{who}"] = sr_rate(url, level, calls)
                        rates[who].append(rate)
                u, v = statistics.median(rates["uvicorn"]), statistics.median(rates["serve"])
                rows[level] = {"uvicorn_calls_s": round(u, 3), "serve_calls_s": round(v, 3), "ratio": round(v / u, 3)}
                print(f"SR {name} deployment vs in-process, sessions={level}: {v:.2f} vs {u:.2f} calls/s "
                      f"({v / u:.2f}x)", flush=True)
            report[f"serve_{name}"] = rows
    report["identical_outputs"] = len(set(images.values())) == 1
    return report


# -- affinity ---------------------------------------------------------------------------------------------------
def sticky_share(url: str, sessions: int = 48, calls: int = 6) -> float:
    photo = Image.open(PHOTOS / "TwoWings.jpg").convert("RGB").resize((320, 240))
    buf = io.BytesIO()
    photo.save(buf, format="PNG")
    data = base64.b64encode(buf.getvalue()).decode()
    sticky = 0
    with httpx.Client(base_url=url, timeout=60) as http:
        for _ in range(sessions):
            sid = http.post("/v1/sessions", json={"images": [{"data": data}]}).json()["session_id"]
            seen = set()
            for i in range(calls):
                response = http.post(f"/v1/sessions/{sid}/tools/zoom_in", headers={"X-Session-ID": sid},
                                     json={"image": "original_image", "bbox_2d": [0, 0, 500 + i, 500]})
                seen.add(response.headers["x-toolserver-replica"])
            sticky += len(seen) == 1
    return sticky / sessions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=["overhead", "sr", "affinity"])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2, help="alternated measurements of each side per level")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="toolserver-bench-ray-"))
    redis = RedisProcess(work)
    report: dict[str, Any] = {}
    chroma = ChromaProcess(work / "chroma")
    try:
        run_all(args, base_env(redis.url, chroma.url, work / "data", "bench"), report)
    finally:
        redis.stop()
        chroma.stop()
    print_report(report, args.json)


def run_all(args: argparse.Namespace, env: dict[str, str], report: dict[str, Any]) -> None:
    if "overhead" in args.only:
        with Server(env) as server:
            uvicorn = latencies(server.url, args.requests)
        with ServeApp(env, "--models", "") as app:
            serve = latencies(app.url, args.requests)
        with ServeApp(env, "--models", "", "--haproxy") as app:
            haproxy = latencies(app.url, args.requests)
        report["overhead"] = {"uvicorn": uvicorn, "serve": serve, "serve_haproxy": haproxy,
                              "added_ms": {k: round(serve[k] - uvicorn[k], 2) for k in uvicorn},
                              "added_ms_haproxy": {k: round(haproxy[k] - uvicorn[k], 2) for k in uvicorn}}
        print(json.dumps(report["overhead"]), flush=True)
    if "sr" in args.only:
        report["sr"] = bench_sr(env, args.levels, args.calls, args.rounds)
    if "affinity" in args.only:
        shares = {}
        for name, extra in (("round_robin", ()), ("consistent_hash", ("--affinity",))):
            with ServeApp(env, "--models", "", *extra) as app:
                shares[name] = round(sticky_share(app.url), 3)
        report["affinity_sticky_share"] = shares
        print(json.dumps(shares), flush=True)

if __name__ == "__main__":
    main()
