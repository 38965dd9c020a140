"""Records tests/data/rewards/thyme.json by running Thyme's own reward (yfzhang114/Thyme @ b9285b7a) as `scripts/rl.sh`
trains: the reward functions `fmt_orm`, `vqa_orm`, `cst_orm` of `examples/train/grpo/plugin/agent_rm.py` (their
defaults: FMT_WEIGHT 0.5, VQA_WEIGHT 1 with VQA_NORM 1, CST_WEIGHT 0.5), each called as swift's GRPO trainer calls
it (`completions`, `solution`, and the dataset's `images` and `question` columns), then the trainer's combination
(`swift/trainers/rlhf_trainer/grpo_trainer.py` `_score_completions`: the block from the VQA mask to the weighted
sum, taken from the file as it is and run over float32 tensors, reward weights all 1, on the CPU).

Its judge (`llm_openai_api`: `http://<REWARD_API_ADDRESS>:<QWEN_API_PORT>/v1/chat/completions`) is a local endpoint
that records each request and answers the verdicts each case scripts (scripts/goldens/judge_stub.py): the VQA
judge's first (when the answer is not verified as math), then the consistency judge's.

Stand-ins, and only these: `swift.plugin` (its `ORM` base and `orms` registry; the real `strict_math_verify`,
`math_equal`, `math_normalize` files are loaded under it) and `swift.utils.get_logger`.

Needs a throwaway venv with math-verify, latex2sympy2_extended, pylatexenc, timeout-decorator, httpx,
antlr4-python3-runtime 4.11 (sympy's LaTeX parser, which `math_equal` uses), and torch (toolserver's venv's
site-packages, put last on the path):
    git -C <Thyme> archive b9285b7a examples/train/grpo/plugin/agent_rm.py swift/plugin \\
        swift/trainers/rlhf_trainer/grpo_trainer.py | tar -x -C <dir>
    /tmp/rw-venv/bin/python scripts/goldens/record_rewards_thyme.py <dir> tests/data/rewards/thyme.json \\
        <toolserver venv site-packages>
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_stub import Recorder

SOURCE = "yfzhang114/Thyme/examples/train/grpo/plugin/agent_rm.py@b9285b7a:fmt_orm+vqa_orm+cst_orm"
ORDER = ("FMTORM", "VQAORM", "CSTORM")  # scripts/rl.sh: --reward_funcs fmt_orm vqa_orm cst_orm
Q = "What is the total shown on the receipt?"
SANDBOX = "<code>\n```python\nprint(1)\n```\n</code>\n<sandbox_output>12.50</sandbox_output>\n"


def json_verdict(key: str, value: int) -> str:
    return '{"' + key + '": ' + str(value) + "}"


C1, C0 = json_verdict("Correctness", 1), json_verdict("Correctness", 0)
S1, S0 = json_verdict("Consistency", 1), json_verdict("Consistency", 0)

# (name, completion, solution, VQA judge verdicts, consistency judge verdicts)
CASES: list[tuple[str, str, str, list[str], list[str]]] = [
    ("math_verified", "<think>\nIt shows 12.50.\n</think> <answer>12.50</answer>", "12.5", [], [S1]),
    ("math_verified_inconsistent", "<think>\nIt shows 9.\n</think> <answer>12.50</answer>", "12.5", [], [S0]),
    ("judge_correct", "<think>\nThe store is the deli.\n</think> <answer>The deli at the corner</answer>",
     "corner deli", [C1], [S1]),
    ("judge_wrong", "<think>\nThe store is a bakery.\n</think> <answer>Main Street Bakery</answer>", "corner deli",
     [C0], [S1]),
    ("judge_fenced_json", "<think>x</think> <answer>The deli at the corner</answer>", "corner deli",
     ["```json\n" + C1 + "\n```"], ["```\n" + S1 + "\n```"]),
    ("judge_retried", "<think>x</think> <answer>The deli at the corner</answer>", "corner deli",
     ["I think it is right.", C1], [S1]),
    ("judge_never_valid", "<think>x</think> <answer>The deli at the corner</answer>", "corner deli",
     ["yes", "yes", "yes"], [S1]),
    ("answer_prefix_removed", "<think>x</think> <answer>The answer is 12.5</answer>", "12.5", [], [S1]),
    ("choice_letter", "<think>x</think> <answer>(B) blue</answer>", "B", [C1], [S1]),
    ("no_answer", "<think>x</think> It is 12.5.", "12.5", [], []),
    ("empty_answer", "<think>x</think> <answer> </answer>", "12.5", [], []),
    ("format_newline_not_space", "<think>x</think>\n<answer>12.5</answer>", "12.5", [], [S1]),
    ("format_text_after_answer", "<think>x</think> <answer>12.5</answer> done", "12.5", [], [S1]),
    ("format_with_code_rounds",
     "<think>\nLet me compute.\n" + SANDBOX + "So 12.50.\n</think> <answer>12.50</answer>", "12.5", [], [S1]),
    ("format_two_thinks", "<think>a</think><think>b</think> <answer>12.5</answer>", "12.5", [], [S1]),
    ("sandbox_failure_text", "<think>\n<sandbox_output>Sandbox for x: failed</sandbox_output>\n</think> "
     "<answer>Main Street Bakery</answer>", "corner deli", [C0], [S1]),
]


def _stand_ins(root: str) -> None:
    plugin = types.ModuleType("swift.plugin")
    plugin.__path__ = [str(Path(root, "swift/plugin"))]  # type: ignore[attr-defined]
    plugin.ORM = type("ORM", (), {})  # type: ignore[attr-defined]
    plugin.orms = {}  # type: ignore[attr-defined]
    utils = types.ModuleType("swift.utils")
    utils.get_logger = logging.getLogger  # type: ignore[attr-defined]
    sys.modules.update({"swift": types.ModuleType("swift"), "swift.plugin": plugin, "swift.utils": utils})
    sys.modules["swift"].__path__ = [str(Path(root, "swift"))]  # type: ignore[attr-defined]
    for name in ("math_normalize", "math_equal"):
        spec = importlib.util.spec_from_file_location(f"swift.plugin.{name}", Path(root, f"swift/plugin/{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[f"swift.plugin.{name}"] = module
        spec.loader.exec_module(module)
        setattr(plugin, name, getattr(module, name) if hasattr(module, name) else module)


def combination(trainer: Path) -> str:
    lines = trainer.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if 'vqa_orm_index = reward_name_list.index("VQAORM")' in line)
    end = next(i for i in range(start, len(lines)) if "total_rewards = (total_rewards_per_func" in lines[i])
    kept = [line for line in lines[start:end + 1] if "torch.save" not in line]
    block = "\n".join(kept)
    block = block.split("        # 创建一个字典")[0] + "\n" + lines[end]
    return textwrap.dedent(block)


def main(root: str, out: str, torch_site: str) -> None:
    recorder = Recorder()
    host, port = recorder.url.removeprefix("http://").split(":")
    os.environ.update(REWARD_API_ADDRESS=host, QWEN_API_PORT=port)
    _stand_ins(root)
    sys.path.append(torch_site)
    import torch

    spec = importlib.util.spec_from_file_location("agent_rm", Path(root, "examples/train/grpo/plugin/agent_rm.py"))
    assert spec is not None and spec.loader is not None
    agent_rm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent_rm)
    functions = {name: getattr(agent_rm, name)() for name in ORDER}
    block = combination(Path(root, "swift/trainers/rlhf_trainer/grpo_trainer.py"))
    cases = []
    for name, completion, solution, vqa, cst in CASES:
        values, exchanges = [], []
        for function_name, verdicts in zip(ORDER, ([], vqa, cst), strict=True):
            recorder.take(verdicts)
            value = functions[function_name]([completion], [solution], images=[[]], question=[Q])[0]
            assert not recorder.answers, (name, function_name, "verdicts left unused", recorder.answers)
            values.append(float(value))
            exchanges += recorder.exchanges(verdicts)
        scope: dict[str, Any] = {"reward_name_list": list(ORDER), "torch": torch, "device": "cpu",
                                 "total_rewards_per_func": torch.tensor([values], dtype=torch.float32),
                                 "self": types.SimpleNamespace(reward_weights=torch.ones(3, dtype=torch.float32))}
        exec(block, scope)  # the trainer's own lines
        after = [float(v) for v in scope["total_rewards_per_func"][0]]
        cases.append({"name": name, "episode": {"response": completion, "ground_truth": solution, "question": Q},
                      "judge": exchanges,
                      "expected": {"total": float(scope["total_rewards"][0]),
                                   "terms": dict(zip(("format", "accuracy", "consistency"), after, strict=True)),
                                   "before_mask": dict(zip(("format", "accuracy", "consistency"), values,
                                                           strict=True))}})
    golden = {"profile": "thyme", "source": SOURCE,
              "recorded_with": "scripts/goldens/record_rewards_thyme.py (its judge: a local endpoint)",
              "cases": cases}
    Path(out).write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
