"""Video intake: a video uploaded to a session becomes its sampled frames. Served vs floor, frames per second.

Run: .venv/bin/python -m bench.bench_video [--iterations 5]

The clip is built here with PyAV: 10 s of 1280x720 at 30 fps, H.264 (libx264, crf 23), a slow pan over a
real photograph, so the encoder sees real texture and motion.
- **Served**: `toolserver serve` in a child process; one multipart upload that creates a session holding the
  frames; the server-side time is `X-Process-Time` (read the body, decode, sample, convert, keep each frame's
  PNG, register), the session is released after each upload.
- **Floor**: in this process, `toolserver.video.decode_video` alone on the same bytes and sampling (PyAV's
  decode and RGB conversion of the frames wanted): what any intake has to do. It runs in a worker thread, as
  the server's does: on the main thread the same decode of 300 frames measured 1.2–3.7 s against 1.0–1.2 s
  in a thread (glibc's main-thread heap gives the frames' memory back and faults it in again each time).
Served and floor alternate; figures are medians. Frames per second are frames kept over served seconds.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import av
import httpx
import numpy as np
from PIL import Image

from bench.common import PHOTOS, Server
from toolserver.video import VideoLimits, decode_video

CASES = [("2 frames/s (20 frames)", {"frames_per_second": 2}), ("max_frames 16", {"max_frames": 16}),
         ("every frame (300)", {"frames_per_second": 30, "max_frames": 300})]


def make_clip(seconds: int = 10, fps: int = 30, width: int = 1280, height: int = 720) -> bytes:
    photo = np.asarray(Image.open(PHOTOS / "Dragonfly_by_Bolly.jpg").convert("RGB"))
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "23", "preset": "veryfast"}
        frames = seconds * fps
        for k in range(frames):
            x = round((photo.shape[1] - width) * k / frames)
            y = round((photo.shape[0] - height) * k / (2 * frames))
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(photo[y:y + height, x:x + width]), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def timed_decode(clip: bytes, limits: VideoLimits, sampling: dict) -> float:
    started = time.perf_counter()
    decode_video(clip, limits, fps=sampling.get("frames_per_second"), max_frames=sampling.get("max_frames"))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--out", help="also write the report as JSON here")
    args = parser.parse_args()

    clip = make_clip()
    limits = VideoLimits(max_seconds=600, max_frames=512, max_pixels=10**8, max_decoded_bytes=2**34)
    report: dict = {"clip": {"bytes": len(clip), "seconds": 10, "size": "1280x720", "fps": 30, "codec": "h264"}}
    env = {"TOOLSERVER_MAX_VIDEO_FRAMES": "512", "TOOLSERVER_MAX_REQUEST_BYTES": str(256 * 2**20)}
    worker = ThreadPoolExecutor(1)
    with Server(env) as server, httpx.Client(base_url=server.url, timeout=300) as http:
        for name, sampling in CASES:
            served, observed, floor, frames = [], [], [], 0
            for i in range(args.iterations + 1):
                for step in ("served", "floor") if i % 2 == 0 else ("floor", "served"):
                    if step == "served":
                        started = time.perf_counter()
                        response = http.post("/v1/sessions", files=[("files", ("clip.mp4", clip, "video/mp4"))],
                                             data={k: str(v) for k, v in sampling.items()})
                        elapsed = time.perf_counter() - started
                        response.raise_for_status()
                        body = response.json()
                        frames = len(body["images"])
                        http.delete(f"/v1/sessions/{body['session_id']}")
                        if i:  # the first round warms both paths up
                            served.append(float(response.headers["x-process-time"]))
                            observed.append(elapsed)
                    else:
                        seconds = worker.submit(timed_decode, clip, limits, sampling).result()
                        if i:
                            floor.append(seconds)
            served_s, floor_s = statistics.median(served), statistics.median(floor)
            report[name] = {"frames": frames, "served_p50_ms": served_s * 1e3,
                            "client_p50_ms": statistics.median(observed) * 1e3, "floor_p50_ms": floor_s * 1e3,
                            "ratio": served_s / floor_s, "served_frames_per_s": frames / served_s,
                            "floor_frames_per_s": frames / floor_s, "n": len(served)}
    print(f"clip: {json.dumps(report['clip'])}")
    print(f"{'sampling':26}{'frames':>7}{'served p50':>12}{'floor p50':>11}{'ratio':>7}{'served fr/s':>13}")
    for name, _ in CASES:
        row = report[name]
        print(f"{name:26}{row['frames']:>7}{row['served_p50_ms']:>10.0f}ms{row['floor_p50_ms']:>9.0f}ms"
              f"{row['ratio']:>7.2f}{row['served_frames_per_s']:>13.1f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
