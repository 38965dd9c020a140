"""toolserver.resample against Pillow's own bicubic resize: the same pixels (checked), the time of each, on the
resizes the seed tools make of a real photograph, alternated call by call in one process.

Run: .venv/bin/python -m bench.bench_resample [--iterations 31]
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

from PIL import Image

from bench.common import photo_4000x3000
from toolserver import resample

# (what, crop box on the 4000x3000 photo, output size)
CASES = [
    ("Pixel-Reasoner crop → its fetch_image (vertical first)", (1200, 900, 2823, 2116), (1624, 1204)),
    ("zoom_in: 250x187 crop, 2x up", (1000, 1200, 1250, 1387), (500, 374)),
    ("qwen3-vl: 1000x750 crop → smart_resize", (1600, 1200, 2600, 1950), (992, 736)),
    ("a 4000x3000 input → its 1280x960 view", (0, 0, 4000, 3000), (1280, 960)),
    ("document stitch: a page-sized image → 1024 long side", (0, 0, 2480, 3000), (846, 1024)),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=31)
    args = parser.parse_args()
    photo = Image.open(io.BytesIO(photo_4000x3000())).convert("RGB")
    started = time.perf_counter()
    assert resample.exact_here()
    print(f"kernels loaded and checked in {time.perf_counter() - started:.2f} s\n")
    print("| resize | Pillow p50 | ours p50 | Pillow / ours |")
    print("|---|---|---|---|")
    for what, box, size in CASES:
        source = photo.crop(box)
        expected = source.resize(size, Image.Resampling.BICUBIC).tobytes()
        assert resample.resize_bicubic(source, size).tobytes() == expected, what
        theirs, ours = [], []
        for _ in range(args.iterations):  # alternated, so both see the same machine
            t0 = time.perf_counter()
            source.resize(size, Image.Resampling.BICUBIC)
            t1 = time.perf_counter()
            resample.resize_bicubic(source, size)
            t2 = time.perf_counter()
            theirs.append(t1 - t0)
            ours.append(t2 - t1)
        p, o = statistics.median(theirs) * 1000, statistics.median(ours) * 1000
        shape = f"{source.width}x{source.height} → {size[0]}x{size[1]}"
        print(f"| {what}: {shape} | {p:.1f} ms | {o:.1f} ms | {p / o:.2f} |")


if __name__ == "__main__":
    main()
