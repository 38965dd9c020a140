"""Code as a tool: a 1 MP crop through `run_python` (sandboxed code) vs through `zoom_in`, next to the same code
run unconfined in a warm interpreter (the floor), at 1, 16 and 64 concurrent sessions.

Run:  .venv/bin/python -m bench.bench_sandbox [--calls 64] [--json FILE]
      .venv/bin/python -m bench.bench_sandbox --starvation [--rounds 5] [--calls 40]   (that case alone)

All in one process, side by side: a `Core` (the server's core, without HTTP) serves both tools on a 2000x1500
crop of a real photo; each of N sessions calls one tool in a loop, all sessions at once. The floor runs the
very code (`display(image_1.crop(...))`, the crop's pixels taken out as bytes as `display` does) with `exec` in
this process. Reported per case: p50/p99 per call and calls/s; the sandbox's isolation level; and memory: the
zygote's unique set size, and a live stateful worker's (the mean of 8, each holding the image and a crop).

Then each code-as-tool environment's own cost per cell, one session calling in a loop: a cell that prints, as
each environment runs it (`run_python`: a one-shot child; the profiles: the session's stateful worker, through
the environment's runner: PyVision-RL's header, DeepEyesV2's rewrite and IPython shell, Thyme's rewrites and
executor).

Last, starvation: `zoom_in`'s p50 for another session alone, then beside `SANDBOX_SLOTS` code runs that spin
(`while ...: pass`, all slots taken) under each CPU policy (`SANDBOX_CPU_POLICY`: `idle`, then `nice`), in
rounds; the ratio beside / alone per round, and its median.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import time
from pathlib import Path

from PIL import Image

from bench.common import PHOTOS, percentile, print_report
from toolserver.config import Settings
from toolserver.core import Core, RawImage
from toolserver.models import CreateSessionRequest

CODE = "display(image_1.crop(({x}, {y}, {x} + 1000, {y} + 1000)))"  # 1 MP out


def photo() -> bytes:
    image = Image.open(PHOTOS / "Dragonfly_by_Bolly.jpg").convert("RGB").crop((1000, 800, 3000, 2300))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def floor(image: Image.Image, calls: int) -> list[float]:
    """The same code, unconfined, in this warm interpreter (what any in-process tool would pay)."""
    kept: list[bytes] = []
    namespace = {"image_1": image, "display": lambda im: kept.append(im.tobytes())}
    seconds = []
    for i in range(calls):
        started = time.perf_counter()
        exec(CODE.format(x=i % 900, y=i % 400), namespace)
        seconds.append(time.perf_counter() - started)
    return seconds


async def tool_case(core: Core, data: bytes, tool: str, sessions: int, calls: int) -> tuple[list[float], float]:
    ids = [(await core.create_session(CreateSessionRequest(), [RawImage(data)])).session_id for _ in range(sessions)]
    seconds: list[float] = []

    async def one(sid: str, n: int) -> None:
        for i in range(n):
            x, y = (i * 37) % 900, (i * 53) % 400
            args = {"code": CODE.format(x=x, y=y), "images": [0]} if tool == "run_python" else \
                {"image": 0, "bbox_2d": [x, y, x + 1000, y + 1000]}
            started = time.perf_counter()
            result = await core.call_tool(sid, tool, args)
            seconds.append(time.perf_counter() - started)
            assert result.ok, result.text

    per_session = max(1, calls // sessions)
    began = time.perf_counter()
    await asyncio.gather(*(one(sid, per_session) for sid in ids))
    wall = time.perf_counter() - began
    for sid in ids:
        await core.release(sid)
    return seconds, len(seconds) / wall


ENVIRONMENTS = {"default": ("run_python", {"code": "x = 6 * 7\nprint(x)"}),
                "pyvision-rl": ("python", {"code": "x = 6 * 7\nprint(x)"}),
                "deepeyes-v2": ("python", {"code": "x = 6 * 7\nprint(x)"}),
                "thyme": ("python", {"code": "x = 6 * 7\nprint(x)"})}


async def environment_case(core: Core, data: bytes, profile: str, calls: int) -> list[float]:
    """Per-cell latency of a printing cell in one session of `profile` (its first cell, which starts the worker,
    left out)."""
    sid = (await core.create_session(CreateSessionRequest(profile=profile), [RawImage(data)])).session_id
    tool, args = ENVIRONMENTS[profile]
    seconds = []
    for i in range(calls + 1):
        started = time.perf_counter()
        result = await core.call_tool(sid, tool, args)
        if i:
            seconds.append(time.perf_counter() - started)
        assert "42" in result.text, result.text
    await core.release(sid)
    return seconds


POLICIES = ("idle", "nice")
SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass"


async def zoom_p50(core: Core, data: bytes, calls: int, while_busy=None) -> tuple[float, int]:
    """`zoom_in`'s p50 over `calls` calls (1 MP crops), one after another, in a session of their own (after a
    first call left out); with `while_busy`, only the calls made while it says every slot is still spinning
    count."""
    sid = (await core.create_session(CreateSessionRequest(), [RawImage(data)])).session_id
    await core.call_tool(sid, "zoom_in", {"image": 0, "bbox_2d": [0, 0, 1000, 1000]})
    seconds = []
    for i in range(calls):
        x, y = (i * 37) % 900, (i * 53) % 400
        started = time.perf_counter()
        result = await core.call_tool(sid, "zoom_in", {"image": 0, "bbox_2d": [x, y, x + 1000, y + 1000]})
        if while_busy is None or while_busy():
            seconds.append(time.perf_counter() - started)
        assert result.ok, result.text
    await core.release(sid)
    return percentile(seconds, 50), len(seconds)


async def starvation(core: Core, data: bytes, rounds: int, calls: int) -> dict:
    """`zoom_in` alone vs beside SANDBOX_SLOTS spinning code runs, under each CPU policy in turn, `rounds` times."""
    sandbox = core.services.sandbox
    slots = sandbox.config.slots
    spinners = [(await core.create_session(CreateSessionRequest(), [RawImage(data)])).session_id
                for _ in range(slots)]
    await zoom_p50(core, data, 8)  # warm
    seconds = min(8.0, sandbox.config.timeout_s - 1)
    rows = []
    for _ in range(rounds):
        row = {"alone_p50_ms": round((await zoom_p50(core, data, calls))[0] * 1e3, 2)}
        for policy in POLICIES:
            sandbox.config = dataclasses.replace(sandbox.config, cpu_policy=policy)  # read by each run
            beside, counted = await _beside_spinners(core, data, spinners, calls, seconds)
            row[f"{policy}_p50_ms"], row[f"{policy}_counted"] = round(beside * 1e3, 2), counted
            row[f"{policy}_ratio"] = round(beside * 1e3 / row["alone_p50_ms"], 2)
        rows.append(row)
        print(row, flush=True)
    for s in spinners:
        await core.release(s)
    return {"slots": slots, "spin_s": seconds, "calls": calls, "rounds": rows,
            "alone_p50_ms_median": _median(rows, "alone_p50_ms"),
            **{f"{policy}_{key}_median": _median(rows, f"{policy}_{key}") for policy in POLICIES
               for key in ("p50_ms", "ratio")}}


async def _beside_spinners(core: Core, data: bytes, spinners: list[str], calls: int,
                           seconds: float) -> tuple[float, int]:
    sandbox = core.services.sandbox
    spins = [asyncio.ensure_future(core.call_tool(s, "run_python", {"code": SPIN.format(seconds=seconds)}))
             for s in spinners]
    deadline = time.monotonic() + 5
    while sandbox.live < len(spinners) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)  # every child past its confinement and spinning
    beside = await zoom_p50(core, data, calls, while_busy=lambda: sandbox.live == len(spinners))
    await asyncio.gather(*spins)  # (a spinner starved past its deadline by other work on the host times out)
    return beside


def _median(rows: list[dict], key: str) -> float:
    values = sorted(row[key] for row in rows)
    return values[len(values) // 2]


def memory(pid: int) -> int:
    """Unique set size: the private pages of a process (what a fork adds beyond the shared ones)."""
    total = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            total += int(line.split()[1]) * 1024
    return total


async def worker_memory(sandbox, image: Image.Image, workers: int = 8) -> float:
    """Unique set size of a live stateful worker, mean over `workers` workers each holding the image and a 1 MP
    crop of it in its namespace (what a session's kept state costs beyond the shared pages)."""
    from toolserver.sandbox.executor import SandboxImage

    for i in range(workers):
        done = await asyncio.to_thread(sandbox.run, "kept = image_1.crop((0, 0, 1000, 1000))",
                                       [SandboxImage(["image_1"], image)], worker=f"bench-{i}")
        assert done.ok, done
    first = sandbox.config.uid_base + sandbox.config.slots  # worker slots come after the one-shot ones
    uids = range(first, first + sandbox.config.worker_slots)
    sizes = [memory(int(p.name)) for p in Path("/proc").iterdir()
             if p.name.isdigit() and _uid(p) in uids]
    for i in range(workers):
        sandbox.close_worker(f"bench-{i}")
    return round(sum(sizes) / max(1, len(sizes)) / 2**20, 1)


def _uid(proc: Path) -> int:
    try:
        return int(next(line for line in (proc / "status").read_text().splitlines()
                        if line.startswith("Uid:")).split()[1])
    except (OSError, StopIteration):
        return -1


async def run(calls: int, rounds: int, only_starvation: bool) -> dict:
    data = photo()
    core = Core(Settings(sandbox_slots=8))
    await core.start()
    sandbox = core.services.sandbox
    await asyncio.to_thread(sandbox.start)
    if only_starvation:
        report = {"isolation": sandbox.level, "starvation": await starvation(core, data, rounds, calls)}
        await core.stop()
        return report
    assert sandbox._process is not None
    # before any child shares its pages: what the zygote itself holds (its preimports, the environments' programs)
    zygote_at_start = round(memory(sandbox._process.pid) / 2**20, 1)
    warm = await core.create_session(CreateSessionRequest(), [RawImage(data)])
    for tool in ("run_python", "zoom_in"):  # first calls (decodes, caches) out of the figures
        args = {"code": CODE.format(x=0, y=0)} if tool == "run_python" else {"image": 0, "bbox_2d": [0, 0, 10, 10]}
        await core.call_tool(warm.session_id, tool, args)
    image = Image.open(io.BytesIO(data)).convert("RGB")
    report: dict = {"isolation": sandbox.level, "levels": sandbox.levels, "cases": []}
    floor_seconds = floor(image, calls)
    report["floor_p50_ms"] = round(percentile(floor_seconds, 50) * 1e3, 2)
    report["floor_p99_ms"] = round(percentile(floor_seconds, 99) * 1e3, 2)
    for sessions in (1, 16, 64):
        for tool in ("run_python", "zoom_in"):  # side by side, alternating
            seconds, rate = await tool_case(core, data, tool, sessions, max(calls, sessions * 2))
            report["cases"].append({"tool": tool, "sessions": sessions, "calls": len(seconds),
                                    "p50_ms": round(percentile(seconds, 50) * 1e3, 1),
                                    "p99_ms": round(percentile(seconds, 99) * 1e3, 1),
                                    "calls_per_s": round(rate, 1)})
            print(report["cases"][-1], flush=True)
    report["environments"] = []
    for profile in ENVIRONMENTS:
        seconds = await environment_case(core, data, profile, calls)
        report["environments"].append({"profile": profile, "calls": len(seconds),
                                       "p50_ms": round(percentile(seconds, 50) * 1e3, 1),
                                       "p99_ms": round(percentile(seconds, 99) * 1e3, 1)})
        print(report["environments"][-1], flush=True)
    assert sandbox._process is not None
    report["zygote_uss_mb_at_start"] = zygote_at_start
    report["zygote_uss_mb"] = round(memory(sandbox._process.pid) / 2**20, 1)  # after the run, one image cached
    report["worker_uss_mb"] = await worker_memory(sandbox, image)
    report["starvation"] = await starvation(core, data, rounds, 40)
    await core.stop()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--starvation", action="store_true", help="only the starvation case")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the starvation case")
    args = parser.parse_args()
    calls = args.calls if not args.starvation or args.calls != 64 else 40
    print_report(asyncio.run(run(calls, args.rounds, args.starvation)), args.json)


if __name__ == "__main__":
    main()
