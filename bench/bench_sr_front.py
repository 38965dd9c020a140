"""The in-process SMFANet front against the engine alone, under several batch rules and GIL switch intervals.

#41 asks the front (`SRFront` over `LocalTransport`, threads as sessions) for 0.8x the engine alone; on the H100 host
it gave 0.59x (161 of 274 MP/s at 64 sessions) with the server's rule (batches of 16 calls, 2 at once). This bench
runs the same crops through fronts built with other rules (`SR_BATCH_CALLS` x `SR_CONCURRENT_BATCHES`) and with the
interpreter's GIL switch interval lowered (a thread that wants the GIL waits up to that long for one that holds it:
the engine's thread, between its CUDA launches, against the 64 callers' threads), each beside the engine alone, in
one process, so that the choice of defaults rests on figures from one run.

Run: .venv/bin/python -m bench.bench_sr_front [--device cuda] [--sessions 64] [--calls 6] [--json out.json]
     (on a CPU, a small side: --side 48)
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from bench import bench_models
from bench.bench_sr_http import crop, engine_rate

VARIANTS = [  # (calls per batch, batches at once, switch interval in s)
    (16, 2, 0.005), (16, 1, 0.005), (32, 1, 0.005), (32, 2, 0.005), (64, 1, 0.005),
    (16, 2, 0.0005), (16, 1, 0.0005), (32, 1, 0.0005),
]


def front_rate(rule: tuple[int, int], interval: float, inputs: list[np.ndarray], sessions: int, calls: int,
               device: str) -> float:
    bench_models.RULE = rule
    front = bench_models.sr_front(device, True)
    previous = sys.getswitchinterval()
    try:
        bench_models.run_sr(front, inputs[:2], 1, 1)  # the network loaded
        sys.setswitchinterval(interval)
        return max(bench_models.run_sr(front, inputs, sessions, calls)[0] for _ in range(2))  # best of 2
    finally:
        sys.setswitchinterval(previous)
        front.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--json")
    args = parser.parse_args()
    inputs = [np.asarray(crop(i, args.side)) for i in range(args.sessions)]
    report: dict[str, Any] = {"device": args.device, "side": args.side, "sessions": args.sessions, "rows": []}
    report.update(engine_rate(args.side, args.device))
    for calls_per_batch, at_once, interval in VARIANTS:
        mp = front_rate((calls_per_batch, at_once), interval, inputs, args.sessions, args.calls, args.device)
        row = {"batch_calls": calls_per_batch, "concurrent": at_once, "switch_interval_ms": interval * 1000,
               "front_mp_per_s": round(mp, 2), "front_vs_engine": round(mp / report["engine_mp_per_s"], 2)}
        report["rows"].append(row)
        print(json.dumps(row), flush=True)
    report["engine_again"] = engine_rate(args.side, args.device)["engine_mp_per_s"]  # the engine drifts?
    print(json.dumps(report, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
