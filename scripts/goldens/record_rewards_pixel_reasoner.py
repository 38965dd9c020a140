"""Records tests/data/rewards/pixel_reasoner.json by running verl-tool's Pixel-Reasoner reward manager
(TIGER-AI-Lab/verl-tool @ 980962b, `verl_tool/workers/reward_manager/pixel_reasoner.py`, loaded by its path) on
GRPO groups: its `pixel_reasoner_score`, `get_group_info` and `add_additional_penalties`, composed as its `__call__`
composes them for each rollout. Stand-ins, and only these: `verl` (`DataProto`, and `register` as a no-op
decorator) and torch, which only its `__call__` uses, and its sibling modules `.utils`, `.reward_score`, `.torl`
(the names it imports but this reward does not use); a rollout is an object with its `non_tensor_batch`
(`tool_interact_info`: one entry per call, `valid_action` its `ok`; `uid`: its group). It needs math-verify
(verl-tool pins 0.7.0) and regex: record from a throwaway venv. The decoded response is each turn followed by its
observation as the agent loop appends it (restated here from `verltool_agent_loop.py`'s mtrl_sep with Qwen's
template, decoded without special tokens).

    /tmp/rv/bin/python scripts/goldens/record_rewards_pixel_reasoner.py <verl-tool checkout> <out.json>
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reward_recording import load

SOURCE = "TIGER-AI-Lab/verl-tool/verl_tool/workers/reward_manager/pixel_reasoner.py@980962b"


def stand_ins() -> None:
    verl = types.ModuleType("verl")
    verl.DataProto = object  # type: ignore[attr-defined]
    managers = types.ModuleType("verl.workers.reward_manager")
    managers.register = lambda name: (lambda cls: cls)  # type: ignore[attr-defined]
    sys.modules.update({"verl": verl, "verl.workers": types.ModuleType("verl.workers"),
                        "verl.workers.reward_manager": managers, "torch": types.ModuleType("torch")})
    package = types.ModuleType("rm")
    package.__path__ = []  # type: ignore[attr-defined]
    sys.modules["rm"] = package
    for name, attrs in {"utils": ["replace_consecutive_tokens"], "reward_score": ["_default_compute_score"],
                        "reward_score.torl_math": ["compute_score"], "torl": ["ToRLRewardManager"]}.items():
        module = types.ModuleType(f"rm.{name}")
        for attr in attrs:
            setattr(module, attr, None)
        sys.modules[f"rm.{name}"] = module


class Item:
    def __init__(self, uid: str, calls: list[dict[str, Any]]):
        self.non_tensor_batch = {"uid": uid, "tool_interact_info": [{"valid_action": int(c.get("ok", True))}
                                                                    for c in calls]}


def decoded(episode: dict[str, Any]) -> str:
    calls = iter(episode["calls"])
    text = ""
    for turn in episode["turns"][:-1]:
        obs = next(calls)["text"].replace("<image>", "")
        text += turn + "\nuser\n" + obs + "\nassistant\n"
    return text + episode["turns"][-1]


def main() -> None:
    checkout, out = Path(sys.argv[1]), Path(sys.argv[2])
    stand_ins()
    module = load(checkout / "verl_tool/workers/reward_manager/pixel_reasoner.py", "rm.pixel_reasoner")
    manager = module.PixelReasonerRewardManager(tokenizer=None, num_examine=0)
    from pixel_reasoner_reward_cases import CASES

    items = [Item(case["group"], case["episode"]["calls"]) for case in CASES]
    group_info = manager.get_group_info(_Data(items))
    cases = []
    for case, item in zip(CASES, items, strict=True):
        response = decoded(case["episode"])
        accuracy = manager.compute_score(solution_str=response, ground_truth=case["episode"]["ground_truth"])
        score = {"accuracy": 1.0 if accuracy > 0 else 0.0, "score": accuracy}
        score = manager.add_additional_penalties(response, item, score, group_info.get(case["group"], {}))
        cases.append({"name": case["name"], "group": case["group"], "episode": {**case["episode"], "decoded": response},
                      "expected": {"total": float(score["score"]), "terms": {
                          "accuracy": score["accuracy"], "curiosity": float(score["curiousity_penalty"]),
                          "action_redundancy": float(score["action_redundancy_penalty"])}}})
    out.write_text(json.dumps({"profile": "pixel-reasoner", "source": SOURCE, "cases": cases}, indent=1) + "\n")


class _Data:
    def __init__(self, items: list[Item]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Item:
        return self.items[i]


if __name__ == "__main__":
    main()
