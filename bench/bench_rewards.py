"""Rewards: a GRPO group of 64 trajectories scored through `POST /v1/rewards` with rule-based terms, end to end
against a live server (request, validation, scoring, response), and the same group scored in process (the reward
alone). Two rule-based rewards: ARM-Thinker's critic reward (`deepeyes_crop`: the last turn's strict shape, the
choice, the tool counts; each episode three turns and two calls) and Pixel-Reasoner's (math-verify over the
decoded response, the group's curiosity bonus, the redundancy penalty). Medians over the repeats.

Run: .venv/bin/python -m bench.bench_rewards [--repeats 30] [--group 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import httpx
import orjson

from bench.common import Server
from toolserver.rewards import Episode, Step, get_reward

ZOOM = ('<think>I need a closer look at the left panel.</think><tool_call>{"name": "image_zoom_in_tool", '
        '"arguments": {"bbox_2d": [10, 20, 300, 400], "image_key": "img_0"}}</tool_call>')
ZOOMED = "This is the zoom-in image `observation_1`(zoomed in on the image img_0) after your tool call."
CROP = ('<think>zoom</think><tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [0.1, 0.1, 0.5, 0.5], '
        '"target_image": 1}}</tool_call>')
CROPPED = "Here is the cropped image. (Image Size: 448x336)\n<image>"


def arm_item(i: int) -> dict[str, Any]:
    final = f"<think>Answer {1 + i % 2} reads the chart right.</think><answer>Answer {1 + i % 2} is better.</answer>"
    return {"turns": [ZOOM, ZOOM, final], "ground_truth": 1 + (i // 3) % 2, "extra": {"data_source": "deepeyes_crop"},
            "calls": [{"tool": "image_zoom_in_tool", "text": ZOOMED, "images": 1}] * 2}


def pixel_item(i: int) -> dict[str, Any]:
    turns = [CROP] * (i % 3) + [f"Counting the birds in the crop, the answer is \\boxed{{{4 + i % 2}}}."]
    return {"turns": turns, "ground_truth": "5", "calls": [{"tool": "crop_image", "text": CROPPED, "images": 1}] *
            (i % 3)}


def in_process(profile: str, items: list[dict[str, Any]], repeats: int) -> float:
    reward = get_reward(profile)
    episodes = [Episode(profile=profile, turns=tuple(x["turns"]), ground_truth=x["ground_truth"],
                        extra=x.get("extra", {}), calls=tuple(Step(**c) for c in x["calls"])) for x in items]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        asyncio.run(reward.score_group(episodes))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def over_http(url: str, profile: str, items: list[dict[str, Any]], repeats: int) -> tuple[float, float, list[float]]:
    """Medians of the round trip and of the server's own time (its X-Process-Time), and the totals."""
    body = orjson.dumps({"profile": profile, "items": items})
    times, served, totals = [], [], []
    with httpx.Client(base_url=url, timeout=60, headers={"Content-Type": "application/json"}) as client:
        for _ in range(5):  # warm-up (the server's start-up checks run in the first seconds)
            client.post("/v1/rewards", content=body).raise_for_status()
        for _ in range(repeats):
            start = time.perf_counter()
            r = client.post("/v1/rewards", content=body)
            times.append(time.perf_counter() - start)
            r.raise_for_status()
            served.append(float(r.headers["x-process-time"]))
            totals = [x["total"] for x in r.json()["results"]]
    return statistics.median(times), statistics.median(served), totals


def round_trip(url: str, repeats: int) -> float:
    """The same connection's `GET /healthz`: what any request pays here (the baseline beside the rewards)."""
    with httpx.Client(base_url=url, timeout=60) as client:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            client.get("/healthz").raise_for_status()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--group", type=int, default=64)
    args = parser.parse_args()
    groups = {"arm-thinker": [arm_item(i) for i in range(args.group)],
              "pixel-reasoner": [pixel_item(i) for i in range(args.group)]}
    report: dict[str, Any] = {"group": args.group, "repeats": args.repeats}
    # Nothing else starting in the server while it is timed: no document encoders warming up (they hold the GIL for
    # seconds), the sandbox left for its first use.
    with Server({"TOOLSERVER_DOC_WARM_UP": "false", "TOOLSERVER_SANDBOX_START": "first_use"}) as server:
        httpx.get(f"{server.url}/readyz", timeout=60)
        time.sleep(5)
        report["healthz_median_s"] = round(round_trip(server.url, args.repeats), 4)
        for profile, items in groups.items():
            wall, served, totals = over_http(server.url, profile, items, args.repeats)
            report[profile] = {"http_median_s": round(wall, 4), "server_median_s": round(served, 4),
                               "in_process_median_s": round(in_process(profile, items, args.repeats), 4),
                               "request_bytes": len(orjson.dumps({"profile": profile, "items": items})),
                               "mean_total": round(sum(totals) / len(totals), 4)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
