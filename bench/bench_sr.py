"""SMFANet engine: CPU speed against bicubic, channels_last, concurrency, tiling fidelity, memory, quality.

Run: .venv/bin/python -m bench.bench_sr [--repeats 3] [--big]
Weights are read from ../shared/models/smfanet (or TOOLSERVER_SR_MODEL_DIR). `--big` also upscales a
4000x3000 photo x2 in a child process and reports its peak RSS (several minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from bench.common import PHOTOS, ROOT
from toolserver.sr.engine import SREngine
from toolserver.sr.quality import psnr, psnr_y

MODEL_DIR = Path(os.environ.get("TOOLSERVER_SR_MODEL_DIR", ROOT.parent / "shared" / "models" / "smfanet"))


def source(width: int, height: int) -> Image.Image:
    img = Image.open(PHOTOS / "Dragonfly_by_Bolly.jpg").convert("RGB")
    return img.resize((width, height), Image.Resampling.BICUBIC)


def timed(fn, repeats: int) -> float:
    fn()  # warm-up (first call loads the network)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def speed(repeats: int) -> list[dict]:
    """One request's output megapixels per second at 1280x720 output (the paper's setting), against bicubic."""
    rows = []
    engines = {True: SREngine(MODEL_DIR), False: SREngine(MODEL_DIR, channels_last=False)}
    for scale in (2, 4):
        lr = source(1280 // scale, 720 // scale)
        out_mp = 1280 * 720 / 1e6
        t_pil = timed(lambda lr=lr: lr.resize((1280, 720), Image.Resampling.BICUBIC), repeats * 10)
        x = torch.from_numpy(np.array(lr)).permute(2, 0, 1)[None].float() / 255
        t_torch = timed(lambda x=x, s=scale: torch.nn.functional.interpolate(x, scale_factor=s, mode="bicubic"),
                        repeats * 10)
        times = {}
        for _ in range(repeats):  # alternate the two layouts so drift hits both alike
            for layout, engine in engines.items():
                started = time.perf_counter()
                engine.upscale(lr, scale)
                times.setdefault(layout, []).append(time.perf_counter() - started)
        for layout in engines:
            t = statistics.median(times[layout][1:] or times[layout])
            rows.append({"scale": scale, "input": f"{lr.width}x{lr.height}", "channels_last": layout,
                         "seconds": round(t, 3), "out_mp_per_s": round(out_mp / t, 3),
                         "bicubic_pil_mp_per_s": round(out_mp / t_pil, 1),
                         "bicubic_torch_mp_per_s": round(out_mp / t_torch, 1),
                         "slower_than_pil_bicubic": round(t / t_pil)})
    for engine in engines.values():
        engine.close()
    return rows


def concurrency(clients: int = 8, jobs_each: int = 2) -> dict:
    """8 threads asking at once (160x120 -> 640x480, x4): the engine's design against the alternatives."""
    crops = [source(640, 480).crop((i * 40, i * 20, i * 40 + 160, i * 20 + 120)) for i in range(clients)]
    cores = os.cpu_count() or 1

    def run_all(fn) -> float:
        threads = [threading.Thread(target=lambda c=c: [fn(c) for _ in range(jobs_each)]) for c in crops]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - started

    designs = {f"{cores} workers x 1 thread (default)": SREngine(MODEL_DIR),
               f"1 worker x {cores} threads": SREngine(MODEL_DIR, cpu_workers=1, threads=cores)}
    for engine in designs.values():
        engine.upscale(crops[0], 4)
    total = clients * jobs_each
    rows = {}
    for _ in range(2):  # alternate, keep the better of two
        for name, engine in designs.items():
            t = run_all(lambda c, e=engine: e.upscale(c, 4))
            rows[name] = min(rows.get(name, t), t)
    network = designs[next(iter(designs))]._network(4)

    def direct(c: Image.Image) -> None:  # no engine: every request thread runs the network itself
        x = torch.from_numpy(np.array(c)).permute(2, 0, 1)[None].float().div(255)
        with torch.inference_mode():
            network(x.contiguous(memory_format=torch.channels_last))

    rows[f"{clients} request threads run the network directly"] = run_all(direct)
    for engine in designs.values():
        engine.close()
    out_mp = total * 640 * 480 / 1e6
    return {"clients": clients, "jobs": total, "job": "160x120 -> 640x480 (x4)",
            "designs": {name: {"seconds": round(t, 2), "jobs_per_s": round(total / t, 2),
                               "out_mp_per_s": round(out_mp / t, 3)} for name, t in rows.items()}}


