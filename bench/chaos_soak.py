"""Chaos soak: many clients calling tools through nginx into two replicas that share one Redis, while Redis
stalls every minute and one replica restarts midway. Checks that nothing is lost or doubled and that latency
comes back after each fault.

Run:  .venv/bin/python -m bench.chaos_soak --clients 64 --minutes 10 [--stall-s 2] [--json FILE]

The topology is docker-compose's scale profile started from plain processes (as tests/test_scaleout.py does):
`redis-server`, two `toolserver serve` replicas with the Redis store, nginx with deploy/nginx's template.
Each client uses toolserver's AsyncClient (its retries and idempotency keys on, as shipped) and loops over
sessions of 40 `zoom_in` calls on a real photo; at the end of each session it compares what it was told (the
observation keys, in order) with what the session holds (its images, its call count, its call log), then
releases it. Faults: Redis is SIGSTOPped for `--stall-s` every minute (first at 50 s); at half time replica 1
gets SIGTERM (a graceful drain) and is started again.

Reported: calls, client-visible errors (after retries), 5xx answers the servers gave (retried by the client
or by nginx), sessions with lost or doubled observations, p50/p99 latency, and for each fault how long after
it ended the p99 of one-second windows came back under 1.5x its baseline (the p99 before the first fault).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import random
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from PIL import Image

from bench.common import RedisProcess, Server, percentile, print_report
from tests.test_scaleout import start_nginx
from toolserver.client import AsyncClient

ROOT = Path(__file__).resolve().parents[1]
PHOTO = ROOT.parent / "shared" / "data" / "photos" / "Wood.jpg"
CALLS_PER_SESSION = 40
STUCK_S = 100  # longer than a tool's deadline (60 s) plus a Redis stall: a call this old is stuck


@dataclass
class Tally:
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (start, seconds) relative to t0
    errors: list[str] = field(default_factory=list)
    sessions: int = 0
    mismatched: list[str] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    steps: dict[int, str] = field(default_factory=dict)  # what each client is doing (for a run that hangs)
    step_started: dict[int, float] = field(default_factory=dict)


class CountingTransport(httpx.AsyncBaseTransport):
    """Counts every answer the servers give, retried ones included."""

    def __init__(self, tally: Tally):
        self.inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))
        self.tally = tally

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.tally.statuses[response.status_code] = self.tally.statuses.get(response.status_code, 0) + 1
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def small_photo() -> bytes:
    image = Image.open(PHOTO).convert("RGB")
    image.thumbnail((1024, 1024))
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=90)
    return buf.getvalue()


async def client_loop(client: AsyncClient, photo: bytes, tally: Tally, t0: float, until: float, seed: int) -> None:
    rng = random.Random(seed)
    while time.monotonic() < until:
        step = "create"
        tally.steps[seed] = step
        try:
            session = await client.create_session([photo])
            step = tally.steps[seed] = f"call {session.id}"
            told = []
            for n in range(CALLS_PER_SESSION):
                if time.monotonic() >= until:
                    break
                x, y = rng.randint(0, 700), rng.randint(0, 500)
                started = time.monotonic()
                tally.steps[seed] = f"call {n} from {started - t0:.1f} s {session.id}"
                tally.step_started[seed] = started
                result = await session.call("zoom_in", image=0, bbox_2d=[x, y, x + 200, y + 150])
                tally.step_started.pop(seed, None)
                tally.latencies.append((started - t0, time.monotonic() - started))
                if not result.ok:
                    tally.errors.append(f"tool failure: {result.text[:120]}")
                told.append(result.images[0].key if result.images else None)
            step = tally.steps[seed] = "check"
            await check_session(client, session.id, told, tally)
            step = tally.steps[seed] = "release"
            await session.release()
            tally.sessions += 1
            tally.steps[seed] = "done"
        except Exception as exc:  # what the client raises after its retries: a client-visible failure
            tally.errors.append(f"{step}: {type(exc).__name__}: {exc}"[:120])
            await asyncio.sleep(0.5)


async def check_session(client: AsyncClient, sid: str, told: list[str | None], tally: Tally) -> None:
    trajectory = (await client.request("GET", f"/v1/sessions/{sid}/trajectory")).json()
    held = [image["key"] for image in trajectory["images"] if image["origin"] != "input"]
    logged = [key for call in trajectory["calls"] for key in call["keys"]]
    if held != told or logged != told:
        tally.mismatched.append(f"{sid}: told {len(told)}, holds {len(held)}, logged {len(logged)}")


async def diagnose(redis: RedisProcess, replicas: list[Server], busy: dict[int, str], tmp: Path) -> None:
    """What a hung run was waiting on: the stuck sessions' locks, nginx's errors, the replicas' stacks."""
    import shutil
    import subprocess

    import redis as redis_lib

    with redis_lib.Redis.from_url(redis.url) as store:
        for step in busy.values():
            sid = step.split()[-1]
            locks = {k.decode(): store.pttl(k) for k in store.scan_iter(f"*{sid}*lock*")}
            print(f"{step}: locks {locks}", flush=True)
    lines = (tmp / "nginx" / "logs" / "error.log").read_text().splitlines()
    print("nginx:", *lines[-20:], sep="\n", flush=True)
    for task in asyncio.all_tasks():  # where each client is awaiting (the client side of a hang)
        chain, awaited = [], task.get_coro()
        while awaited is not None and getattr(awaited, "cr_frame", None) is not None:
            chain.append(f"{awaited.cr_code.co_name}:{awaited.cr_frame.f_lineno}")
            awaited = awaited.cr_await
        if chain and chain[0].startswith("client_loop"):
            print("client task:", " -> ".join(chain), flush=True)
    for replica in replicas:  # each replica logs its tasks' await chains (toolserver.serving.log_tasks)
        replica.proc.send_signal(signal.SIGUSR1)
    await asyncio.sleep(1)
    spy = shutil.which("py-spy")
    for replica in replicas if spy else []:
        out = subprocess.run([spy, "dump", "--pid", str(replica.proc.pid)], capture_output=True, text=True)
        print(f"replica {replica.port}:", out.stdout[-6000:], out.stderr[-500:], sep="\n", flush=True)


