"""SMFANet through the node's model hosts vs in process, and the hosts' wire alone.

    python -m bench.bench_model_hosts --device cpu --side 96 --sessions 1,4 --calls 4   # here (2 cores)
    python -m bench.bench_model_hosts --device cuda --json out.json                     # on a GPU node

S threads (sessions), each enlarging its own crops x4 `--calls` times, through `SRFront` over (a) a
`LocalTransport` in this process (today's path) and (b) one model host on the same device
(`ModelHosts(settings, [device])`, the calls crossing its unix socket), measured alternately (each first in turn),
`--rounds` pairs, medians. Output megapixels per second, the ratio hosts / in process, one call's p50 both ways,
and whether the outputs are the same bytes. The wire alone: a reply of the x4 size sent there and back over a
socket pair.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from bench.common import PHOTOS
from toolserver.config import SHIPPED_SMFANET

ROOT = Path(__file__).resolve().parents[1]
PHOTO = PHOTOS / "TwoWings.jpg"


def crops(count: int, side: int) -> list[Image.Image]:
    image = Image.open(PHOTO).convert("RGB")
    return [image.crop(((i * 37) % (image.width - side), (i * 23) % (image.height - side),
                        (i * 37) % (image.width - side) + side, (i * 23) % (image.height - side) + side))
            for i in range(count)]


def run(front: Any, images: list[Image.Image], sessions: int, calls: int) -> tuple[float, list[bytes]]:
    outputs: dict[int, bytes] = {}
    barrier = threading.Barrier(sessions)

    def session(k: int) -> None:
        barrier.wait()
        for j in range(calls):
            i = (k * calls + j) % len(images)
            outputs[i] = front.upscale(images[i], 4).image.tobytes()

    threads = [threading.Thread(target=session, args=(k,)) for k in range(sessions)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    side = images[0].width * 4
    return sessions * calls * side * side / seconds / 1e6, [outputs[i] for i in sorted(outputs)]


def p50(front: Any, image: Image.Image, times: int = 10) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        front.upscale(image, 4)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e3


def wire_round_trip_ms(side: int, times: int = 50) -> float:
    from toolserver.hostlink import wire

    reply = np.zeros((side * 4, side * 4, 3), np.uint8)
    a, b = socket.socketpair(socket.AF_UNIX)

    def echo() -> None:
        for _ in range(times):
            wire.send(b, wire.recv(b))

    thread = threading.Thread(target=echo)
    thread.start()
    started = time.perf_counter()
    for _ in range(times):
        wire.send(a, (0, "ok", [reply]))
        wire.recv(a)
    thread.join()
    return (time.perf_counter() - started) / times * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--sessions", default="1,16,64")
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from toolserver.batching import LocalTransport
    from toolserver.config import Settings
    from toolserver.core.modelhosts import ModelHosts
    from toolserver.core.modelset import batch_rule, build_models
    from toolserver.hostlink import node_transports
    from toolserver.sr.service import SRFront

    settings = Settings(sr_model_dir=SHIPPED_SMFANET, sr_device=args.device, model_host_wait_s=120)
    images = crops(64, args.side)
    report: dict[str, Any] = {"device": args.device, "crop": f"{args.side}² -> x4", "levels": {},
                              "wire_round_trip_ms": round(wire_round_trip_ms(args.side), 2)}
    hosts = ModelHosts(settings, [args.device])
    hosts.start()
    try:
        here = SRFront(LocalTransport(build_models(settings, ("smfanet",))["smfanet"], batch_rule(settings, "smfanet")))
        there = SRFront(node_transports(settings, hosts.addresses)["smfanet"])
        for front in (here, there):
            run(front, images[:2], 2, 1)  # load the network (on CUDA, its kernels)
        report["p50_ms"] = {"in_process": round(p50(here, images[0]), 2), "hosts": round(p50(there, images[0]), 2)}
        for sessions in [int(s) for s in args.sessions.split(",")]:
            pairs = []
            for r in range(args.rounds):  # alternately first, so that neither always runs on a warmer machine
                order = (here, there) if r % 2 == 0 else (there, here)
                first, second = (run(front, images, sessions, args.calls) for front in order)
                pairs.append((first, second) if r % 2 == 0 else (second, first))
            local = statistics.median(p[0][0] for p in pairs)
            remote = statistics.median(p[1][0] for p in pairs)
            same = all(p[0][1] == p[1][1] for p in pairs)
            report["levels"][sessions] = {"in_process_mp_s": round(local, 2), "hosts_mp_s": round(remote, 2),
                                          "ratio": round(remote / local, 2), "same_bytes": same}
            print(f"sessions={sessions}: in process {local:.2f} MP/s, hosts {remote:.2f} MP/s "
                  f"({remote / local:.2f}x), same bytes: {same}", flush=True)
        here.close()
    finally:
        hosts.stop()
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
