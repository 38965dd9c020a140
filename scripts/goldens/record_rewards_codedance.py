"""Records tests/data/rewards/codedance.json by running CodeDance's own reward (CodeDance-VL/CodeDance @ 62f8c6f5,
`verl/utils/reward_score/llm_judge_qwen_tool_step.py`, the `custom_reward_function` of its recipes
`examples/run_qwen2.5-vl-7b-sft-tool-codeformat_step_beta0.*.sh`): `compute_score_batch` over crafted decoded
responses of each data-source family (`vstar`/`vl_agent`/`chart`, `thinklite_eureka`/`xince`, any other name).

Its judge (the OpenAI-compatible server at LLM_AS_A_JUDGE_BASE) is a local endpoint that records each request and
answers the verdict each case scripts (scripts/goldens/judge_stub.py). It imports math-verify (its math data sources
check the answer with it first) and openai: toolserver's venv has both (math-verify 0.8.0).

    git -C <CodeDance> show 62f8c6f5:verl/utils/reward_score/llm_judge_qwen_tool_step.py \\
        > <dir>/llm_judge_qwen_tool_step.py
    <toolserver venv python> scripts/goldens/record_rewards_codedance.py <dir> tests/data/rewards/codedance.json
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_stub import Recorder

SOURCE = "CodeDance-VL/CodeDance/verl/utils/reward_score/llm_judge_qwen_tool_step.py@62f8c6f5:compute_score_batch"
Q = "What color is the umbrella?"
THINK = "<think>\nLet me check.\n</think>\n"
CALL = "<tool_call>\n{\"name\": \"execute_python_code\", \"arguments\": {\"code\": \"print(1)\"}}\n</tool_call>"


def turn(result: str) -> str:
    return (CALL + "<|im_end|>\n<|im_start|>user\n<tool_response>\n" + result
            + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


OK = turn("Code execution successful, output:\n1\n")
EMPTY = turn("Code executed successfully. No explicit output or figures produced.")
ERROR = turn("--- Execution Error (NameError) ---\nname 'x' is not defined")
SLOW = turn("Execution failed: timeout")
YES, NO = "1", "0"
MATH_TRUE, MATH_FALSE = "## Equivalence Judgement\nTRUE", "## Equivalence Judgement\nFALSE"

# (name, data source, decoded response, ground truth, verdicts)
CASES: list[tuple[str, str, str, str, list[str]]] = [
    ("vstar_correct", "vstar", THINK + "<answer>red</answer>", "red", [YES]),
    ("vstar_wrong", "vstar", THINK + "<answer>blue</answer>", "red", [NO]),
    ("vstar_judgement_prefix", "vstar", THINK + "<answer>red</answer>", "red", ["Judgement: 1"]),
    ("vstar_judgement_after_zero", "vstar", THINK + "<answer>red</answer>", "red", ["0 ... Judgement: 0"]),
    ("vstar_verdict_without_digit", "vstar", THINK + "<answer>red</answer>", "red", ["consistent"]),
    ("vstar_verdict_both_digits", "vstar", THINK + "<answer>red</answer>", "red", ["10"]),
    ("vstar_no_answer", "vstar", THINK + "It is red.", "red", [NO]),
    ("vstar_two_answers", "vstar", THINK + "<answer>red</answer><answer>red</answer>", "red", [YES]),
    ("vstar_unbalanced_think", "vstar", "<think>a<think>b</think><answer>red</answer>", "red", [YES]),
    ("vstar_long_answer", "vstar", THINK + "<answer>" + "r" * 1000 + "</answer>", "red", [YES]),
    ("vl_agent_one_good_call", "vl_agent", THINK + OK + THINK + "<answer>red</answer>", "red", [YES]),
    ("chart_good_and_bad_calls_correct", "chart", THINK + OK + ERROR + EMPTY + THINK + "<answer>red</answer>", "red",
     [YES]),
    ("chart_bad_calls_wrong", "chart", THINK + ERROR + SLOW + THINK + "<answer>blue</answer>", "red", [NO]),
    ("math_rule_verified", "thinklite_eureka", THINK + "<answer>\\frac{1}{2}</answer>", "0.5", []),
    ("math_judge_true", "xince", THINK + "<answer>one half</answer>", "0.5", [MATH_TRUE]),
    ("math_judge_false", "xince", THINK + "<answer>3</answer>", "4", [MATH_FALSE]),
    ("math_judge_undecided", "xince", THINK + "<answer>3</answer>", "4", ["TRUE or FALSE"]),
    ("math_last_answer", "thinklite_eureka", THINK + "<answer>7</answer> so <answer>4</answer>", "4", []),
    ("math_tool_call_after_think", "thinklite_eureka", THINK + "<tool_call>x</tool_call><answer>4</answer>", "4",
     []),
    ("math_no_answer", "thinklite_eureka", THINK + "It is 4.", "4", []),
    ("math_with_tools", "xince", THINK + OK + EMPTY + THINK + "<answer>4</answer>", "4", []),
    ("other_source_like_sa1b", "SA1B", THINK + OK + THINK + "<answer>red</answer>", "red", [YES]),
    ("unnamed_source", "", THINK + "<answer>red</answer>", "red", [NO]),
]


def main(ref_dir: str, out: str) -> None:
    recorder = Recorder()
    os.environ["LLM_AS_A_JUDGE_BASE"] = recorder.url + "/v1"
    spec = importlib.util.spec_from_file_location("judge_step", Path(ref_dir) / "llm_judge_qwen_tool_step.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cases: list[dict[str, Any]] = []
    for name, source, response, truth, verdicts in CASES:
        recorder.take(verdicts)
        result = module.compute_score_batch([source], [response], [truth], [{"question": Q}])[0]
        assert not recorder.answers and "error" not in result, (name, result)
        rate = result["tool_success_rate"]
        terms = {"accuracy": result["acc"], "format": result["format_r"],
                 "tool_reward": result["tool_reward_component"]}
        cases.append({"name": name, "episode": {"response": response, "ground_truth": truth, "question": Q,
                                                 "extra": {"data_source": source}},
                      "judge": recorder.exchanges(verdicts),
                      "expected": {"total": result["score"], "terms": terms, "tool_step": result["tool_step"],
                                   "tool_success_rate": None if math.isnan(rate) else rate,
                                   "answer": result["answer"]}})
    golden = {"profile": "codedance", "source": SOURCE,
              "recorded_with": "scripts/goldens/record_rewards_codedance.py (its judge: a local endpoint; "
              "math-verify 0.8.0)", "cases": cases}
    Path(out).write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
