"""Records tests/data/rewards/mini_o3.json by running Mini-o3's own reward code (Mini-o3/Mini-o3 @ 8654dbf4,
`verl/utils/reward_score/general_qa_tool.py`, loaded from the checkout by its path; it needs openai: record from a
throwaway venv) with its Azure client pointed at a local judge that records each request and answers the verdicts a
case scripts. `extra_info` is the recipe's (README: acc 1.0, format 0, tool_call_penalty 0, gpt_extract_answer,
extract_answer_tags strict; use_tool_reward_weight main_ppo's default 0.0) updated by the case's own; the turns
are `predict_str_list` and `raw_prompt` the prompt, as its reward manager passes them.

    /tmp/rv/bin/python scripts/goldens/record_rewards_mini_o3.py <mini-o3 checkout> <out.json>
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reward_recording import Judge, load

SOURCE = "Mini-o3/Mini-o3/verl/utils/reward_score/general_qa_tool.py@8654dbf4"
RECIPE = {"acc_reward_weight": 1.0, "format_reward_weight": 0.0, "use_tool_reward_weight": 0.0,
          "tool_call_penalty": 0.0, "extract_answer_tags": "strict", "general_qa_reward_fn": "general_qa_tool",
          "gpt_extract_answer": True}


def main() -> None:
    checkout, out = Path(sys.argv[1]), Path(sys.argv[2])
    judge = Judge()
    os.environ.update(API_KEY="key", END_POINT=judge.url.removesuffix("/v1"), API_VERSION="2024-10-21")
    module = load(checkout / "verl/utils/reward_score/general_qa_tool.py", "general_qa_tool")
    module.time.sleep = lambda _s: None  # its pauses between attempts change nothing but the wait
    from mini_o3_reward_cases import CASES

    cases = []
    for case in CASES:
        episode = case["episode"]
        judge.answers, judge.requests = list(case["answers"]), []
        extra = {**RECIPE, **{k: v for k, v in episode["extra"].items() if k != "raw_prompt"}}
        result = module.compute_score(episode["extra"]["raw_prompt"], list(episode["turns"]), episode["ground_truth"],
                                      extra)
        assert not judge.answers, case["name"]
        expected = ({"total": 0.0, "filtered": True} if isinstance(result, dict) else
                    {"total": float(result[0]), "terms": {"accuracy": float(result[1]) / extra["acc_reward_weight"]}})
        cases.append({"name": case["name"], "episode": episode, "judge": judge.requests, "expected": expected})
    out.write_text(json.dumps({"profile": "mini-o3", "source": SOURCE, "recorded_with": "record_rewards_mini_o3.py",
                               "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