async def watchdog(redis: RedisProcess, replicas: list[Server], tally: Tally, tmp: Path) -> None:
    """Diagnoses the first call that has waited over STUCK_S, while it is still stuck."""
    while True:
        await asyncio.sleep(5)
        now = time.monotonic()
        stuck = {i: tally.steps[i] for i, started in list(tally.step_started.items()) if now - started > STUCK_S}
        if stuck:
            print(f"calls waiting over {STUCK_S} s: {stuck}", flush=True)
            await diagnose(redis, replicas, stuck, tmp)
            return


async def faults(redis: RedisProcess, replicas: list[Server], env: dict[str, str], t0: float, until: float,
                 stall_s: float, events: list[dict], every_s: float = 60.0) -> None:
    restart_at = t0 + (until - t0) / 2
    restarted = False
    next_stall = t0 + 50
    while True:
        now = time.monotonic()
        if now >= until:
            return
        if not restarted and now >= restart_at:
            restarted = True
            began = time.monotonic()
            replicas[1].proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(replicas[1].proc.wait, 60)
            fresh = await asyncio.to_thread(Server, env, replicas[1].port)
            replicas[1] = fresh
            events.append({"fault": "replica restart", "start": began - t0, "end": time.monotonic() - t0})
            continue
        if now >= next_stall:
            began = time.monotonic()
            redis.proc.send_signal(signal.SIGSTOP)
            await asyncio.sleep(stall_s)
            redis.proc.send_signal(signal.SIGCONT)
            events.append({"fault": f"Redis stall {stall_s:g} s", "start": began - t0, "end": time.monotonic() - t0})
            next_stall += every_s
            continue
        await asyncio.sleep(0.05)


