"""The groups of Pixel-Reasoner's reward goldens (record_rewards_pixel_reasoner.py runs verl-tool's reward manager on
them). Each episode's calls: `ok` is the tool server's `valid`."""

from __future__ import annotations

from typing import Any

CROP = ('<think>zoom</think><tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [0.1, 0.1, 0.5, 0.5], '
        '"target_image": 1}}</tool_call>')
GOOD = {"tool": "crop_image", "ok": True, "images": 1,
        "text": "Here is the cropped image. (Image Size: 56x56)\n<image>"}
BAD = {"tool": "crop_image", "ok": False, "text": "Invalid target_image index. It should be an integer between 1 and "
                                                  "the number of previous images (1)."}


def rollout(name: str, turns: list[str], calls: list[dict[str, Any]], truth: Any = "5", group: str = "g1") -> dict:
    return {"name": name, "group": group, "episode": {"turns": turns, "calls": calls, "ground_truth": truth}}


CASES: list[dict[str, Any]] = [
    # g1: one of four rollouts zooms (rate 0.25 < 0.3: the zooming one gets the curiosity bonus)
    rollout("g1 zoom, right", [CROP, "The count is \\boxed{5}."], [GOOD]),
    rollout("g1 no zoom, right", ["There are \\boxed{5} birds."], []),
    rollout("g1 no zoom, wrong", ["There are \\boxed{4} birds."], []),
    rollout("g1 no zoom, no box", ["five birds"], []),
    # g2: two of three zoom (rate 2/3: no bonus); one zooms three times (redundancy)
    rollout("g2 three zooms, right", [CROP, CROP, CROP, "\\boxed{5}"], [GOOD, GOOD, GOOD], group="g2"),
    rollout("g2 failed zoom, wrong", [CROP, "\\boxed{6}"], [BAD], group="g2"),
    rollout("g2 zoom, right with units", [CROP, "It is \\boxed{5 cm}."], [GOOD], truth="5", group="g2"),
    # g3: alone, a list of ground truths and a \\boxed one
    rollout("g3 list of truths", ["\\boxed{\\dfrac{1}{2}}"], [], truth=["0.4", "\\boxed{\\frac{1}{2}}"], group="g3"),
    rollout("g4 lowercase retry", ["\\boxed{\\text{Yes}}"], [], truth="yes", group="g4"),
]
