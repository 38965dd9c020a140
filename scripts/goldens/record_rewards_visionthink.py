"""Records tests/data/rewards/visionthink.json by running VisionThink's own reward (dvlab-research/VisionThink @
42afd8c3) as its efficient-reasoning recipe configures it (`scripts/run_efficient_gpt4o_judge.sh`):

- `verl/utils/reward_score/__init__.py` `_default_compute_score` (data source `open_source`, its
  `general_qa_reward_fn` `general_qa_tool`) → `verl/utils/reward_score/general_qa_tool.py` `compute_score`, with
  the `extra_info` that `verl/trainer/main_ppo.py` builds from the recipe's `data` settings (acc weight 1.0, format
  weight 0.5, tool-use weight 0.0, tool-call penalty 0.1, answers split out of `<answer>` for the judge);
- its GPT-4o judge (`GPT4VisionClient`, `openai.AzureOpenAI`) pointed at a local endpoint (AZURE_ENDPOINT) that
  records each request and answers the verdict each case scripts (scripts/goldens/judge_stub.py);
- the group step of `verl/trainer/ppo/ray_trainer.py` (`fit`: the soft tool-call penalty, ratio 0.2 and
  direct-answer penalty 0.1 of the recipe, `soft_tool_call_filter` off by default) for the cases that form a GRPO
  group: that block is taken from the file as it is and run over the reward manager's float32 tensors
  (`NaiveMultiThreadsToolRewardManager`: each rollout's score at its last response token).

Run with toolserver's venv Python (it has torch, openai, mathruler and math-verify, which the reference imports):
    <toolserver venv python> scripts/goldens/record_rewards_visionthink.py <checkout at 42afd8c3> \\
        tests/data/rewards/visionthink.json
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_stub import Recorder

SOURCE = "dvlab-research/VisionThink/verl/utils/reward_score/general_qa_tool.py@42afd8c3:compute_score"
EXTRA_INFO = {"acc_reward_weight": 1.0, "format_reward_weight": 0.5, "use_tool_reward_weight": 0.0,
              "tool_call_penalty": 0.1, "extract_answer_tags": "split", "general_qa_reward_fn": "general_qa_tool",
              "val_general_qa_reward_fn": None, "gpt_extract_answer": True, "model_system_prompt": None,
              "supervise_tool_label": False, "strict_tool_call_penalty": False}
Q = "<image>\nWhat is the name of the shop?"
CALL = '<tool_call>\n{"name": "resize_image", "arguments": {"action": "resize"}}\n</tool_call>'
TOOL = "<think>\nThe text is small.\n</think>\n" + CALL
RIGHT = "<think>\nI read it.\n</think>\n<answer>\nMoonbeam Bakery\n</answer>"
WRONG = "<think>\nI read it.\n</think>\n<answer>\nSunrise Cafe\n</answer>"
YES, NO = "Score: 1", "Score: 0"

# (name, assistant turns, ground truth, verdicts the judge gives, group)
CASES: list[tuple[str, list[str], str, list[str], str | None]] = [
    ("direct_correct", [RIGHT], "Moonbeam Bakery", [YES], None),
    ("direct_wrong", [WRONG], "Moonbeam Bakery", [NO], None),
    ("tool_then_correct", [TOOL, RIGHT], "Moonbeam Bakery", [YES], None),
    ("tool_then_wrong", [TOOL, WRONG], "Moonbeam Bakery", [NO], None),
    ("two_tools_then_correct", [TOOL, TOOL, RIGHT], "Moonbeam Bakery", [YES], None),
    ("no_think", ["<answer>Moonbeam Bakery</answer>"], "Moonbeam Bakery", [YES], None),
    ("two_answers", [RIGHT + "\n<answer>x</answer>"], "Moonbeam Bakery", [YES], None),
    ("call_inside_answer_turn", ["<think>a</think><answer>Moonbeam Bakery</answer><tool_call>{}</tool_call>"],
     "Moonbeam Bakery", [YES], None),
    ("single_turn_call_no_answer", [TOOL], "Moonbeam Bakery", [NO], None),
    ("tool_turn_with_answer", ["<think>a</think><answer>Moonbeam</answer><tool_call>{}</tool_call>", RIGHT],
     "Moonbeam Bakery", [YES], None),
    ("tool_turn_without_think", [CALL, RIGHT], "Moonbeam Bakery", [YES], None),
    ("final_turn_leading_space", [TOOL, "  " + RIGHT], "Moonbeam Bakery", [YES], None),
    ("final_turn_trailing_newline", [TOOL, RIGHT + "\n"], "Moonbeam Bakery", [YES], None),
    ("single_turn_padded", ["\n  " + RIGHT + "  \n"], "Moonbeam Bakery", [YES], None),
    ("no_answer_tags", ["Moonbeam Bakery"], "Moonbeam Bakery", [YES], None),
    ("verdict_with_both_digits", [WRONG], "Moonbeam Bakery", ["The score is 0, not 1"], None),
    ("verdict_retried", [RIGHT], "Moonbeam Bakery", ["I cannot tell.", YES], None),
    ("verdict_never_given", [RIGHT], "Moonbeam Bakery", ["No.", "No.", "No."], None),
    ("answer_split_last", ["<think>x</think><answer>A</answer> and <answer>Moonbeam Bakery</answer>"],
     "Moonbeam Bakery", [YES], None),
    # GRPO groups (one prompt's rollouts): the soft tool-call penalty looks at the group.
    ("g1_direct_correct", [RIGHT], "Moonbeam Bakery", [YES], "few_direct"),
    *[(f"g1_tool_correct_{i}", [TOOL, RIGHT], "Moonbeam Bakery", [YES], "few_direct") for i in range(5)],
    ("g1_tool_wrong", [TOOL, WRONG], "Moonbeam Bakery", [NO], "few_direct"),
    ("g2_direct_correct", [RIGHT], "Moonbeam Bakery", [YES], "many_direct"),
    ("g2_tool_correct", [TOOL, RIGHT], "Moonbeam Bakery", [YES], "many_direct"),
    ("g2_direct_wrong", [WRONG], "Moonbeam Bakery", [NO], "many_direct"),
    ("g2_no_format", ["<answer>Moonbeam Bakery</answer>"], "Moonbeam Bakery", [YES], "many_direct"),
    ("g3_tool_correct", [TOOL, RIGHT], "Moonbeam Bakery", [YES], "no_direct"),
    ("g3_tool_wrong", [TOOL, WRONG], "Moonbeam Bakery", [NO], "no_direct"),
    ("g3_direct_wrong", [WRONG], "Moonbeam Bakery", [NO], "no_direct"),
]


def group_block(ray_trainer: Path) -> str:
    """The soft tool-call penalty block of `RayPPOTrainer.fit`, as the file has it."""
    lines = ray_trainer.read_text().splitlines()
    marker = "if self.config.trainer.soft_tool_call_penalty_ratio > 0:"
    start = next(i for i, line in enumerate(lines) if marker in line)
    end = next(i for i in range(start, len(lines)) if "invalid_num += len(invalid_uids)" in lines[i])
    return textwrap.dedent("\n".join(lines[start:end]))


def run_group(block: str, results: list[tuple[float, float, float]]) -> list[float]:
    import torch

    n = len(results)
    reward = torch.tensor([[r[0]] for r in results], dtype=torch.float32)
    fmt = torch.tensor([[r[2]] for r in results], dtype=torch.float32)
    config = types.SimpleNamespace(
        trainer=types.SimpleNamespace(soft_tool_call_penalty_ratio=0.2, soft_tool_call_filter=False),
        data=types.SimpleNamespace(tool_call_penalty=0.1, acc_reward_weight=1.0, direct_answer_penalty=0.1),
        actor_rollout_ref=types.SimpleNamespace(rollout=types.SimpleNamespace(n=n)))
    scope: dict[str, Any] = {"self": types.SimpleNamespace(config=config), "reward_tensor": reward,
                             "format_reward_tensor": fmt, "torch": torch}
    exec(block, scope)  # the reference's own block
    return [float(v) for v in scope["reward_tensor"].sum(-1)]


def main(checkout: str, out: str) -> None:
    recorder = Recorder()
    os.environ.update(AZURE_ENDPOINT=recorder.url, AZURE_API_KEY="recording", AZURE_API_VERSION="2024-02-01")
    sys.path.insert(0, checkout)
    for name in ("verl", "verl.utils"):  # their __init__ files import the trainer's stack; the reward needs none
        sys.modules[name] = types.ModuleType(name)
        sys.modules[name].__path__ = [str(Path(checkout, *name.split(".")))]  # type: ignore[attr-defined]
    scores = importlib.import_module("verl.utils.reward_score")
    cases: list[dict[str, Any]] = []
    groups: dict[str, list[int]] = {}
    outputs: list[Any] = []
    for name, turns, truth, verdicts, group in CASES:
        recorder.take(verdicts)
        result = scores._default_compute_score(data_source="open_source", solution_str=list(turns),
                                               ground_truth=truth, extra_info=dict(EXTRA_INFO), prompt=Q,
                                               mode="train")
        judge = recorder.exchanges(verdicts)
        case: dict[str, Any] = {"name": name, "episode": {"turns": turns, "ground_truth": truth, "question": Q},
                                "judge": judge}
        if isinstance(result, dict):  # the judge gave no verdict: the reference filters the prompt's group out
            case["expected"] = {"total": 0.0, "terms": {}, "filtered": True}
        else:
            score, acc, fmt = result
            case["expected"] = {"total": score, "terms": {"accuracy": acc, "format": fmt}}
        if group:
            case["group"] = group
            groups.setdefault(group, []).append(len(cases))
        outputs.append(result)
        cases.append(case)
    block = group_block(Path(checkout) / "verl/trainer/ppo/ray_trainer.py")
    for members in groups.values():
        totals = run_group(block, [outputs[i] for i in members])
        for i, total in zip(members, totals, strict=True):
            cases[i]["expected"]["group_total"] = total
    golden = {"profile": "visionthink", "source": SOURCE,
              "recorded_with": "scripts/goldens/record_rewards_visionthink.py (its judge: a local endpoint)",
              "cases": cases}
    Path(out).write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
