"""Records tests/data/rewards/pyvision_rl.json by running PyVision-RL's own reward (agents-x-project/PyVision-RL @
62ca599d, `verl_agents/verl/utils/reward_score/multi_task_verifier.py` `compute_score`, which
`verl/utils/reward_score/__init__.py` picks for its visual data sources) over crafted decoded responses of each
in-context example family (visual search, chart, math, spatial, long video).

Its judge (`llm_as_a_judge_config`: key, base URL, model) is a local endpoint that records each request and answers
the verdict each case scripts (scripts/goldens/judge_stub.py).

    git -C <PyVision-RL> show 62ca599d:verl_agents/verl/utils/reward_score/multi_task_verifier.py \\
        > <dir>/multi_task_verifier.py
    <toolserver venv python> scripts/goldens/record_rewards_pyvision_rl.py <dir> tests/data/rewards/pyvision_rl.json
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_stub import Recorder

SOURCE = ("agents-x-project/PyVision-RL/verl_agents/verl/utils/reward_score/multi_task_verifier.py@62ca599d"
          ":compute_score")
Q = "Which side is the red car on?"
CODE = "<code>\n```python\nprint(image_clue_0.size)\n```\n</code>"
OBS = "<|im_end|>\n<|im_start|>user\n<interpreter>\nText Result:\n(640, 480)\n</interpreter>\n"
IMG = "<interpreter>\nImage Result:\n<|vision_start|><|image_pad|><|image_pad|><|vision_end|>\n</interpreter>\n"


def answer(text: str) -> str:
    return f"<think>\nDone.\n</think>\n<answer>\n\\boxed{{{text}}}\n</answer>"


# (name, data source, decoded response, ground truth, verdicts)
CASES: list[tuple[str, str, str, str, list[str]]] = [
    ("search_correct", "deepeyes", answer("left"), "left", ["Judgement: 1"]),
    ("search_wrong", "vstar", answer("right"), "left", ["Judgement: 0"]),
    ("search_bare_one", "minio3", answer("left"), "left", ["1"]),
    ("search_bare_zero", "hrbench-4k", answer("right"), "left", ["0"]),
    ("search_bare_other", "hrbench-8k", answer("left"), "left", ["Yes"]),
    ("search_judgement_no_digit", "deepeyes", answer("left"), "left", ["Judgement: consistent"]),
    ("search_judgement_both", "deepeyes", answer("left"), "left", ["Judgement: 10"]),
    ("with_code_and_image", "deepeyes", CODE + OBS + IMG + "<|im_start|>assistant\n" + answer("left"), "left",
     ["Judgement: 1"]),
    ("vision_tokens_unpaired", "deepeyes", "<|vision_start|><|image_pad|>" + answer("left"), "left", []),
    ("answer_tags_unpaired", "deepeyes", answer("left") + "<answer>", "left", []),
    ("answer_without_box", "deepeyes", "<answer>\nleft\n</answer>", "left", []),
    ("answer_box_no_newlines", "deepeyes", "<answer>\\boxed{left}</answer>", "left", []),
    ("answer_holds_box", "deepeyes", answer("\\boxed{left}"), "left", []),
    ("answer_holds_interpreter", "deepeyes", answer("<interpreter>left"), "left", []),
    ("long_answer", "deepeyes", answer("l" * 1000), "left", ["Judgement: 1"]),
    ("first_answer_taken", "deepeyes", answer("right") + " " + answer("left"), "left", ["Judgement: 0"]),
    ("chart", "ecd", answer("12.0%"), "12%", ["Judgement: 1"]),
    ("math", "mathvision", answer("0.49"), "0.49", ["Judgement: 1"]),
    ("math_wemath", "wemath-pro", answer("3"), "4", ["Judgement: 0"]),
    ("spatial", "vsi", answer("2.5"), "2.4", ["Judgement: 1"]),
    ("long_video", "longvila", answer("B"), "B", ["Judgement: 1"]),
]


def main(ref_dir: str, out: str) -> None:
    recorder = Recorder()
    config = {"api_key": "recording", "base_url": recorder.url + "/v1", "model_name": "judge-model"}
    spec = importlib.util.spec_from_file_location("multi_task_verifier", Path(ref_dir) / "multi_task_verifier.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cases: list[dict[str, Any]] = []
    for name, source, response, truth, verdicts in CASES:
        recorder.take(verdicts)
        result = module.compute_score(response, truth, {"question": Q}, config, source)
        assert not recorder.answers, name
        cases.append({"name": name, "episode": {"response": response, "ground_truth": truth, "question": Q,
                                                 "extra": {"data_source": source}},
                      "judge": recorder.exchanges(verdicts),
                      "expected": {"total": result["score"], "terms": {"accuracy": result["score"]},
                                   "is_answer_right": result["is_answer_right"]}})
    golden = {"profile": "pyvision-rl", "source": SOURCE,
              "recorded_with": "scripts/goldens/record_rewards_pyvision_rl.py (its judge: a local endpoint)",
              "cases": cases}
    Path(out).write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
