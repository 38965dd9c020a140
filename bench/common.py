"""Shared pieces of the benchmarks: test photos, a server process, percentiles."""

from __future__ import annotations

import io
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
# The shared photographs; TOOLSERVER_BENCH_PHOTOS names a copy where ../shared is not beside the checkout (a GPU host).
PHOTOS = Path(os.environ.get("TOOLSERVER_BENCH_PHOTOS", ROOT.parent / "shared" / "data" / "photos"))


def photo_4000x3000() -> bytes:
    """A real 4000x3000 photograph (centre of Dragonfly_by_Bolly, 4224x3168), as a JPEG q95."""
    img = Image.open(PHOTOS / "Dragonfly_by_Bolly.jpg").convert("RGB")
    left, top = (img.width - 4000) // 2, (img.height - 3000) // 2
    buf = io.BytesIO()
    img.crop((left, top, left + 4000, top + 3000)).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50_ms": percentile(values, 50) * 1e3, "p99_ms": percentile(values, 99) * 1e3,
            "mean_ms": statistics.fmean(values) * 1e3}


def node_root(cmdlines: list[str]) -> Path | None:
    """A node's private directory (`toolserver serve --workers N`), found among its processes' command lines through
    its Redis's unix socket (Redis rewrites its title: "redis-server unixsocket:/.../redis.sock"); None for one
    process, which has none."""
    for cmdline in cmdlines:
        sockets = [w for w in cmdline.split() if w.startswith("unixsocket:")]
        if sockets:
            return Path(sockets[0].split(":", 1)[1]).parent
    return None


def file_bytes(root: Path) -> int:
    """The pages allocated to the files under `root` (a node's, on tmpfs: memory no process's PSS counts unmapped)."""
    total = 0
    for path in root.rglob("*"):
        try:
            total += path.lstat().st_blocks * 512 if path.is_file() else 0
        except OSError:  # removed meanwhile
            continue
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`toolserver serve` in a child process on a free loopback port."""

    def __init__(self, env: dict[str, str] | None = None, port: int | None = None, start_timeout_s: float = 30.0):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # One process unless asked (`TOOLSERVER_WORKERS`): the benches compare one server with its peers.
        full_env = {**os.environ, "TOOLSERVER_PORT": str(self.port), "TOOLSERVER_WORKERS": "1", **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "toolserver.cli", "serve", "--log-level", "warning"],
                                     env=full_env)
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        self.proc.kill()
        raise RuntimeError("server did not start")

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(10)


async def abba(call_a, call_b, iterations: int, warmup: int = 2) -> tuple[list[float], list[float]]:
    """Time two async calls alternately, swapping the order every iteration (ABBA).

    On a 2-core machine whichever call runs second is measurably slower, so a fixed order would bias a ratio.
    Returns the wall times of A and B after `warmup` rounds.
    """
    times_a: list[float] = []
    times_b: list[float] = []

    async def timed(call, out: list[float]) -> None:
        started = time.perf_counter()
        await call()
        out.append(time.perf_counter() - started)

    for i in range(iterations + warmup):
        pair = ((call_a, times_a), (call_b, times_b))
        for call, out in pair if i % 2 == 0 else pair[::-1]:
            await timed(call, out)
    return times_a[warmup:], times_b[warmup:]


class RedisProcess:
    """A throwaway `redis-server` on a spare loopback port (no persistence), for benchmarks."""

    def __init__(self, directory: Path):
        from toolserver.stores.redis_parts import wait_for_redis

        port = free_port()
        self.url = f"redis://127.0.0.1:{port}/0"
        self.proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
                                      "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(directory)],
                                     stdout=subprocess.DEVNULL)
        wait_for_redis(self.url)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class ChromaProcess:
    """A throwaway Chroma server (`chroma run`, from the docs extra) on a spare loopback port, for benchmarks."""

    def __init__(self, directory: Path):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        chroma = Path(sys.executable).parent / "chroma"
        self.proc = subprocess.Popen([str(chroma), "run", "--path", str(directory), "--host", "127.0.0.1", "--port",
                                      str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/api/v2/heartbeat", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("the Chroma server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def print_report(report: dict, path: Path | None) -> None:
    """A benchmark's figures as JSON on stdout, and in `path` when given (`--json`)."""
    import json

    text = json.dumps(report, indent=2)
    print(text)
    if path:
        path.write_text(text)
