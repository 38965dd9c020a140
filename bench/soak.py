"""Load and soak: N concurrent clients for M minutes, each running rollout-shaped sessions that mix every
tool, against a server on this machine. Reports throughput, latency percentiles, errors, and the server's
resident memory over time.

Bounded on purpose: loopback addresses only, at most 256 clients and 60 minutes.

Run:  .venv/bin/python -m bench.soak --clients 64 --minutes 10 [--store memory|redis] [--out FILE]
      (starts its own server, with SMFANet from ../shared/models/smfanet and one ingested document;
       --url http://127.0.0.1:PORT --pid PID soaks a server you started yourself)

Each client loops: create a session with a real photo and a text, then 12 calls in the default profile
(zoom_in ×3 with a zoom on a zoom, keypoint_zoom, lookback_reuse, super_resolution and magnify on small
regions with SMFANet, both document tools, two validators), one `act` in a seed profile (Groundlight's
`<tool>` text or MGPO's fenced JSON), one /v1/validate batch, a GET of an image, then release.
A 429 is honoured (wait Retry-After, try again) and counted apart; anything else unexpected is an error.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import random
import sys
import tempfile
import time
from collections import defaultdict
from ipaddress import ip_address
from pathlib import Path
from urllib.parse import urlparse

import httpx
from PIL import Image

from bench.common import RedisProcess, Server, percentile

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PHOTOS = ["LadyBird.jpg", "TwoWings.jpg", "Dragonfly_by_Bolly.jpg", "Wood.jpg", "Bridge_by_Sander_Klootwijk.jpg"]
MAX_CLIENTS, MAX_MINUTES = 256, 60
WARM_S = 60.0  # memory is judged from the end of the first minute ("once warm")
ANSWER = ("The ladybird sits on the left leaf. Its shell has seven spots.\n\n"
          "The background is out of focus. No other insect is visible.")
DOC_PAGES = [
    "Installation. Download the package and run the installer. Requirements: 8 GB of memory and Python 3.11.",
    "Configuration. Settings are read from environment variables. The port defaults to 8000.",
    "Keyboard shortcuts. Ctrl-L clears the screen, Ctrl-R searches the history, Ctrl-D closes the shell.",
    "Troubleshooting. If the server does not start, check that the port is free and the weights are installed.",
]


def loopback_only(url: str) -> None:
    host = urlparse(url).hostname or ""
    try:
        ok = host == "localhost" or ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise SystemExit(f"refusing to load {url}: the soak runs against loopback addresses only")


def photo_payloads(long_side: int = 1280) -> list[str]:
    """Real photos, resized as a trainer would send them; base64."""
    out = []
    for name in PHOTOS:
        img = Image.open(SHARED / "data" / "photos" / name).convert("RGB")
        img.thumbnail((long_side, long_side))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=90)
        out.append(base64.b64encode(buf.getvalue()).decode())
    return out


def make_document(path: Path) -> Path:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path), pagesize=A4)
    for number, text in enumerate(DOC_PAGES, start=1):
        pdf.setFont("Helvetica", 14)
        pdf.drawString(60, 780, f"Page {number}")
        words = text.split()
        for line, start in enumerate(range(0, len(words), 9)):
            pdf.drawString(60, 740 - 22 * line, " ".join(words[start:start + 9]))
        pdf.showPage()
    pdf.save()
    return path


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Stats:
    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.error_samples: list[str] = []
        self.overloaded = 0
        self.trajectories = 0

    def error(self, what: str, detail: str) -> None:
        self.errors[what] += 1
        if len(self.error_samples) < 20:
            self.error_samples.append(f"{what}: {detail[:300]}")


class Client:
    def __init__(self, http: httpx.AsyncClient, stats: Stats, photos: list[str], rng: random.Random):
        self.http, self.stats, self.photos, self.rng = http, stats, photos, rng

    async def request(self, label: str, method: str, path: str, *, expect: int = 200, **kw) -> httpx.Response | None:
        while True:
            started = time.perf_counter()
            try:
                response = await self.http.request(method, path, **kw)
            except httpx.HTTPError as exc:
                self.stats.error(label, f"{type(exc).__name__}: {exc}")
                return None
            if response.status_code == 429:  # back-pressure: wait as told, then again
                self.stats.overloaded += 1
                await asyncio.sleep(float(response.headers.get("retry-after", "1")))
                continue
            self.stats.latency[label].append(time.perf_counter() - started)
            if response.status_code != expect:
                self.stats.error(label, f"HTTP {response.status_code}: {response.text}")
                return None
            return response

    async def tool(self, sid: str, name: str, args: dict) -> dict | None:
        response = await self.request(name, "POST", f"/v1/sessions/{sid}/tools/{name}", json=args)
        if response is None:
            return None
        body = response.json()
        if not body["ok"]:
            self.stats.error(name, body["text"])
            return None
        return body

    async def trajectory(self) -> None:
        r = self.rng
        created = await self.request("create_session", "POST", "/v1/sessions", expect=201, json={
            "images": [{"data": r.choice(self.photos)}], "texts": {"answer": ANSWER}})
        if created is None:
            return
        sid = created.json()["session_id"]
        x, y = r.randint(0, 500), r.randint(0, 500)
        first = await self.tool(sid, "zoom_in", {"image": 0, "bbox_2d": [x, y, x + 400, y + 400]})
        if first:
            await self.tool(sid, "zoom_in", {"image": first["images"][0]["key"], "bbox_2d": [100, 100, 700, 700]})
        await self.tool(sid, "zoom_in", {"image": "original_image", "bbox_2d": [x, y, x + 250, y + 300]})
        await self.tool(sid, "keypoint_zoom", {"image": 0, "keypoint": [r.randint(100, 900), r.randint(100, 900)]})
        await self.tool(sid, "lookback_reuse", {"image": 0, "reason": "compare with the original"})
        sx, sy = r.randint(0, 850), r.randint(0, 850)
        await self.tool(sid, "super_resolution", {"image": 0, "bbox_2d": [sx, sy, sx + 120, sy + 120], "scale": 2})
        await self.tool(sid, "magnify", {"image": 0, "boxes": [[sx, sy, sx + 100, sy + 100]], "scale": 2})
        await self.tool(sid, "doc_page_retrieval_by_query", {"filename": "manual", "query": "keyboard shortcuts"})
        await self.tool(sid, "doc_page_retrieval_by_index", {"filename": "manual", "image_idx": r.randint(1, 4)})
        await self.tool(sid, "check_whether_response_paragraph_number_in_range",
                        {"response": "answer", "lower_bound": 1, "upper_bound": 3})
        await self.tool(sid, "check_whether_response_word_count_in_range",
                        {"response": "answer", "lower_bound": 10, "upper_bound": 60})
        await self.request("get_image", "GET", f"/v1/sessions/{sid}/images/observation_1")
        await self.request("release", "DELETE", f"/v1/sessions/{sid}", expect=204)
        await self.seed_profile_act()
        await self.request("validate_batch", "POST", "/v1/validate", json={"items": [
            {"tool": "check_whether_response_sentence_number_in_range",
             "params": {"lower_bound": 1, "upper_bound": 5}, "text": ANSWER},
            {"tool": "check_whether_response_not_contain_substring", "params": {"substring": "wasp"},
             "text": ANSWER}]})
        self.stats.trajectories += 1

    async def seed_profile_act(self) -> None:
        profile = self.rng.choice(["groundlight", "mgpo"])
        created = await self.request("create_session", "POST", "/v1/sessions", expect=201, json={
            "profile": profile, "images": [{"data": self.rng.choice(self.photos)}]})
        if created is None:
            return
        sid = created.json()["session_id"]
        if profile == "groundlight":
            x = self.rng.randint(50, 600)
            text = f"<think>look closer</think>\n<tool>\nname: zoom\nkeypoint: [{x}, 300]\n</tool>"
        else:
            text = 'The sign is small.\n```json\n[{"bbox_2d": [100, 100, 400, 300], "label": "sign"}]\n```'
        response = await self.request(f"act:{profile}", "POST", f"/v1/sessions/{sid}/act", json={"text": text})
        if response is not None and not all(result["ok"] for result in response.json()["results"]):
            self.stats.error(f"act:{profile}", response.text)
        await self.request("release", "DELETE", f"/v1/sessions/{sid}", expect=204)


async def soak(url: str, pid: int, clients: int, seconds: float, seed: int) -> dict:
    stats = Stats()
    photos = photo_payloads()
    samples: list[tuple[float, float]] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:
        started = time.monotonic()
        deadline = started + seconds

        async def run(index: int) -> None:
            client = Client(http, stats, photos, random.Random(seed * 1000 + index))
            while time.monotonic() < deadline:
                await client.trajectory()

        async def sample_memory() -> None:
            while time.monotonic() < deadline:
                samples.append((time.monotonic() - started, rss_mib(pid)))
                await asyncio.sleep(5)

        sampler = asyncio.create_task(sample_memory())
        await asyncio.gather(*(run(i) for i in range(clients)))
        wall = time.monotonic() - started
        sampler.cancel()
    samples.append((wall, rss_mib(pid)))
    calls = sum(len(v) for v in stats.latency.values())
    everything = [t for values in stats.latency.values() for t in values]
    warm = [m for t, m in samples if t >= WARM_S] or [samples[-1][1]]
    per_minute = {}
    for t, m in samples:
        per_minute[int(t // 60)] = m  # the last sample of each minute
    # One sample swings ±10 % with what 64 sessions hold at that instant, so the trend compares window means:
    # the two minutes after warm-up against the last two minutes.
    early = [m for t, m in samples if WARM_S <= t < WARM_S + 120] or warm
    late = [m for t, m in samples if t >= wall - 120] or warm
    return {
        "clients": clients, "seconds": round(wall, 1), "requests": calls, "trajectories": stats.trajectories,
        "requests_per_s": round(calls / wall, 2), "trajectories_per_min": round(stats.trajectories / wall * 60, 1),
        "p50_ms": round(percentile(everything, 50) * 1000, 1), "p99_ms": round(percentile(everything, 99) * 1000, 1),
        "errors": sum(stats.errors.values()), "errors_by_call": dict(stats.errors),
        "error_samples": stats.error_samples,
        "overloaded_429": stats.overloaded,
        "rss_mib": {"first": round(samples[0][1], 1), "warm_start": round(warm[0], 1), "end": round(samples[-1][1], 1),
                    "warm_max": round(max(warm), 1), "warm_min": round(min(warm), 1),
                    "end_over_warm_start": round(samples[-1][1] / warm[0], 3),
                    "warm_window_mean": round(sum(early) / len(early), 1),
                    "last_window_mean": round(sum(late) / len(late), 1),
                    "last_over_warm_window": round((sum(late) / len(late)) / (sum(early) / len(early)), 3),
                    "per_minute": {str(k): round(v, 1) for k, v in sorted(per_minute.items())},
                    "series": [[round(t, 1), round(m, 1)] for t, m in samples]},
        "by_call": {label: {"count": len(v), "p50_ms": round(percentile(v, 50) * 1000, 1),
                            "p99_ms": round(percentile(v, 99) * 1000, 1)}
                    for label, v in sorted(stats.latency.items())},
    }


def start_stack(store: str, work: Path) -> tuple[Server, RedisProcess | None]:
    env = {"TOOLSERVER_DATA_DIR": str(work / "data"), "TOOLSERVER_SR_MODEL_DIR": str(SHARED / "models" / "smfanet"),
           "TOOLSERVER_LOG_LEVEL": "warning", "HF_HUB_OFFLINE": "1",
           # As deploy/entrypoint.sh sets it (see BENCHMARKS.md: fewer glibc arenas, no RSS creep).
           "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2")}
    redis = None
    if store == "redis":
        redis = RedisProcess(work)
        env |= {"TOOLSERVER_SESSION_STORE": "redis", "TOOLSERVER_REDIS_URL": redis.url}
    server = Server(env)
    pdf = make_document(work / "manual.pdf")
    with open(pdf, "rb") as f:
        r = httpx.post(f"{server.url}/v1/documents?wait=true", files={"file": ("manual.pdf", f)}, timeout=600)
    r.raise_for_status()
    return server, redis


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--store", choices=["memory", "redis"], default="memory")
    parser.add_argument("--url", help="soak a running server (loopback only) instead of starting one")
    parser.add_argument("--pid", type=int, help="its process id, for resident memory (with --url)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not 1 <= args.clients <= MAX_CLIENTS or not 0 < args.minutes <= MAX_MINUTES:
        raise SystemExit(f"clients must be 1..{MAX_CLIENTS} and minutes in (0, {MAX_MINUTES}]")
    work = Path(tempfile.mkdtemp(prefix="toolserver-soak-"))
    server = redis = None
    if args.url:
        if args.pid is None:
            raise SystemExit("--url needs --pid (the server's process id, for its resident memory)")
        url, pid = args.url, args.pid
    else:
        server, redis = start_stack(args.store, work)
        url, pid = server.url, server.proc.pid
    loopback_only(url)
    try:
        result = asyncio.run(soak(url, pid, args.clients, args.minutes * 60, args.seed))
    finally:
        if server is not None:
            server.__exit__()
        if redis is not None:
            redis.stop()
    result = {"store": args.store if not args.url else "external", "cpu_count": os.cpu_count(), **result}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if result["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