def tiling() -> list[dict]:
    lr = source(640, 480)
    whole = SREngine(MODEL_DIR, tile=10_000, cpu_workers=1)
    reference = np.asarray(whole.upscale(lr, 4).image)
    t_whole = timed(lambda: whole.upscale(lr, 4), 2)
    rows = [{"tile": "whole", "pad": 0, "tiles": 1, "psnr_vs_whole_db": None, "seconds": round(t_whole, 2)}]
    for tile, pad in [(128, 8), (256, 16), (320, 16), (512, 16)]:
        engine = SREngine(MODEL_DIR, tile=tile, tile_pad=pad, cpu_workers=1)
        result = engine.upscale(lr, 4)
        t = timed(lambda e=engine: e.upscale(lr, 4), 2)
        rows.append({"tile": tile, "pad": pad, "tiles": result.tiles,
                     "psnr_vs_whole_db": round(psnr(np.asarray(result.image), reference), 1),
                     "max_abs_diff": int(np.abs(np.asarray(result.image).astype(int) - reference).max()),
                     "seconds": round(t, 2)})
        engine.close()
    whole.close()
    return rows


def quality() -> list[dict]:
    """Y-PSNR (border = scale) of SMFANet and bicubic on bicubic-downscaled photos (as tests/test_sr_model.py)."""
    rows = []
    names = ["LadyBird.jpg", "Wood.jpg", "Bridge_by_Sander_Klootwijk.jpg", "TwoWings.jpg", "Dragonfly_by_Bolly.jpg",
             "umang_by_Abhishek_Mudgal.jpg"]
    for plus in (False, True):
        engine = SREngine(MODEL_DIR, prefer_plus=plus)
        for scale in ((4,) if plus else (2, 3, 4)):
            sr_db, bic_db = [], []
            for name in names:
                img = Image.open(PHOTOS / name).convert("RGB")
                k = 360 / max(img.size)
                hr = img.resize((round(img.width * k) // 12 * 12, round(img.height * k) // 12 * 12),
                                Image.Resampling.BICUBIC)
                lr = hr.resize((hr.width // scale, hr.height // scale), Image.Resampling.BICUBIC)
                sr_db.append(psnr_y(engine.upscale(lr, scale).image, hr, scale))
                bic_db.append(psnr_y(lr.resize(hr.size, Image.Resampling.BICUBIC), hr, scale))
            rows.append({"model": ("SMFANet+" if plus else "SMFANet") + f" x{scale}",
                         "smfanet_db": round(statistics.fmean(sr_db), 2),
                         "bicubic_db": round(statistics.fmean(bic_db), 2),
                         "gain_db": round(statistics.fmean(sr_db) - statistics.fmean(bic_db), 2),
                         "min_gain_db": round(min(a - b for a, b in zip(sr_db, bic_db, strict=True)), 2)})
        engine.close()
    return rows


def big_child(scale: int, tile: int) -> None:
    """In a fresh process: peak RSS of upscaling a 4000x3000 photo (printed as JSON)."""
    img = Image.open(PHOTOS / "Dragonfly_by_Bolly.jpg").convert("RGB")
    left, top = (img.width - 4000) // 2, (img.height - 3000) // 2
    img = img.crop((left, top, left + 4000, top + 3000))
    engine = SREngine(MODEL_DIR, tile=tile)
    engine.upscale(img.crop((0, 0, 64, 64)), scale)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    result = engine.upscale(img, scale)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"input": "4000x3000", "scale": scale, "tile": tile, "tiles": result.tiles,
                      "output": f"{result.image.width}x{result.image.height}", "seconds": round(seconds, 1),
                      "out_mp_per_s": round(result.image.width * result.image.height / 1e6 / seconds, 3),
                      "rss_before_mb": round(before), "peak_rss_mb": round(peak),
                      "output_buffer_mb": round(result.image.width * result.image.height * 3 / 2**20)}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--big", action="store_true")
    parser.add_argument("--big-child", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=["speed", "concurrency", "tiling", "quality"])
    args = parser.parse_args()
    if args.big_child:
        big_child(*args.big_child)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, weights {MODEL_DIR}")
    sections = {"speed": lambda: speed(args.repeats), "concurrency": concurrency, "tiling": tiling,
                "quality": quality}
    for name, fn in sections.items():
        if args.only in (None, name):
            print(name, json.dumps(fn(), indent=1))
    if args.big:
        out = subprocess.run([sys.executable, "-m", "bench.bench_sr", "--big-child", "2", "512"],
                             capture_output=True, text=True, check=True, cwd=ROOT)
        print("big", out.stdout.strip())


if __name__ == "__main__":
    main()
