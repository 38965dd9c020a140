"""The race on verl-tool's own workload: verl-tool's Pixel-Reasoner tool server against toolserver's drop-in,
both driven by verl-tool's own client code, one server alive at a time, alternated, medians of rounds.

    bench/verl_tool/setup.sh                                 # once: verl-tool @ 980962b in its own venv
    python -m bench.bench_race_verl_tool [--sizes 1 16 64] [--rounds 3] [--calls 5] [--group 8] [--api rest]

Any python: it re-runs itself with the bench venv's (it imports verl-tool's client, aiohttp and psutil).

Theirs: `python -m verl_tool.servers.serve --tool_type pixel_reasoner --workers_per_tool 4`, its training
script's launch (a router with 8 uvicorn workers in front of 4 backends), with the import shim of
bench/verl_tool/shim (stand-ins for modules the crop path imports but never uses; no file of theirs edited).
Ours: `toolserver serve` (one process) from this project's .venv, its client's URL changed to ours, nothing else.

The client: verl-tool's `VerlToolAgentLoop.interact_with_tool_server` and `close_traj_tool_threads` (its
request cleaning, its shared aiohttp session, its response handling; see bench/verl_tool/probe.py), and the
agent loop's own decode of each returned image (`vision_utils.decode_image_url`, as `run` does). N trajectories
in lock-step, each `calls` crop calls on Dragonfly_by_Bolly.jpg resized to 4116x3080 (verl's dataset resize)
and sent as its agent loop sends it, a JPEG data URL (quality 75, 1.29 MB) with every call, then a finish.

`--api rest`: ours through its own REST API instead, as a TRL or OpenEnv user's loop drives it
(bench/race_rest_client.py, this project's `AsyncClient` in a process of its own): each trajectory uploads
the original photo (4224x3168, 1.52 MB, as on disk) with `POST /v1/sessions` (profile `pixel-reasoner`, whose
model view of it is exactly what verl-tool's agent loop sends), sends the same crop calls as model text to
`/act`, decodes each returned image, and releases its session. Theirs is unchanged (their client sending the
4116x3080 JPEG with every call, made from the same original); with `--group`, each group's original differs
by an 8x8 corner block, written as a JPEG with the photo's own quantisation tables.

`--serve [haproxy|proxy]`: also ours as a Ray Serve application on a two-node cluster on this machine (two ingress
replicas, sessions in Redis; bench/ray_cluster.py), behind Serve's HAProxy ingress (the default, as docs/deploy.md
advises) or its Python proxy; its CPU and memory are the whole cluster's.

Per run: wall time, the first step (until every trajectory has its first observation back, GRPO's lock-step), crop
calls per second, crop latency p50/p99, CPU seconds of the server's whole process tree, CPU seconds of this client
process, bytes per crop call (request + response bodies), peak summed RSS of the server's tree (sampled every 0.2
s). Each server's first trajectory's observations are kept and compared: texts and image bytes must be identical.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.verl_tool.launch import VENV_PYTHON, VerlToolServer, activate_shim_in_this_process  # noqa: E402

if Path(sys.prefix).resolve() != VENV_PYTHON.parent.parent.resolve():
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), "-m", "bench.bench_race_verl_tool", *sys.argv[1:]])

from bench.race_servers import Toolserver, ToolserverOnServe  # noqa: E402
from bench.verl_tool.probe import PHOTO, SIZE, TreeSampler, crop_calls, make_client  # noqa: E402


def input_images(n: int, group: int) -> list[str]:
    """Each trajectory's input image: one photo for all (the issue's workload), or one per `group` trajectories
    (GRPO: the rollouts of a prompt share its image), the groups' images differing by an 8x8 corner block."""
    from PIL import Image
    from verl_tool.agent_loop.vision_utils import encode_image_url

    base = Image.open(PHOTO).convert("RGB").resize(SIZE, Image.BICUBIC)
    urls = []
    for g in range(max(1, -(-n // group)) if group else 1):
        image = base.copy()
        if group:
            image.paste((g * 37 % 256, g * 91 % 256, g * 53 % 256), (0, 0, 8, 8))
        urls.append(encode_image_url(image))
    return [urls[i // group] if group else urls[0] for i in range(n)]


def rest_inputs(n: int, group: int, folder: Path) -> tuple[list[str], list[str]]:
    """Each trajectory's original (a file) and the data URL verl-tool's agent loop makes of it."""
    import io

    from PIL import Image, JpegImagePlugin
    from verl_tool.agent_loop.vision_utils import encode_image_url

    photo = Image.open(PHOTO)
    paths, urls = [], []
    for g in range(max(1, -(-n // group)) if group else 1):
        path = PHOTO
        if group:
            image = photo.convert("RGB")
            image.paste((g * 37 % 256, g * 91 % 256, g * 53 % 256), (0, 0, 8, 8))
            buf = io.BytesIO()
            image.save(buf, "JPEG", qtables=photo.quantization, subsampling=JpegImagePlugin.get_sampling(photo))
            path = folder / f"group{g}.jpg"
            path.write_bytes(buf.getvalue())
        paths.append(str(path))
        urls.append(encode_image_url(Image.open(path).convert("RGB").resize(SIZE, Image.BICUBIC)))
    pick = [i // group if group else 0 for i in range(n)]
    return [paths[g] for g in pick], [urls[g] for g in pick]


def rest_run(n: int, calls: int, paths: list[str], tag: str) -> dict:
    """Ours through the REST API: the client process (started and importing before the clock) against the
    server, measured as `one_run` measures."""
    with Toolserver() as server:
        warm = Path(server.workdir) / "warm.jpg"
        warm.write_bytes(warm_jpeg())
        _rest_client(server, [str(warm)], 1, lambda: None)
        pids, cmdlines = server_tree(server)
        with TreeSampler(pids, cmdlines) as sampler:
            marks: dict = {}
            out = _rest_client(server, paths, calls, lambda: marks.update(cpu0=sampler.cpu()))
            cpu1 = sampler.cpu()
        peak = sampler.peak_rss
    lat = sorted(out["latency"])
    first = [(text, [base64.b64decode(d) for d in images]) for text, images in out["first"]]
    return {"wall_s": out["wall_s"], "first_step_s": max(out["first_done"]), "calls_per_s": len(lat) / out["wall_s"],
            "p50_ms": 1000 * lat[len(lat) // 2],
            "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            "server_cpu_s": sum(cpu1.values()) - sum(marks["cpu0"].values()), "client_cpu_s": out["client_cpu_s"],
            "bytes_per_call": (out["sent"] + out["received"]) / len(lat), "peak_rss_mib": peak / 2**20,
            "peak_pss_mib": sampler.peak_pss / 2**20,
            "peak_node_files_mib": sampler.peak_node_files / 2**20, "ok": out["ok"], "crops": len(lat), "first": first}


def _rest_client(server: Toolserver, paths: list[str], calls: int, at_go) -> dict:
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "python"), "-m", "bench.race_rest_client"], cwd=ROOT,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({"url": f"http://{server.host}:{server.port}", "calls": calls, "inputs": paths})
                     + "\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "ready"
    at_go()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    out = json.loads(proc.stdout.readline())
    proc.wait(30)
    return out


def warm_jpeg() -> bytes:
    """The warm-up trajectory's original: a small photo of its own (it must not share the measured decode)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.open(PHOTO).convert("RGB").resize((644, 476), Image.BICUBIC).save(buf, "JPEG")
    return buf.getvalue()


async def trajectory(client, tag: str, index: int, calls: int, data_url: str, out: dict) -> None:
    from verl_tool.agent_loop.vision_utils import decode_image_url

    answered = []

    def record(info: dict, started: float) -> None:
        if info.get("image"):
            decode_image_url(info["image"])  # what the agent loop does with each returned image
        if not answered:  # this trajectory's first observation is back
            out["first_done"].append(time.perf_counter() - out["t0"])
        answered.append(1)
        out["latency"].append(time.perf_counter() - started)
        out["response_bytes"].append(info.get("response_size_mb", 0.0) * 1024 * 1024)
        out["ok"] += bool(info["valid_action"] and info["success"])
        if index == 0:
            out["first"].append((info["obs"], info.get("image")))

    traj_id = f"{tag}{index:03d}" + os.urandom(8).hex()
    await crop_calls(client, traj_id, index, calls, data_url, record)
    await client.close_traj_tool_threads(request_id=traj_id)


def request_bytes(data_url: str) -> int:
    """One crop call's request body as the client sends it (the same to both servers)."""
    body = {"trajectory_ids": ["x" * 35], "actions": ['Let me look closer.<tool_call>{"name": "crop_image", '
                                                      '"arguments": {"bbox_2d": [1200, 900, 2000, 1500], '
                                                      '"target_image": 1}}</tool_call>'],
            "finish": [False], "is_last_step": [False],
            "extra_fields": [{"split": "train", "index": 0, "qid": "train_0", "is_video": False,
                              "images": [data_url]}]}
    return len(json.dumps(body))


def one_run(server_cls, n: int, calls: int, urls: list[str], tag: str) -> dict:
    with server_cls() as server:
        cls, client = make_client(server.observation_url)
        warm = {"latency": [], "response_bytes": [], "ok": 0, "first": [], "first_done": [], "t0": 0.0}
        asyncio.run(_drive(cls, client, "warm" + tag, 1, 1, [warm_image()], warm))
        pids, cmdlines = server_tree(server)
        with TreeSampler(pids, cmdlines) as sampler:
            cpu0, client0, t0 = sampler.cpu(), time.process_time(), time.perf_counter()
            cls, client = make_client(server.observation_url)
            out = {"latency": [], "response_bytes": [], "ok": 0, "first": [], "first_done": [], "t0": t0}
            asyncio.run(_drive(cls, client, tag, n, calls, urls, out))
            wall = time.perf_counter() - t0
            cpu1, client_cpu = sampler.cpu(), time.process_time() - client0
        peak = sampler.peak_rss
    lat = sorted(out["latency"])
    crops = len(lat)
    return {"wall_s": wall, "first_step_s": max(out["first_done"]), "calls_per_s": crops / wall,
            "p50_ms": 1000 * lat[len(lat) // 2],
            "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            "server_cpu_s": sum(cpu1.values()) - sum(cpu0.values()), "client_cpu_s": client_cpu,
            "bytes_per_call": request_bytes(urls[0]) + statistics.mean(out["response_bytes"]),
            "peak_rss_mib": peak / 2**20, "peak_pss_mib": sampler.peak_pss / 2**20,
            "peak_node_files_mib": sampler.peak_node_files / 2**20, "ok": out["ok"], "crops": crops,
            "first": out["first"]}


def server_tree(server) -> tuple[list[int], dict[int, str]]:
    """The server's processes after its warm-up (one that ended meanwhile is not followed): its process group and
    every descendant, those in sessions of their own too (a node's model hosts, its Redis and Chroma servers)."""
    import psutil

    pids, cmdlines = [], {}
    found = list(server.pids())
    for pid in list(found):
        with contextlib.suppress(psutil.NoSuchProcess):
            found += [c.pid for c in psutil.Process(pid).children(recursive=True) if c.pid not in found]
    for pid in dict.fromkeys(found):
        try:
            cmdlines[pid] = " ".join(psutil.Process(pid).cmdline())
            pids.append(pid)
        except psutil.NoSuchProcess:
            continue
    return pids, cmdlines


def warm_image() -> str:
    """A small image of its own for the warm-up trajectory (it must not share the measured inputs' decode)."""
    from PIL import Image
    from verl_tool.agent_loop.vision_utils import encode_image_url

    return encode_image_url(Image.open(PHOTO).convert("RGB").resize((644, 476), Image.BICUBIC))


async def _drive(cls, client, tag: str, n: int, calls: int, urls: list[str], out: dict) -> None:
    try:
        await asyncio.gather(*(trajectory(client, tag, i, calls, urls[i], out) for i in range(n)))
    finally:
        await cls.aclose_session()


def per_request_cost(requests: int = 100) -> None:
    """Server CPU per request, one at a time (no concurrency): a request carrying the image and no action (the
    protocol's own cost), and a crop. Plain aiohttp posting the same body as the client builds."""
    import aiohttp
    import psutil

    body = {"trajectory_ids": ["t"], "finish": [False], "is_last_step": [False],
            "extra_fields": [{"images": [input_images(1, 0)[0]]}]}
    crop = ('<tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [1200, 900, 2000, 1500], '
            '"target_image": 1}}</tool_call>')

    async def measure(server, action: str) -> tuple[float, float]:
        procs = [psutil.Process(pid) for pid in server.pids()]
        data = json.dumps({**body, "actions": [action]}).encode()
        async with aiohttp.ClientSession(headers={"content-type": "application/json"}) as http:
            async def post() -> None:
                async with http.post(server.observation_url, data=data) as r:
                    await r.read()
            for _ in range(5):
                await post()
            cpu0, t0 = sum(sum(p.cpu_times()[:2]) for p in procs), time.perf_counter()
            for _ in range(requests):
                await post()
            cpu = sum(sum(p.cpu_times()[:2]) for p in procs) - cpu0
            return 1000 * cpu / requests, 1000 * (time.perf_counter() - t0) / requests

    for name, server_cls in (("theirs", VerlToolServer), ("ours", Toolserver)):
        with server_cls() as server:
            for what, action in (("no action", "no call here"), ("crop", crop)):
                cpu_ms, latency_ms = asyncio.run(measure(server, action))
                print(f"{name}: {what}: server CPU {cpu_ms:.1f} ms/request, latency {latency_ms:.1f} ms", flush=True)


METRICS = ("wall_s", "first_step_s", "calls_per_s", "p50_ms", "p99_ms", "server_cpu_s", "client_cpu_s",
           "bytes_per_call", "peak_rss_mib", "peak_pss_mib", "peak_node_files_mib")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--group", type=int, default=0, help="trajectories sharing one input image (GRPO's "
                        "rollout.n); 0: one photo for all, the issue's workload")
    parser.add_argument("--api", choices=["verl-tool", "rest"], default="verl-tool", help="how our trajectories "
                        "reach our server: verl-tool's client and protocol, or our REST API with original photos")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    parser.add_argument("--per-request", action="store_true", help="only each server's CPU per request, "
                        "one request at a time")
    parser.add_argument("--serve", nargs="?", const="haproxy", choices=["haproxy", "proxy"], help="also race "
                        "toolserver on Ray Serve (two nodes on this machine) beside uvicorn's, behind Serve's HAProxy "
                        "ingress (the default, RAY_SERVE_ENABLE_HA_PROXY=1) or its Python proxy")
    args = parser.parse_args()
    activate_shim_in_this_process()
    if args.per_request:
        per_request_cost()
        return
    servers = {"theirs": VerlToolServer, "ours": Toolserver}
    if args.serve:
        ToolserverOnServe.ingress = args.serve
        servers["serve"] = ToolserverOnServe
    runs: dict[tuple[int, str], list[dict]] = {}
    for n in args.sizes:
        if args.api == "rest":
            paths, urls = rest_inputs(n, args.group, Path(tempfile.mkdtemp(prefix="race-originals-")))
        else:
            paths, urls = [], input_images(n, args.group)
        for round_ in range(args.rounds):
            order = list(servers) if round_ % 2 == 0 else list(servers)[::-1]
            for name in order:
                tag = f"{name}{n}r{round_}"
                run = (rest_run(n, args.calls, paths, tag) if name == "ours" and args.api == "rest"
                       else one_run(servers[name], n, args.calls, urls, tag))
                runs.setdefault((n, name), []).append(run)
                print(f"N={n} round {round_ + 1} {name}: " + ", ".join(f"{k} {run[k]:.4g}" for k in METRICS)
                      + f", valid {run['ok']}/{run['crops']}", flush=True)
        for name in servers:
            if name != "theirs":
                same = compare_first(runs[(n, "theirs")][0]["first"], runs[(n, name)][0]["first"])
                print(f"N={n}: {name}: first trajectory's observations against theirs: {same}", flush=True)
    report(runs, args.sizes, [name for name in servers if name != "theirs"])
    if args.json:
        args.json.write_text(json.dumps({f"{n}/{name}": [{k: r[k] for k in METRICS} for r in rs]
                                         for (n, name), rs in runs.items()}, indent=1))


def compare_first(theirs: list, ours: list) -> str:
    """Their first trajectory's observations against ours: image bytes always; texts where both are verl-tool's
    (the REST answer's `prompt` is the observation text as the profile's system appends it)."""
    def image_bytes(image) -> list[bytes]:
        if isinstance(image, list):
            return image
        return [] if not image else [base64.b64decode(image.split(",", 1)[1])]

    images = [image_bytes(image) for _, image in theirs] == [image_bytes(image) for _, image in ours]
    texts = [text for text, _ in theirs] == [text for text, _ in ours]
    return f"image bytes identical: {images}; texts identical: {texts}"


def report(runs: dict, sizes: list[int], ours: list[str]) -> None:
    head = " | ".join(f"{name} (median) | {name} / theirs" for name in ours)
    print(f"\n| N | metric | theirs (median) | {head} |\n|---|---|---|" + "---|---|" * len(ours))
    for n in sizes:
        for metric in METRICS:
            theirs = statistics.median(r[metric] for r in runs[(n, "theirs")])
            cells = []
            for name in ours:
                value = statistics.median(r[metric] for r in runs[(n, name)])
                cells.append(f"{value:.4g} | {value / theirs:.2f}" if theirs else f"{value:.4g} | -")  # none of theirs
            print(f"| {n} | {metric} | {theirs:.4g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
