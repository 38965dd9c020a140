"""Records tests/data/rewards/mgpo.json by running MGPO's own reward (xinyu1205/verl, branch `mgpo`, @ 994efbe6,
`verl/utils/reward_score/high_resolution.py`, the one `_default_compute_score` picks for its MME-RealWorld and V*
data sources) over crafted responses.

The reference repository could not be fetched as a snapshot here; its file was read whole with the code-search
tool at that commit and written to `<dir>/verl/utils/reward_score/high_resolution.py` (1220 characters). Its
reward logs each call to `log_path_2.json` in the working directory, so the script runs in a temporary one.

What the reward sees: verl's reward manager decodes the whole response with `skip_special_tokens=True`: the first
generation, the user turn the rollout inserts after it (`sub_image_token_prompt` or `ori_image_token_prompt` of
`examples/grpo_trainer/run_qwen2_5_vl-7b_mgpo.sh`, its special and image tokens gone; both end with the empty
`\\boxed{}` of their instruction), then the second generation. The cases below are built that way.

Needs `mathruler` (0.1.0, the only release; its undeclared imports `pylatexenc`, `tqdm`), installed in a throwaway
venv used only for recording:

    python3 -m venv /tmp/rw-venv && /tmp/rw-venv/bin/pip install mathruler==0.1.0 pylatexenc tqdm
    /tmp/rw-venv/bin/python scripts/goldens/record_rewards_mgpo.py <dir> tests/data/rewards/mgpo.json
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REF = "verl/utils/reward_score/high_resolution.py"
SUB = ("\nuser\nBased on the provided coordinates, return the sub-image:\n\nQuestion: What color is the car? "
       "(A) red (B) blue Carefully analyze both the original image and the enlarged sub-image to solve the question "
       "step by step. If the sub-image does not provide sufficient information, refer to the original image to find "
       "the solution. Present your reasoning clearly, and provide the final answer (A, B, C, D, or E) enclosed within "
       "\\boxed{}.\nassistant\n")
ORI = ("\nuser\nNot providing correct coordinates or invalid coordinate values, return the original image:\n\n"
       "Question: What color is the car? (A) red (B) blue Carefully analyze the original image to solve the question "
       "step by step. Present your reasoning clearly, and provide the final answer (A, B, C, D, or E) enclosed within "
       "\\boxed{}.\nassistant\n")
GROUND = 'The car is here.\n```json\n[{"bbox_2d": [10, 20, 200, 220], "label": "car"}]\n```'

# (name, first generation, inserted turn, second generation, ground truth)
CASES: list[tuple[str, str, str, str, str]] = [
    ("correct_letter", GROUND, SUB, "The car is blue. \\boxed{B}", "B"),
    ("wrong_letter", GROUND, SUB, "The car is red. \\boxed{A}", "B"),
    ("invalid_box_correct", "No coordinates.", ORI, "\\boxed{B}", "B"),
    ("lowercase_letter", GROUND, SUB, "\\boxed{b}", "B"),
    ("parenthesized_letter", GROUND, SUB, "\\boxed{(B)}", "B"),
    ("text_letter", GROUND, SUB, "\\boxed{\\text{B}}", "B"),
    ("letter_with_words", GROUND, SUB, "\\boxed{B. blue}", "B"),
    ("last_boxed_wins", GROUND, SUB, "First \\boxed{A}, finally \\boxed{B}", "B"),
    ("boxed_only_in_first_turn", "\\boxed{B}", ORI, "It is blue.", "B"),
    ("no_boxed_at_all_single_text", "It is blue.", "", "", "B"),
    ("no_boxed_ground_truth_none", "It is blue.", "", "", "None"),
    ("unclosed_boxed", GROUND, SUB, "\\boxed{B", "B"),
    ("fraction_vs_decimal", GROUND, SUB, "\\boxed{0.5}", "\\frac{1}{2}"),
    ("fraction_nested_braces", GROUND, SUB, "\\boxed{\\frac{1}{2}}", "1/2"),
    ("integer_vs_float", GROUND, SUB, "\\boxed{2.0}", "2"),
    ("equal_numbers", GROUND, SUB, "\\boxed{ 42 }", "42"),
    ("tuple", GROUND, SUB, "\\boxed{(1, 2)}", "(1,2)"),
    ("empty_boxed", GROUND, SUB, "\\boxed{}", "B"),
]


SOURCE = "xinyu1205/verl/" + REF + "@994efbe611e89e5ba153d32c2461a58f45e72e24:compute_score"


def main(ref_dir: str, out: str) -> None:
    path = Path(ref_dir) / REF
    spec = importlib.util.spec_from_file_location("high_resolution", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cases: list[dict[str, Any]] = []
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            for name, first, inserted, second, truth in CASES:
                response = first + inserted + second
                score = module.compute_score(response, truth)
                expected = {"total": score, "terms": {"accuracy": score}}
                turns = [first, second] if inserted else [first]
                # The response as the trainer decodes it, and the same rollout as its turns alone (toolserver
                # rebuilds what the reward reads from them).
                cases.append({"name": name, "episode": {"response": response, "ground_truth": truth},
                              "expected": expected})
                cases.append({"name": name + "/turns", "episode": {"turns": turns, "ground_truth": truth},
                              "expected": expected})
        finally:
            os.chdir(cwd)
    golden = {"profile": "mgpo", "source": SOURCE,
              "recorded_with": "scripts/goldens/record_rewards_mgpo.py, mathruler 0.1.0; reference file sha256 "
              + hashlib.sha256(path.read_bytes()).hexdigest(), "cases": cases}
    Path(out).write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