def recovery(latencies: list[tuple[float, float]], events: list[dict]) -> tuple[float, list[dict]]:
    """The baseline p99 (calls before the first fault) and, per fault, when one-second windows' p99 came back
    under 1.5x it after the fault ended."""
    first = min(e["start"] for e in events) if events else float("inf")
    baseline = percentile([s for t, s in latencies if t < first and t > 5], 99)
    windows: dict[int, list[float]] = {}
    for t, s in latencies:
        windows.setdefault(int(t), []).append(s)
    p99 = {w: percentile(v, 99) for w, v in windows.items() if len(v) >= 5}
    out = []
    for event in events:
        end = event["end"]
        back = next((w + 1 - end for w in sorted(p99) if w >= int(end) and p99[w] <= 1.5 * baseline), None)
        worst = max((p99[w] for w in p99 if event["start"] - 1 <= w <= end + 5), default=0.0)
        out.append({**event, "back_within_s": None if back is None else round(max(0.0, back), 1),
                    "worst_window_p99_ms": round(worst * 1000, 1)})
    return baseline, out


async def run(clients: int, minutes: float, stall_s: float, every_s: float = 60.0) -> dict:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)  # nginx's workers (user nobody under a root master) buffer request bodies in it
        redis = RedisProcess(tmp)
        env = {"TOOLSERVER_SESSION_STORE": "redis", "TOOLSERVER_REDIS_URL": redis.url, "TOOLSERVER_CLIP_MODEL": "",
               "TOOLSERVER_DATA_DIR": str(tmp / "data"), "HF_HUB_OFFLINE": "1", "TOOLSERVER_LOG_LEVEL": "warning"}
        replicas = [Server(env), Server(env)]
        nginx, lb = start_nginx(tmp / "nginx", [f"127.0.0.1:{r.port}" for r in replicas])
        tally, events = Tally(), []
        photo = small_photo()
        try:
            async with AsyncClient(lb, transport=CountingTransport(tally), retries=12, backoff=0.2, max_backoff=2.0,
                                   timeout=30) as client:
                t0 = time.monotonic()
                until = t0 + minutes * 60
                dog = asyncio.create_task(watchdog(redis, replicas, tally, tmp))
                work = asyncio.gather(faults(redis, replicas, env, t0, until, stall_s, events, every_s),
                                      *(client_loop(client, photo, tally, t0, until, i) for i in range(clients)))
                done, _ = await asyncio.wait({work}, timeout=minutes * 60 + 120)
                if not done:  # diagnosed while the stuck calls are still waiting, then given up
                    busy = {i: step for i, step in tally.steps.items() if step != "done"}
                    tally.errors.append(f"clients still busy 2 min after the end: {busy}")
                    await diagnose(redis, replicas, busy, tmp)
                    work.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await work
                dog.cancel()
        finally:
            nginx.send_signal(signal.SIGQUIT)
            nginx.wait(10)
            if tally.statuses.get(500) or tally.statuses.get(502):
                lines = (tmp / "nginx" / "logs" / "error.log").read_text().splitlines()
                print("\n".join([line for line in lines if "upstream" in line][-12:]))
            for replica in replicas:  # a drain may wait for calls in flight: give it its grace, then kill
                replica.proc.terminate()
                try:
                    replica.proc.wait(30)
                except Exception:
                    replica.proc.kill()
            redis.stop()
    seconds = [s for _, s in tally.latencies]
    baseline, recoveries = recovery(tally.latencies, events)
    return {
        "clients": clients, "minutes": minutes, "calls": len(seconds), "sessions_checked": tally.sessions,
        "client_visible_errors": len(tally.errors), "first_errors": tally.errors[:5],
        "sessions_with_lost_or_doubled_observations": len(tally.mismatched), "mismatches": tally.mismatched[:5],
        "server_answers_by_status": dict(sorted(tally.statuses.items())),
        "p50_ms": round(percentile(seconds, 50) * 1000, 1), "p99_ms": round(percentile(seconds, 99) * 1000, 1),
        "baseline_p99_ms": round(baseline * 1000, 1), "faults": recoveries,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--stall-s", type=float, default=2.0)
    parser.add_argument("--stall-every-s", type=float, default=60.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    print_report(asyncio.run(run(args.clients, args.minutes, args.stall_s, args.stall_every_s)), args.json)


if __name__ == "__main__":
    main()
