"""Records tests/data/rewards/chain_of_focus.json by running Chain-of-Focus' own reward code
(xtong-zhang/Chain-of-Focus @ 431ff0dd, `verl/recipe/zoomin/zoomin_reward3.py`, `zoomin_reward_function`, loaded from
the checkout by its path; it needs openai, requests and math-verify: record from a throwaway venv). Its judge is
hard-wired to http://127.0.0.1:55222/v1: the local judge listens there, records each request and answers the
verdicts a case scripts. The decoded response is each turn followed by one tool message per call, as
`toolserver.rewards.text.with_tool_turns` writes it (restated here).

    /tmp/rv/bin/python scripts/goldens/record_rewards_chain_of_focus.py <chain-of-focus checkout> <out.json>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reward_recording import Judge, load

SOURCE = "xtong-zhang/Chain-of-Focus/verl/recipe/zoomin/zoomin_reward3.py@431ff0dd"
TOOL_TURN = "\nuser\n<tool_response>\n{text}\n</tool_response>\nassistant\n"


def decoded(episode: dict[str, Any]) -> str:
    calls = iter(episode["calls"])
    text = ""
    for turn in episode["turns"][:-1]:
        text += turn + (TOOL_TURN.format(text=next(calls)["text"]) if "<tool_call>" in turn else "")
    return text + episode["turns"][-1]


def main() -> None:
    checkout, out = Path(sys.argv[1]), Path(sys.argv[2])
    judge = Judge(port=55222)
    module = load(checkout / "verl/recipe/zoomin/zoomin_reward3.py", "zoomin_reward3")
    from chain_of_focus_reward_cases import CASES

    cases = []
    for case in CASES:
        episode = case["episode"]
        judge.answers, judge.requests = list(case["answers"]), []
        response = decoded(episode)
        source = episode["extra"].get("data_source", "vstar")
        result = module.zoomin_reward_function(source, response, episode["ground_truth"], "acc_format",
                                               {"question": episode["question"]})
        assert not judge.answers, case["name"]
        cases.append({"name": case["name"], "episode": {**episode, "decoded": response}, "judge": judge.requests,
                      "expected": {"total": result["score"], "terms": {"accuracy": result["acc_score"],
                                                                       "format": result["format_score"]}}})
    out.write_text(json.dumps({"profile": "chain-of-focus", "source": SOURCE, "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
