"""Records tests/data/rewards/deepeyes_v2.json by running DeepEyesV2's own reward (Visual-Agent/DeepEyesV2 @ 0373e6e0,
`reinforcement_learning/verl/utils/reward_score/deepeyesv2.py`) for its three training data sources as
`verl/utils/reward_score/__init__.py` dispatches them (`perception` → `compute_score`, `reason` → `compute_score_math`,
`search` → `compute_score_search`) over crafted decoded responses.

Its judge (an OpenAI-compatible server at LLM_AS_A_JUDGE_BASE, whose served model it reads from `/models` at import)
is a local endpoint that records each request and answers the verdict each case scripts
(scripts/goldens/judge_stub.py). The module reads its system prompt from `./verify_prompt.md`, so the script runs in
the module's directory. It imports math-verify (unused by these paths) and openai: toolserver's venv has both.

    git -C <DeepEyesV2> archive 0373e6e0 reinforcement_learning/verl/utils/reward_score | tar -x -C <dir>
    <toolserver venv python> scripts/goldens/record_rewards_deepeyes_v2.py <dir> tests/data/rewards/deepeyes_v2.json
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_stub import Recorder

SOURCE = "Visual-Agent/DeepEyesV2/reinforcement_learning/verl/utils/reward_score/deepeyesv2.py@0373e6e0"
FUNCTIONS = {"perception": "compute_score", "reason": "compute_score_math", "search": "compute_score_search"}
Q = "What is written on the sign?"
CODE = "<code>\n```python\nprint(1)\n```\n</code>"
OBS = "<|im_end|>\n<|im_start|>user\nCode execution result:\nstdout:\n```\n1\n```\n\nstderr:\n```\n\n```\n\n<|im_end|>"
THINK = "<think>\nLet me look.\n</think>\n"
YES = "<最终结果>Yes<\\最终结果>"
NO = "<最终结果>No<\\最终结果>"
LONG = "x" * 300

# (name, data source, decoded response, ground truth, verdicts)
CASES: list[tuple[str, str, str, str, list[str]]] = [
    ("perception_correct", "perception", THINK + "<answer>STOP</answer>", "STOP", [YES]),
    ("perception_wrong", "perception", THINK + "<answer>GO</answer>", "STOP", [NO]),
    ("perception_code_then_answer", "perception",
     "Let me crop.\n" + CODE + OBS + "\n<|im_start|>assistant\n<think>\nSee.\n</think>\n<answer>STOP</answer>",
     "STOP", [YES]),
    ("perception_no_think_prefix", "perception", "I see it.</think><answer>STOP</answer>", "STOP", [YES]),
    ("perception_unbalanced_think", "perception", "<think>a</think><think>b<answer>STOP</answer>", "STOP", [YES]),
    ("perception_unbalanced_code", "perception", THINK + "<code>print(1)\n<answer>STOP</answer>", "STOP", [YES]),
    ("perception_no_answer", "perception", THINK + "It says STOP.", "STOP", [NO]),
    ("perception_empty_answer", "perception", THINK + "<answer> </answer>", "STOP", [NO]),
    ("perception_long_answer", "perception", THINK + "<answer>" + LONG + "</answer>", "STOP", []),
    ("perception_boxed_verdict", "perception", THINK + "<answer>STOP</answer>", "STOP", ["so \\boxed{Yes}"]),
    ("perception_plain_yes", "perception", THINK + "<answer>STOP</answer>", "STOP", ["Yes, they match."]),
    ("perception_lowercase_yes", "perception", THINK + "<answer>STOP</answer>", "STOP", ["yes"]),
    ("perception_answer_before_think_end", "perception", "<think><answer>A</answer></think>", "A", [YES]),
    ("search_correct_no_search", "search", THINK + "<answer>Paris</answer>", "Paris", [YES]),
    ("search_correct_with_search", "search",
     THINK + '<tool_call>{"name": "search", "arguments": {"query": "capital"}}</tool_call>' + OBS
     + "\n<|im_start|>assistant\n<think>ok</think><answer>Paris</answer>", "Paris", [YES]),
    ("search_wrong_with_search", "search",
     THINK + "<tool_call>{}</tool_call>" + "<think>ok</think><answer>Rome</answer>", "Paris", [NO]),
    ("search_unbalanced_call", "search", THINK + "<tool_call>{}<think>ok</think><answer>Paris</answer>", "Paris",
     [YES]),
    ("search_long_answer", "search", THINK + "<answer>" + LONG + "</answer>", "Paris", []),
    ("reason_true", "reason", THINK + "<answer>$\\frac{1}{2}$</answer>", "1/2",
     ["## Equivalence Judgement\nTRUE"]),
    ("reason_false", "reason", THINK + "<answer>3</answer>", "4", ["## Equivalence Judgement\nFALSE"]),
    ("reason_both_words", "reason", THINK + "<answer>3</answer>", "3", ["TRUE or FALSE? TRUE"]),
    ("reason_neither_word", "reason", THINK + "<answer>3</answer>", "3", ["I am not sure."]),
    ("reason_normalized_units", "reason", THINK + "<answer>x = 5 \\text{ cm}</answer>", "5",
     ["## Equivalence Judgement\nTRUE"]),
    ("reason_no_answer", "reason", THINK + "The answer is 3.", "3", []),
    ("reason_normalizes_to_empty", "reason", THINK + "<answer>$ $</answer>", "3", []),
    ("reason_empty_ground_truth", "reason", THINK + "<answer>3</answer>", "", []),
    ("reason_boxed_answer", "reason", THINK + "<answer>\\boxed{1,000}</answer>", "1000",
     ["## Equivalence Judgement\nTRUE"]),
    ("reason_judgement_heading_twice", "reason", THINK + "<answer>3</answer>", "3",
     ["## Equivalence Judgement\nFALSE\n## Equivalence Judgement\nTRUE"]),
]


def main(ref_dir: str, out: str) -> None:
    recorder = Recorder()
    os.environ["LLM_AS_A_JUDGE_BASE"] = recorder.url + "/v1"
    folder = Path(ref_dir) / "reinforcement_learning/verl/utils/reward_score"
    os.chdir(folder)
    spec = importlib.util.spec_from_file_location("deepeyesv2", folder / "deepeyesv2.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cases: list[dict[str, Any]] = []
    for name, source, response, truth, verdicts in CASES:
        recorder.take(verdicts)
        result = getattr(module, FUNCTIONS[source])(response, truth, {"question": Q})
        assert not recorder.answers, (name, "verdicts left unused")
        cases.append({"name": name, "episode": {"response": response, "ground_truth": truth, "question": Q,
                                                 "extra": {"data_source": source}},
                      "judge": recorder.exchanges(verdicts),
                      "expected": {"total": result["score"],
                                   "terms": {"accuracy": result["acc"], "format": result["format"]}}})
    golden = {"profile": "deepeyes-v2", "source": SOURCE,
              "recorded_with": "scripts/goldens/record_rewards_deepeyes_v2.py (its judge: a local endpoint)",
              "cases": cases}
    Path(out).write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], str(Path(sys.argv[2]).resolve()))
