"""The episodes of DeepEyes' reward goldens (record_rewards_deepeyes.py runs the reference on them; the tests score
them with toolserver's reward). `answers`: the judge's verdict texts, in the order the reference asks."""

from __future__ import annotations

from typing import Any

Q = "Is the countertop tan or blue?"
ZOOM = '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [10, 20, 200, 180]}}</tool_call>'
ROTATE = '<tool_call>{"name": "image_rotate_tool", "arguments": {"angle": 90}}</tool_call>'
BAD_ZOOM = '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [300, 20, 100, 180]}}</tool_call>'
THINK = "<think>The countertop is small; let me look closer.</think>"
FINAL = "<think>The zoomed view shows a tan surface.</think><answer>tan</answer>"
LONG = "x" * 1000


def general(name: str, response: str, answers: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "answers": answers,
            "episode": {"response": response, "ground_truth": "The countertop is tan.", "question": Q, **extra}}


def multi(name: str, turns: list[str], answers: list[str]) -> dict[str, Any]:
    return {"name": name, "answers": answers,
            "episode": {"turns": turns, "ground_truth": "The countertop is tan.", "question": Q}}


CASES: list[dict[str, Any]] = [
    general("right, no tool, bare verdict", "<think>It looks tan.</think><answer>tan</answer>", ["1"]),
    general("right, verdict after Judgement:", "<think>tan</think><answer>tan</answer>", ["Judgement: 1"]),
    general("wrong", "<think>blue</think><answer>blue</answer>", ["0"]),
    general("verdict unreadable", "<think>hm</think><answer>tan</answer>", ["The answer is consistent."]),
    general("verdict Judgement: 10 holds a 1", "<think>x</think><answer>tan</answer>", ["Judgement: 10"]),
    general("think tags unbalanced", "<think>x</think></think><answer>tan</answer>", ["1"]),
    general("answer tags unbalanced after think", "<think>x</think><answer>tan</answer></answer>", ["1"]),
    general("vision tokens unbalanced", "<think>x</think><|vision_start|><|image_pad|><answer>tan</answer>", ["1"]),
    general("no answer tags: the whole text is the answer", "<think>x</think> it is tan", ["1"]),
    general("answer of 1000 characters", f"<think>x</think><answer>{LONG}</answer>", ["1"]),
    general("data_source vstar", "<think>x</think><answer>tan</answer>", ["1"], extra={"data_source": "vstar"}),
    multi("zoom, then right", [THINK + ZOOM, FINAL], ["1"]),
    multi("zoom and rotate in one turn, then wrong", [THINK + ZOOM + ROTATE, "<think>b</think><answer>blue</answer>"],
          ["0"]),
    multi("refused zoom, then right without an image", [THINK + BAD_ZOOM, FINAL], ["1"]),
    multi("zoom, then no answer: the turn prompt's <answer> is read", [THINK + ZOOM, "<think>still unsure"], ["0"]),
    multi("two zoom turns, then right", [THINK + ZOOM, THINK + ZOOM, FINAL], ["Judgement: 1"]),
    {"name": "geoguessr right", "answers": ["## Equivalence Judgement\nTRUE"],
     "episode": {"response": "<think>x</think><answer>Paris, France</answer>", "ground_truth": "Paris",
                 "question": "Where was this photo taken?", "extra": {"data_source": "geoguessr"}}},
    {"name": "geoguessr asked again after an unreadable verdict", "answers": ["TRUE or FALSE", "## Equivalence "
                                                                             "Judgement\nFALSE"],
     "episode": {"response": "<think>x</think><answer>Rome</answer>", "ground_truth": "Paris",
                 "question": "Where was this photo taken?", "extra": {"data_source": "geoguessr"}}},
    {"name": "geoguessr without an answer block", "answers": [],
     "episode": {"response": "<think>x</think> Paris", "ground_truth": "Paris", "question": "Where?",
                 "extra": {"data_source": "geoguessr"}}},
    {"name": "math verified by math-verify", "answers": [],
     "episode": {"response": "<think>half</think> The answer is \\boxed{0.50}", "ground_truth": "0.5",
                 "question": "What is 1/2?", "extra": {"data_source": "thinklite_eureka"}}},
    {"name": "math judged", "answers": ["## Equivalence Judgement\nTRUE"],
     "episode": {"response": "<think>x</think> \\boxed{one half}", "ground_truth": "0.5",
                 "question": "What is 1/2?", "extra": {"data_source": "xince"}}},
    {"name": "math two boxes", "answers": [],
     "episode": {"response": "<think>x</think> \\boxed{1} or \\boxed{0.5}", "ground_truth": "0.5",
                 "question": "What is 1/2?", "extra": {"data_source": "xince"}}},
    {"name": "math no box", "answers": [],
     "episode": {"response": "<think>x</think> 0.5", "ground_truth": "0.5", "question": "What is 1/2?",
                 "extra": {"data_source": "xince"}}},
]
