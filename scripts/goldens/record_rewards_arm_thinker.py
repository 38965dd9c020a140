"""Records tests/data/rewards/arm_thinker.json by running ARM-Thinker's own reward code (InternLM/ARM-Thinker @
96b1baf, `verl/utils/reward_score/{mmif,pair_rm_with_tool_reward_v8,llava_critic_reward_v3,mp_docvqa_reward_v1}.py`,
each loaded from the checkout by its path; `mp_docvqa_reward_v1` imports `eval_utils.utils`, which needs openai,
httpx and python-dotenv: record from a throwaway venv with them).

The function is picked by `data_source` as `verl/utils/reward_score/__init__.py` picks it, with the reward versions
its environment variables default to. The decoded response is each turn followed, for each of its calls, by the
tool turn as Qwen's chat template renders a tool message with its special tokens skipped.

    /tmp/rv/bin/python scripts/goldens/record_rewards_arm_thinker.py <arm-thinker checkout> <out.json>
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

SOURCE = "InternLM/ARM-Thinker/verl/utils/reward_score@96b1baf"
MODULES = {"mmif": "mmif", "deepeyes_crop": "pair_rm_with_tool_reward_v8", "llava_critic": "llava_critic_reward_v3",
           "mp_docvqa": "mp_docvqa_reward_v1"}


def load(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def decoded(episode: dict[str, Any]) -> str:
    """One call per turn in these cases: the turn's call (if it has one) answered by the next call logged."""
    calls = iter(episode["calls"])
    text = ""
    for turn in episode["turns"][:-1]:
        text += turn
        if "<tool_call>" in turn:
            text += "\nuser\n<tool_response>\n" + next(calls)["text"] + "\n</tool_response>\nassistant\n"
    return text + episode["turns"][-1]


def main() -> None:
    checkout, out = Path(sys.argv[1]), Path(sys.argv[2])
    sys.path.insert(0, str(checkout))  # eval_utils.utils
    modules = {k: load(checkout / f"verl/utils/reward_score/{v}.py", v) for k, v in MODULES.items()}
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from arm_thinker_reward_cases import CASES

    cases = []
    for case in CASES:
        episode = case["episode"]
        source = episode["extra"].get("data_source", "mmif")
        module = modules["mmif" if "mmif" in source else source]
        response = decoded(episode)
        total = module.compute_score(response, episode["ground_truth"], dict(episode["extra"]))
        cases.append({"name": case["name"], "episode": {**episode, "decoded": response},
                      "expected": {"total": float(total)}})
    out.write_text(json.dumps({"profile": "arm-thinker", "source": SOURCE, "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
