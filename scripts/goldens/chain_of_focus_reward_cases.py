"""The episodes of Chain-of-Focus' reward goldens (record_rewards_chain_of_focus.py runs zoomin_reward3.py on
them). `answers`: the judge's verdicts in the order the reference asks."""

from __future__ import annotations

from typing import Any

Q = "What is the color of the umbrella?"
PROMPT = ("\nThink in the mind first, and then decide whether to call tools one or more times OR provide final "
          "answer. Format strictly as: <think>...</think> <tool_call>...</tool_call> <tool_call>...</tool_call> "
          "(if any tools needed) OR <answer>...</answer> (if no tools needed).")
CALL = ('<think>Look closer.</think><tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": '
        '[1, 2, 50, 60]}}</tool_call>')


def case(name: str, turns: list[str], answers: list[str], calls: int = 0, truth: str = "red",
         **extra: Any) -> dict[str, Any]:
    return {"name": name, "answers": answers,
            "episode": {"turns": turns, "ground_truth": truth, "question": Q, "extra": extra,
                        "calls": [{"tool": "image_zoom_in_tool", "text": PROMPT, "images": 1}] * calls}}


CASES: list[dict[str, Any]] = [
    case("right after a zoom", [CALL, "<think>It is red.</think><answer>red</answer>"], ["1"], calls=1),
    case("right, no zoom", ["<think>red</think><answer> red </answer>"], ["Judgement: 1"]),
    case("wrong", ["<think>blue</think><answer>blue</answer>"], ["0"]),
    case("no think", ["<answer>red</answer>"], ["1"]),
    case("no answer: the empty answer judged", [CALL, "<think>hmm</think>"], ["0"], calls=1),
    case("last of two answers", ["<think>x</think><answer>blue</answer><answer>red</answer>"], ["1"]),
    case("answer over 1000 words", ["<think>x</think><answer>" + "red " * 1001 + "</answer>"], ["1"]),
    case("math verified", ["<think>x</think><answer>0.50</answer>"], [], truth="0.5", data_source="thinklite_eureka"),
    case("math judged", ["<answer>one half</answer>"], ["## Equivalence Judgement\nTRUE"], truth="0.5",
         data_source="thinklite_eureka"),
    case("math empty answer", ["<think>x</think>"], [], truth="0.5", data_source="thinklite_eureka"),
    case("chart source", ["<think>x</think><answer>red</answer>"], ["1"], data_source="chart"),
]
