"""The episodes of Mini-o3's reward goldens (record_rewards_mini_o3.py runs general_qa_tool.py on them)."""

from __future__ import annotations

from typing import Any

RAW = [{"role": "user", "content": "<image>\nWhat is written on the blue sign?"}]
STEP = ('<think>The sign is small.</think> <grounding>{"bbox_2d": [0.1, 0.2, 0.5, 0.6], "source": '
        '"original_image"}</grounding>')
ANSWER = "<think>It reads Jptica.</think> <answer>Jptica</answer>"


def case(name: str, turns: list[str], answers: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "answers": answers,
            "episode": {"turns": turns, "ground_truth": "Jptica", "extra": {"raw_prompt": RAW, **extra}}}


CASES: list[dict[str, Any]] = [
    case("direct answer, right", [ANSWER], ["Score: 1"]),
    case("zoom then right", [STEP, ANSWER], ["The prediction matches.\nScore: 1"]),
    case("zoom twice then wrong", [STEP, STEP, "<think>x</think> <answer>Optica</answer>"], ["Score: 0"]),
    case("no answer: no judge", [STEP, "<think>I cannot tell.</think>"], []),
    case("first answer of the joined turns", ["<think>a</think> <answer>Jptica</answer> <answer>no</answer>"],
         ["score: 1 because"]),
    case("unreadable verdicts retried", [ANSWER], ["I think it matches", "Score: maybe", "Score: 1"]),
    case("five unreadable verdicts: filtered", [ANSWER], ["no", "no", "no", "no", "no"]),
    case("bad step format", ["<grounding>{}</grounding>", ANSWER], ["Score: 1"]),
    case("recipe weights overridden", [STEP, ANSWER], ["Score: 1"], acc_reward_weight=1.0,
         format_reward_weight=0.5, tool_call_penalty=0.1, use_tool_reward_weight=0.5),
    case("overridden weights, direct answer with a stray grounding", ["<think>a</think> <grounding>x</grounding> "
                                                                       "<answer>Jptica</answer>"], ["Score: 0"],
         format_reward_weight=0.5, tool_call_penalty=0.2, use_tool_reward_weight=0.25),
]
