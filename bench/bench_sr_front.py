"""The in-process SMFANet front against the engine alone: eager against CUDA graphs, several batch rules, and
where the GPU worker's time goes.

#41 asks the front (`SRFront` over `LocalTransport`, threads as sessions) for 0.8x the engine alone; on the H100 host
it gave 0.73x (199 of 274 MP/s at 64 sessions) after the batcher's one wake a call. Each row here runs the same crops
through a front built with a rule (`SR_BATCH_CALLS` x `SR_CONCURRENT_BATCHES`), with or without CUDA graphs
(`SR_CUDA_GRAPHS`, sr/graphs.py), beside the engine alone built the same way, in one process, so that the choice
of defaults rests on figures from one run. Each row also says how the engine's GPU worker spent the run: the share
of the wall time inside forward passes (`busy`), a pass's mean time and its mean tiles; a front whose passes take
longer than the engine's alone lost time to the other threads (the GIL), one with a lower `busy` was not fed.

Run: .venv/bin/python -m bench.bench_sr_front [--device cuda] [--sessions 64] [--calls 12] [--rows 1 3] [--json F]
     (on a CPU, a small side: --side 48)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from bench import bench_models
from bench.bench_sr_http import crop
from toolserver.sr.engine import SREngine

VARIANTS = [  # (calls per batch, batches at once, CUDA graphs, switch interval in s)
    (16, 2, False, 0.005), (16, 2, True, 0.005), (32, 1, True, 0.005), (16, 3, True, 0.005), (16, 2, True, 0.0005),
]


def timeline(engine: SREngine) -> list[tuple[float, float, int]]:
    """Each forward pass of `engine` from now on, as (start, end, tiles)."""
    spans: list[tuple[float, float, int]] = []
    inner = engine._forward

    def timed(scale: int, windows: list[np.ndarray]) -> list[np.ndarray]:
        started = time.perf_counter()
        out = inner(scale, windows)
        spans.append((started, time.perf_counter(), len(windows)))
        return out

    engine._forward = timed  # type: ignore[method-assign]
    return spans


def worker_figures(spans: list[tuple[float, float, int]], wall: float) -> dict[str, float]:
    if not spans:
        return {}
    inside = sum(end - start for start, end, _ in spans)
    return {"busy": round(inside / wall, 3), "pass_ms": round(1000 * inside / len(spans), 2),
            "tiles_per_pass": round(sum(n for *_, n in spans) / len(spans), 2)}


def engine_alone(inputs: list[np.ndarray], device: str, graphs: bool, repeats: int = 3,
                 outputs: list[np.ndarray] | None = None) -> dict[str, Any]:
    """All crops queued at once, best of `repeats` (after two passes that warm it, and capture its graph); the last
    run's outputs are put in `outputs`."""
    engine = SREngine(bench_models.SHIPPED_SMFANET, device=device, batch_tiles="auto", max_batch=16,
                      cuda_graphs=graphs)
    out_mp = len(inputs) * (inputs[0].shape[0] * 4) * (inputs[0].shape[1] * 4) / 1e6
    try:
        for _ in range(2):
            engine.run_jobs([(x, 4, None) for x in inputs])
        best: dict[str, Any] = {}
        for _ in range(repeats):
            spans = timeline(engine)
            started = time.perf_counter()
            outcomes = engine.run_jobs([(x, 4, None) for x in inputs])
            wall = time.perf_counter() - started
            failed = [o for o in outcomes if isinstance(o, Exception)]
            if failed:
                raise failed[0]
            del engine._forward  # the class's again
            if not best or out_mp / wall > best["mp_per_s"]:
                best = {"mp_per_s": round(out_mp / wall, 2), **worker_figures(spans, wall)}
            if outputs is not None:
                outputs[:] = [o[0] for o in outcomes if not isinstance(o, Exception)]
        best["graphs"] = engine.status()["cuda_graphs"]
        return best
    finally:
        engine.close()


def front_rate(rule: tuple[int, int], graphs: bool, interval: float, inputs: list[np.ndarray], sessions: int,
               calls: int, device: str) -> dict[str, Any]:
    bench_models.RULE = rule
    front = bench_models.sr_front(device, True, cuda_graphs=graphs)
    engine = front.transport.model.engine
    previous = sys.getswitchinterval()
    try:
        bench_models.run_sr(front, inputs, sessions, 2)  # the network loaded, the batch shapes captured
        sys.setswitchinterval(interval)
        best: dict[str, Any] = {}
        for _ in range(2):  # best of 2
            spans = timeline(engine)
            started = time.perf_counter()
            mp = bench_models.run_sr(front, inputs, sessions, calls)[0]
            wall = time.perf_counter() - started
            del engine._forward
            if not best or mp > best["mp_per_s"]:
                best = {"mp_per_s": round(mp, 2), **worker_figures(spans, wall)}
        best["graphs"] = engine.status()["cuda_graphs"]
        return best
    finally:
        sys.setswitchinterval(previous)
        front.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--rows", type=int, nargs="+", help="which of VARIANTS to run, by index (default: all)")
    parser.add_argument("--json")
    args = parser.parse_args()
    inputs = [np.asarray(crop(i, args.side)) for i in range(args.sessions)]
    report: dict[str, Any] = {"device": args.device, "side": args.side, "sessions": args.sessions, "rows": []}
    eager_out: list[np.ndarray] = []
    graphs_out: list[np.ndarray] = []
    report["engine"] = {"eager": engine_alone(inputs, args.device, False, outputs=eager_out),
                        "graphs": engine_alone(inputs, args.device, True, outputs=graphs_out)}
    report["graphs_output"] = {  # replayed graphs run the eager pass's kernels: the same bytes
        "identical": sum(a.tobytes() == b.tobytes() for a, b in zip(eager_out, graphs_out, strict=True)),
        "of": len(eager_out), "max_abs_diff": max(int(np.abs(a.astype(np.int16) - b).max())
                                                   for a, b in zip(eager_out, graphs_out, strict=True))}
    print(json.dumps({**report["engine"], "graphs_output": report["graphs_output"]}), flush=True)
    for calls_per_batch, at_once, graphs, interval in [VARIANTS[i] for i in args.rows or range(len(VARIANTS))]:
        row = {"batch_calls": calls_per_batch, "concurrent": at_once, "cuda_graphs": graphs,
               "switch_interval_ms": interval * 1000,
               **front_rate((calls_per_batch, at_once), graphs, interval, inputs, args.sessions, args.calls,
                            args.device)}
        alone = report["engine"]["graphs" if graphs else "eager"]["mp_per_s"]
        row["front_vs_engine"] = round(row["mp_per_s"] / alone, 3)
        report["rows"].append(row)
        print(json.dumps(row), flush=True)
    report["engine_again"] = engine_alone(inputs, args.device, True)["mp_per_s"]  # the engine drifts?
    print(json.dumps(report, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
