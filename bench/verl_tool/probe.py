"""A quick cost probe of verl-tool's own tool server, driven by verl-tool's own client code.

    bench/verl_tool/setup.sh                                  # once
    python bench/verl_tool/probe.py [--trajectories 16] [--calls 5] [--mode serve]

Any python: it re-runs itself with the bench venv's (.bench/verl-tool/venv), which has aiohttp and psutil.

Server: its Pixel-Reasoner launch, `python -m verl_tool.servers.serve --tool_type pixel_reasoner
--workers_per_tool 4` (router with 8 uvicorn workers + 4 tool_server backends) via bench.verl_tool.launch.

Client: verl-tool's VerlToolAgentLoop.interact_with_tool_server and close_traj_tool_threads themselves
(verl_tool/agent_loop/verltool_agent_loop.py @ 980962b, imported through the shim), on an instance made with
object.__new__ (no __init__: that needs verl's config, tokenizer and LLM server manager) and the class
attributes its init_class would set for these methods: agent_config (AgentActorConfig with tool_server_url,
tool_call_timeout=None and tool_call_max_retries=1, its defaults, and max_concurrent_trajectories=128 as in
its Pixel-Reasoner training script) and session_limit. So the requests go through its sanitize_request, its
shared aiohttp ClientSession (get_session), _aiohttp_request and the response post-processing.

Load: N concurrent trajectories; each sends `calls` crop calls in turn (the next after the previous answer,
as the agent loop does, with no model time in between), every call carrying the input image
(Dragonfly_by_Bolly.jpg 4224x3168 resized BICUBIC to 4116x3080 - qwen fetch_image's size for it - encoded by
verl-tool's encode_image_url: JPEG at Pillow's default quality, about 1.29 MB), then ends with
close_traj_tool_threads. The image is encoded once, before timing (the agent loop encodes it once per
trajectory, on the trainer side).

Measured: wall time; CPU seconds (user+sys) of the server's whole process tree (its process group, psutil,
before/after; split router side / backends); peak of the tree's summed RSS sampled every 0.2 s; this client
process's CPU; per-call latency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from bench.common import file_bytes, node_root  # noqa: E402
from bench.verl_tool.launch import VENV_PYTHON, VerlToolServer, activate_shim_in_this_process  # noqa: E402

if Path(sys.prefix).resolve() != VENV_PYTHON.parent.parent.resolve():
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])

import psutil  # noqa: E402

PHOTO = Path("/work/shared/data/photos/Dragonfly_by_Bolly.jpg")
SIZE = (4116, 3080)
BOXES = [  # pixel boxes on the 4116x3080 image, one per call (cycled)
    [1200, 900, 2000, 1500], [2400, 1400, 3300, 2200], [300, 300, 1100, 900],
    [1800, 1800, 2600, 2600], [3000, 400, 3900, 1000],
]


def input_image_data_url() -> str:
    from PIL import Image
    from verl_tool.agent_loop.vision_utils import encode_image_url

    return encode_image_url(Image.open(PHOTO).convert("RGB").resize(SIZE, Image.BICUBIC))


class TreeSampler:
    """CPU totals and summed RSS and PSS of a fixed set of processes (the server's tree). RSS counts a page shared by
    several processes (a node's forked workers, its shared images) once for each; PSS splits it among them. A node's
    files on tmpfs are memory too, which a process's PSS counts only while it maps them: the PSS total adds the
    node directory's pages that no process maps (`peak_node_files` is their most)."""

    def __init__(self, pids: list[int], cmdlines: dict[int, str]):
        self.procs = [psutil.Process(pid) for pid in pids]
        self.node_root = node_root(list(cmdlines.values()))
        self.peak_node_files = 0
        self.backend = {p.pid for p in self.procs if "verl_tool.servers.tool_server" in cmdlines[p.pid]}
        self.peak_rss = 0
        self.peak_pss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def cpu(self) -> dict[str, float]:
        out = {"backends": 0.0, "router_side": 0.0}
        for p in self.procs:
            t = p.cpu_times()
            out["backends" if p.pid in self.backend else "router_side"] += t.user + t.system
        return out

    def rss(self) -> int:
        total = 0
        for p in self.procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += p.memory_info().rss
        return total

    def pss(self) -> int:
        total = mapped = 0
        root = str(self.node_root) if self.node_root else None
        for p in self.procs:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                if root is None:
                    total += p.memory_full_info().pss
                    continue
                for region in p.memory_maps(grouped=True):
                    total += region.pss
                    mapped += region.pss if region.path.startswith(root) else 0
        if self.node_root is not None:
            unmapped = max(0, file_bytes(self.node_root) - mapped)
            self.peak_node_files = max(self.peak_node_files, unmapped)
            total += unmapped
        return total

    def _run(self):
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, self.rss())
            self.peak_pss = max(self.peak_pss, self.pss())
            self._stop.wait(0.2)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def make_client(url: str):
    """verl-tool's VerlToolAgentLoop with the minimum its tool-server methods read."""
    import logging

    from verl_tool.agent_loop import verltool_agent_loop
    from verl_tool.agent_loop.verltool_agent_loop import AgentActorConfig, VerlToolAgentLoop

    # its module logger warns "Large payload detected: 1.23 MB" on every call; keep the output readable
    logging.getLogger(verltool_agent_loop.__file__).setLevel(logging.ERROR)

    VerlToolAgentLoop.agent_config = AgentActorConfig(tool_server_url=url, max_concurrent_trajectories=128)
    VerlToolAgentLoop.session_limit = VerlToolAgentLoop.agent_config.max_concurrent_trajectories
    return VerlToolAgentLoop, object.__new__(VerlToolAgentLoop)


async def crop_calls(client, traj_id: str, index: int, calls: int, data_url: str, record) -> None:
    """One trajectory's tool calls as verl-tool's agent loop sends them: `calls` crop calls in turn, each carrying
    the input image (run(): extra_info.copy() + the encoded images). `record(info, started)` sees each answer
    with the perf_counter time its call started. The finish is the caller's."""
    extra_info = {"split": "train", "index": index, "qid": f"train_{index}", "is_video": False}
    for call in range(calls):
        bbox = BOXES[(index + call) % len(BOXES)]
        action = ('Let me look closer.<tool_call>{"name": "crop_image", "arguments": '
                  f'{{"bbox_2d": {json.dumps(bbox)}, "target_image": 1}}}}</tool_call>')
        started = time.perf_counter()
        info = await client.interact_with_tool_server(traj_id=traj_id, action=action, do_action=True,
                                                      extra_fields=dict(extra_info, images=[data_url]),
                                                      is_last_step=False)
        record(info, started)


async def trajectory(client, index: int, calls: int, data_url: str, latencies: list, results: list):
    traj_id = f"probe{index:02d}" + os.urandom(12).hex()

    def record(info: dict, started: float) -> None:
        latencies.append(("crop", time.perf_counter() - started))
        results.append((info["valid_action"], info["success"], len(info.get("image", "") or ""), info["obs"][:60]))

    await crop_calls(client, traj_id, index, calls, data_url, record)
    t0 = time.perf_counter()
    await client.close_traj_tool_threads(request_id=traj_id)
    latencies.append(("finish", time.perf_counter() - t0))


async def drive(cls, client, n: int, calls: int, data_url: str):
    latencies, results = [], []
    try:
        await asyncio.wait_for(asyncio.gather(*(trajectory(client, i, calls, data_url, latencies, results)
                                                for i in range(n))), timeout=590)
    finally:
        await cls.aclose_session()
    return latencies, results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trajectories", type=int, default=16)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--mode", choices=["serve", "backend"], default="serve")
    parser.add_argument("--warmup", type=int, default=1, help="trajectories of 1 call before timing")
    args = parser.parse_args()

    activate_shim_in_this_process()
    data_url = input_image_data_url()
    print(f"input: {PHOTO.name} -> {SIZE[0]}x{SIZE[1]}, data URL {len(data_url) / 1e6:.2f} MB")
    with VerlToolServer(args.mode) as server:
        pids = server.pids()
        cmdlines = {pid: " ".join(psutil.Process(pid).cmdline()) for pid in pids}
        print(f"server: {' '.join(server.command[1:])}\n  {len(pids)} processes "
              f"({sum('tool_server' in c for c in cmdlines.values())} backends)")
        if args.warmup:
            cls, client = make_client(server.observation_url)
            asyncio.run(drive(cls, client, args.warmup, 1, data_url))
        with TreeSampler(pids, cmdlines) as sampler:
            time.sleep(0.5)
            rss_idle = sampler.rss()
            cpu0, client0, t0 = sampler.cpu(), time.process_time(), time.perf_counter()
            cls, client = make_client(server.observation_url)
            latencies, results = asyncio.run(drive(cls, client, args.trajectories, args.calls, data_url))
            wall = time.perf_counter() - t0
            cpu1, client_cpu = sampler.cpu(), time.process_time() - client0
            time.sleep(0.5)
            rss_after = sampler.rss()
        peak = sampler.peak_rss
    crops = results
    ok = sum(1 for valid, success, _, _ in crops if valid and success)
    server_cpu = {k: cpu1[k] - cpu0[k] for k in cpu0}
    print(f"load: {args.trajectories} concurrent trajectories x {args.calls} crop calls + 1 finish each "
          f"({len(crops)} crops, {ok} valid; response image avg {statistics.mean(r[2] for r in crops) / 1e6:.2f} MB)")
    print(f"wall: {wall:.2f} s")
    print(f"server CPU: {sum(server_cpu.values()):.2f} s (backends {server_cpu['backends']:.2f}, "
          f"router side {server_cpu['router_side']:.2f}); {sum(server_cpu.values()) / len(crops):.3f} s per crop")
    print(f"client CPU (verl-tool's client code, this process): {client_cpu:.2f} s")
    print(f"server tree RSS: idle {rss_idle / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB, "
          f"after {rss_after / 2**20:.0f} MiB")
    for kind in ("crop", "finish"):
        lat = sorted(t for k, t in latencies if k == kind)
        print(f"{kind} call latency (s): p50 {statistics.median(lat):.2f}, max {lat[-1]:.2f}")
    bad = [r for r in crops if not (r[0] and r[1])]
    if bad:
        print("failures:", bad[:5])


if __name__ == "__main__":
    main()
