"""Records tests/data/rewards/groundlight.json by running Groundlight's own reward (groundlight/r1_vlm @ d87e650): the
rubric of its TextVQA tool environment (`src/r1_vlm/environments/tool_use_text_vqa_env/tool_use_text_vqa_env.py`,
`TextVQAToolEnv.get_rubric`, the environment whose tool is the profile's `zoom`), each function called as its
trainer calls it (`prompts`, `completions`, `completions_messages`, the dataset's `answers`), weighted by
`get_reward_weights` (format 0.1, tool execution 0.0, correctness 0.5, soft correctness 0.5) and summed as its
trainer sums them (groundlight/trl's `QwenGRPOTrainer`: float32 tensors, `(rewards_per_func * weights).sum(dim=1)`,
here on the CPU).

The parser is verifiers' `XMLParser` from groundlight/verifiers @ 58b872a (the fork's branch whose `parse` takes
`strip`, which the rubric calls; its release branch's does not). Stand-ins, and only these: empty modules for the
training stack the environment's files import and the rubric never uses (datasets, transformers, trl, vllm, imgcat,
verifiers' Environment, r1_vlm's dataset builders); the environment is built without its `__init__` (which loads a
processor) and given the parser its `__init__` makes.

Needs `Levenshtein` (a throwaway venv) and torch and Pillow (toolserver's venv, put last on the path):
    git -C <r1_vlm> archive d87e650 src/r1_vlm | tar -x -C <dir>
    git -C <verifiers> archive 58b872a verifiers/parsers | tar -x -C <dir>
    /tmp/rw-venv/bin/python scripts/goldens/record_rewards_groundlight.py <dir> tests/data/rewards/groundlight.json \\
        <toolserver venv site-packages, for torch>
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

SOURCE = ("groundlight/r1_vlm/src/r1_vlm/environments/tool_use_text_vqa_env/tool_use_text_vqa_env.py@d87e650"
          ":TextVQAToolEnv.get_rubric")
STUBBED = ("datasets", "transformers", "trl", "trl.trainer", "trl.trainer.grpo_trainer", "vllm",
           "vllm.sampling_params", "imgcat", "verifiers.envs", "verifiers.envs.environment",
           "r1_vlm.datasets", "r1_vlm.datasets.utils", "r1_vlm.datasets.text_vqa",
           "r1_vlm.datasets.text_vqa.text_vqa_tool_use_r1", "r1_vlm.environments.simple_vision_env",
           "r1_vlm.environments.tool_use_text_vqa_env.find_examples_for_training")


class _Anything(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


def _stand_ins(root: str) -> None:
    for name in STUBBED:
        sys.modules[name] = _Anything(name)
    sys.modules["verifiers"] = types.ModuleType("verifiers")
    sys.modules["verifiers"].__path__ = [str(Path(root, "verifiers"))]  # type: ignore[attr-defined]
    sys.path.insert(0, str(Path(root, "src")))


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def image_turn(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image", "image": None}]}


PROMPT = [{"role": "system", "content": [{"type": "text", "text": "You may call any of the tools."}]},
          {"role": "user", "content": [{"type": "image", "image": None}, {"type": "text", "text": "What brand?"}]}]
ANSWERS = ["nokia", "nokia", "nokia", "nokia", "nokia", "nokia", "nokia", "nokia", "nokia phone", "motorola"]
ZOOM = "<think>\nThe logo is small.\n</think>\n<tool>\nname: zoom\nkeypoint: [500, 400]\n</tool>"
ZOOM_ERROR = "Error: Parsing arguments for tool 'zoom': keypoint must be a list of two integers"

# (name, the completion's messages)
CASES: list[tuple[str, list[dict[str, Any]]]] = [
    ("direct_correct", [assistant("<think>\nI see it.\n</think>\n<answer>\nNokia\n</answer>")]),
    ("direct_wrong", [assistant("<think>\nI see it.\n</think>\n<answer>\nSamsung\n</answer>")]),
    ("partly_matching", [assistant("<think>a</think><answer>nokia phone</answer>")]),
    ("one_labeler", [assistant("<think>a</think><answer>Motorola</answer>")]),
    ("articles_and_punctuation", [assistant("<think>a</think><answer>The Nokia.</answer>")]),
    ("number_word", [assistant("<think>a</think><answer>two</answer>")]),
    ("zoom_then_answer", [assistant(ZOOM), image_turn("<result>\nZoomed.\n</result>"),
                          assistant("<think>\nNow clear.\n</think>\n<answer>\nnokia\n</answer>")]),
    ("zoom_error_then_answer", [assistant(ZOOM), user("<result>\n" + ZOOM_ERROR + "\n</result>"),
                                assistant("<think>ok</think><answer>nokia</answer>")]),
    ("no_think", [assistant("<answer>nokia</answer>")]),
    ("answer_and_tool", [assistant("<think>a</think><tool>name: zoom</tool><answer>nokia</answer>")]),
    ("text_after_answer", [assistant("<think>a</think><answer>nokia</answer> done")]),
    ("leading_text", [assistant("So <think>a</think><answer>nokia</answer>")]),
    ("no_answer", [assistant("<think>a</think> It is nokia.")]),
    ("empty_answer", [assistant("<think>a</think><answer></answer>")]),
    ("spaces_in_tags", [assistant("<think>  a  </think>\n<answer>  nokia  </answer>")]),
    ("tool_without_result", [assistant(ZOOM)]),
    ("two_zooms", [assistant(ZOOM), image_turn("<result>\nZoomed.\n</result>"), assistant(ZOOM),
                   user("<result>\n" + ZOOM_ERROR + "\n</result>"),
                   assistant("<think>b</think><answer>nokla</answer>")]),
]
# Other labelers' answers, over the first case's completion.
ANSWER_SETS: list[tuple[str, list[str], str]] = [
    ("numbers_in_answers", ["2", "two", "2", "3", "2", "2", "2", "2", "2", "2"],
     "<think>a</think><answer>Two</answer>"),
    ("commas_in_numbers", ["1,000", "1000", "1,000", "1,000", "1 000", "1,000", "1,000", "1,000", "1,000", "1,000"],
     "<think>a</think><answer>1,000</answer>"),
    ("contractions", ["dont walk"] * 10, "<think>a</think><answer>Don't walk</answer>"),
    ("empty_labels", [""] * 10, "<think>a</think><answer></answer>"),
]


def main(root: str, out: str, torch_site: str) -> None:
    _stand_ins(root)
    sys.path.append(torch_site)  # after this venv's own packages: torch, and Pillow for the tool's imports
    import torch
    from r1_vlm.environments.tool_use_text_vqa_env.tool_use_text_vqa_env import TextVQAToolEnv
    from verifiers.parsers import XMLParser

    env = TextVQAToolEnv.__new__(TextVQAToolEnv)
    env.parser = XMLParser(fields=["think", "answer", "tool"])
    rubric = env.get_rubric()
    weights = env.get_reward_weights()
    runs = [(name, messages, ANSWERS) for name, messages in CASES]
    runs += [(name, [assistant(text)], answers) for name, answers, text in ANSWER_SETS]
    cases = []
    for name, messages, answers in runs:
        kwargs = {"answers": [answers]}
        values = [func(prompts=[json.loads(json.dumps(PROMPT))], completions=[None],
                       completions_messages=[json.loads(json.dumps(messages))], **kwargs)[0] for func in rubric]
        total = (torch.tensor([values], dtype=torch.float32)
                 * torch.tensor(weights, dtype=torch.float32).unsqueeze(0)).sum(dim=1)
        terms = dict(zip(("format", "tool_execution", "correctness", "soft_correctness"), values, strict=True))
        cases.append({"name": name, "episode": {"turns": [m["content"][0]["text"] for m in messages
                                                          if m["role"] == "assistant"],
                                                 "ground_truth": answers, "extra": {"messages": messages}},
                      "expected": {"total": float(total[0]), "terms": terms}})
    golden = {"profile": "groundlight", "source": SOURCE,
              "recorded_with": "scripts/goldens/record_rewards_groundlight.py (verifiers @ 58b872a, Levenshtein "
              "0.27.5, torch on the CPU)", "cases": cases}
    Path(out).write_text(json.dumps(golden, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
