"""Records tests/data/rewards/thyme.json by running Thyme's own reward (yfzhang114/Thyme @ b9285b7a) as `scripts/rl.sh`
trains: the reward functions `fmt_orm`, `vqa_orm`, `cst_orm` of `examples/train/grpo/plugin/agent_rm.py` (their
defaults: FMT_WEIGHT 0.5, VQA_WEIGHT 1 with VQA_NORM 1, CST_WEIGHT 0.5), each called as swift's GRPO trainer calls
it (`completions`, `solution`, and the dataset's `images` and `question` columns), then the trainer's combination
(`swift/trainers/rlhf_trainer/grpo_trainer.py` `_score_completions`: the block from the VQA mask to the weighted
sum, taken from the file as it is and run over float32 tensors, reward weights all 1, on the CPU).

Its judge (`llm_openai_api`: `http://<REWARD_API_ADDRESS>:<QWEN_API_PORT>/v1/chat/completions`) is a local endpoint
that records each request and answers the verdicts each case scripts (scripts/goldens/judge_stub.py): the VQA
judge's first (when the answer is not verified as math), then the consistency judge's.

Stand-ins, and only these: the `swift` and `swift.utils` packages (empty, their real folders as their paths),
`swift.utils.logger.get_logger` and `swift.plugin.orm` (the `ORM` base and `orms` registry). `swift.plugin` is swift's
own `__init__.py` (its `_LazyModule`), so `strict_math_verify`'s `from swift.plugin import math_equal` binds what it
binds in training: the module, not the function (the script asserts it; see toolserver/rewards/thyme_math.py).

The cases: the reward's paths (math-verified, judged, retried, never valid, no answer, format), then the strict
verifier's branches (`STRICT`: numbers, thousands, fractions, mixed numbers, percentages, units, \\pi, intervals,
tuples, matrices, sets, text, answer markers, boxes, sympy's guard), each answer in a well-formed completion; a case
the strict verifier and math-verify both reject is judged "0" (the trainer then zeroes its consistency). Each case
with an answer also records what `evaluate_math` and math-verify said of it (`checks`), and `strict_table` records
`evaluate_math` alone over TABLE_ANSWERS × TABLE_TRUTHS and each answer against itself.

Needs a throwaway venv with toolserver's versions of the libraries the reward uses (math-verify 0.8.0,
latex2sympy2_extended 1.10.2, sympy 1.14.0, pylatexenc 2.11, antlr4-python3-runtime 4.13.2), timeout-decorator,
httpx, openai, numpy, and torch (toolserver's venv's site-packages, put last on the path):
    git -C <Thyme> archive b9285b7a examples/train/grpo/plugin/agent_rm.py swift/plugin \\
        swift/utils/import_utils.py swift/trainers/rlhf_trainer/grpo_trainer.py | tar -x -C <dir>
    <venv>/bin/python scripts/goldens/record_rewards_thyme.py <dir> tests/data/rewards/thyme.json \\
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
    ("judge_score_two", "<think>x</think> <answer>Main Street Bakery</answer>", "corner deli",
     [json_verdict("Correctness", 2)], [json_verdict("Consistency", 2)]),
    ("judge_score_string", "<think>x</think> <answer>Main Street Bakery</answer>", "corner deli",
     ['{"Correctness": "1"}'], [S1]),
    ("judge_wrong_key_then_valid", "<think>x</think> <answer>Main Street Bakery</answer>", "corner deli",
     ['{"Score": 1}', C1], ['{"Consistency": 1.7}']),
    ("judge_two_fences", "<think>x</think> <answer>Main Street Bakery</answer>", "corner deli",
     ["```a```\n```" + C1 + "```"], [S1]),
    ("judge_backslash", "<think>x</think> <answer>Main Street Bakery</answer>", "corner deli",
     ['{"Correctness": 1, "why": "\\frac"}'], [S1]),
    ("judge_float32_total", "<think>x</think> <answer>Main Street Bakery</answer>", "corner deli",
     [json_verdict("Correctness", 16777217)], [S1]),
    ("consistency_never_valid", "<think>\nIt shows 12.50.\n</think> <answer>12.50</answer>", "12.5", [],
     ["no", "no", "no"]),
    ("prompt_placeholders_in_texts", "<think>see gen_answer</think> <answer>gen_solution ref</answer>",
     "input_question", [C1], [S1]),
    ("long_thinking_cut_to_500", "<think>" + "abcdefghij" * 60 + "</think> <answer>12.5</answer>", "12.5", [],
     [S1]),
    ("no_think_tags", "It is 12.5. <answer>12.5</answer>", "12.5", [], [S1]),
    ("image_tokens_removed", "<think>\n<sandbox_output><image></sandbox_output>\nIt reads 12.5.</think>"
     " <answer>12.5</answer>", "12.5", [], [S1]),
]

# (name, answer, ground truth, VQA judge verdicts: [C0] where neither the strict check nor math-verify accepts)
STRICT: list[tuple[str, str, str, list[str]]] = [
    ("strict_thousands", "1,000", "1000", []),
    ("strict_float_int", "3.0", "3", []),
    ("strict_int_needs_int", "3.01", "3", [C0]),
    ("strict_decimal_vs_fraction", "0.333", "1/3", [C0]),
    ("strict_frac_vs_slash", "\\frac{1}{2}", "1/2", []),
    ("strict_unreduced_fraction_math_verify", "2/4", "1/2", []),
    ("strict_dfrac_sympy", "\\dfrac{3}{4}", "0.75", []),
    ("strict_mixed_number", "7 3/4", "31/4", []),
    ("strict_percent_latex", "50\\%", "50", []),
    ("strict_percent_vs_decimal", "50%", "0.5", []),
    ("strict_percent_plain", "45%", "45", []),
    ("strict_pi_vs_decimal", "2\\pi", "6.283", [C0]),
    ("strict_pi_dollars", "$2\\pi$", "2\\pi", []),
    ("strict_pi_over_two", "\\pi/2", "\\frac{\\pi}{2}", []),
    ("strict_pi_truth_3_14", "3.14", "\\pi", [C0]),
    ("strict_4pi_decimal", "4\\pi", "12.566", [C0]),
    ("strict_decimal_vs_2pi", "6.28", "2\\pi", [C0]),
    ("strict_pi_area", "\\pi", "\\pi r^2", [C0]),
    ("strict_tuple_spaces", "(1, 3)", "(1,3)", []),
    ("strict_interval_brackets_differ", "[1, 3)", "(1, 3)", []),
    ("strict_interval_infinity", "(-\\infty, 2]", "(-\\infty,2]", []),
    ("strict_left_right", "\\left(2,3\\right)", "(2,3)", []),
    ("strict_pmatrix", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", []),
    ("strict_list_vs_pmatrix", "[[1],[2]]", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", [C0]),
    ("strict_set_order", "\\{1, 2\\}", "\\{2, 1\\}", [C0]),
    ("strict_text_case", "\\text{blue}", "Blue", []),
    ("strict_text_wrong", "red car", "blue car", [C0]),
    ("strict_equation_cut", "x = 5", "5", []),
    ("strict_sentence_cut", "The area is 12 square units. So", "12", []),
    ("strict_boxed", "\\boxed{12}", "12", []),
    ("strict_caret_brace_guard", "x^{2}+1", "1+x^2", [C0]),
    ("strict_polynomial_sympy", "x^2+2x+1", "(x+1)^2", []),
    ("strict_sqrt_sympy", "\\sqrt{8}", "2\\sqrt{2}", []),
    ("strict_million", "5 million", "5000000", [C0]),
    ("strict_degrees", "90^\\circ", "90", []),
    ("strict_units", "10 cm", "10", []),
    ("strict_exponent_notation", "1e3", "1000", []),
    ("strict_minus_space", "- 3", "-3", []),
    ("strict_dollar", "\\$5", "5", []),
    ("strict_or_list", "3 or 4", "3, 4", []),
    ("strict_three_letters_guard", "a+b+c", "c+b+a", [C0]),
    ("strict_half", "0.5", "\\frac12", []),
    ("strict_short_lhs", "k=7", "7", []),
    ("strict_trailing_word", "12 apples", "12", []),
    ("strict_trailing_period", "It is 7.", "7", []),
    ("strict_answer_marker", "answer: 42", "42", []),
    ("strict_is_the_answer", "42 is the answer", "42", []),
    ("strict_sqrt_fraction", "$\\frac{\\sqrt{3}}{2}$", "\\frac{\\sqrt3}{2}", []),
    ("strict_power_guard", "2^10", "1024", []),
    ("strict_prefix_removed", "The correct answer is 2\\pi", "2\\pi", []),
    ("strict_sqrt_at_end", "2\\sqrt", "2\\sqrt", []),
    ("strict_text_units", "5\\text{ cm}", "5", []),
    ("strict_fbox", "\\fbox{8}", "8", []),
    ("strict_letter_choice", "(C)", "C", []),
    ("strict_negative_fraction", "-\\frac{1}{3}", "-1/3", []),
    ("strict_near_int", "2.99999999", "3", []),
]
CASES += [(name, f"<think>\nThe value is {answer}.\n</think> <answer>{answer}</answer>", truth, vqa, [S1])
          for name, answer, truth, vqa in STRICT]


# The strict check alone on raw answers (`evaluate_math(answer, truth)`, its answer extraction included): every answer
# against every truth, and each answer against itself.
TABLE_ANSWERS = [
    '12', '12.0', '12.00001', '1,200', '\\frac{24}{2}', '24/2', '12%', '12\\%', '\\$12', '12 cm', '12 meters',
    'twelve', '\\text{12}', 'x=12', 'The answer is 12.', 'answer: 12 apples', '\\boxed{12}', '12 is the answer',
    '\\sqrt{144}', '6\\cdot2', '6 \\times 2', '2^2\\cdot3', '1.2e1', '12^{1}', '(12)', '{12}',
    '\\left( 12 \\right)', '12\\pi', '\\pi', '3.14', '\\frac{\\pi}{2}', '\\infty', '(1,2)', '[1,2]', '(1, 2]',
    '\\{1,2\\}', '1 and 2', '1 or 2', '\\begin{pmatrix}1\\\\2\\end{pmatrix}', '\\frac12', '0.5', '.5', '1/2', '2/4',
    '\\dfrac{1}{2}', '50\\%', 'x^2', 'x^{2}', 'x**2', '\\sqrt2', '\\sqrt{2}', '2^{1/2}', '1.41421356', '-1', '- 1',
    '−1', '3 1/2', '7/2', '3.5', 'Blue', '\\text{blue}', 'blue.', 'B', '(B)', 'B. blue', '5 million', '5000000',
    '10^6', '1000000', '1e6', '90^\\circ', '90°', '\\frac{1}{0}', '', '   ', '\\boxed{}', '\\boxed{\\text{Yes}}',
    'yes', 'k = 3', 'abc = 3', 'İstanbul', 'a.b', '12. 13', 'It is 5. answer is 6', '\\frac', '\\sqrt',
    '5\\text{ cm}\\text{ m}', 'inf', 'nan', '1e400', '2.99999999', '03/4', '\\frac{a}{b}', 'y=2x+1',
    '\\boxed{3} and \\boxed{4}', '\\fbox{7}',
]
TABLE_TRUTHS = [
    '12', '0.5', '\\frac{1}{2}', '(1,2)', '\\pi', 'blue', 'B', '1000000', '90', '\\sqrt{2}', '3.5', 'x^2', '-1',
    '3',
]


def _stand_ins(root: str) -> None:
    """swift's own plugin package (`swift/plugin/__init__.py`, its `_LazyModule` from `swift/utils/import_utils.py`)
    imports the strict verifier and its `from swift.plugin import math_normalize, math_equal` as swift does; only
    the packages above it, swift's logger and the ORM registry (`swift.plugin.orm`, which imports swift's whole
    inference stack) are stood in."""
    swift = types.ModuleType("swift")
    swift.__path__ = [str(Path(root, "swift"))]  # type: ignore[attr-defined]
    utils = types.ModuleType("swift.utils")
    utils.__path__ = [str(Path(root, "swift/utils"))]  # type: ignore[attr-defined]
    utils.get_logger = logging.getLogger  # type: ignore[attr-defined]
    logger = types.ModuleType("swift.utils.logger")
    logger.get_logger = logging.getLogger  # type: ignore[attr-defined]
    orm = types.ModuleType("swift.plugin.orm")
    orm.ORM = type("ORM", (), {})  # type: ignore[attr-defined]
    orm.orms = {}  # type: ignore[attr-defined]
    sys.modules.update({"swift": swift, "swift.utils": utils, "swift.utils.logger": logger, "swift.plugin.orm": orm})
    import swift.plugin.strict_math_verify as strict  # type: ignore[import-not-found]

    # What the reference's `math_equal` name is bound to (a module: calling it raises TypeError, which
    # `evaluate_math` reads as "not equal", so its `eval` of the answer text is never reached).
    assert isinstance(strict.math_equal, types.ModuleType), strict.math_equal
    assert type(sys.modules["swift.plugin"]).__name__ == "_LazyModule"


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
        case: dict[str, Any] = {"name": name, "episode": {"response": completion, "ground_truth": solution,
                                                          "question": Q}}
        student = agent_rm.extract_characters_regex(agent_rm.extract_answer(completion))
        if agent_rm.extract_answer(completion):  # what the accuracy term's two checks said of the answer
            case["checks"] = {"answer": student, "evaluate_math": bool(agent_rm.evaluate_math(student, solution)),
                              "math_verify": float(agent_rm.verify(agent_rm.parse(student),
                                                                   agent_rm.parse(solution))) > 0}
        cases.append({**case, "judge": exchanges,
                      "expected": {"total": float(scope["total_rewards"][0]),
                                   "terms": dict(zip(("format", "accuracy", "consistency"), after, strict=True)),
                                   "before_mask": dict(zip(("format", "accuracy", "consistency"), values,
                                                           strict=True))}})
    strict = agent_rm.evaluate_math
    table = {"answers": TABLE_ANSWERS, "truths": TABLE_TRUTHS,
             "evaluate_math": [[bool(strict(a, t)) for t in TABLE_TRUTHS] for a in TABLE_ANSWERS],
             "itself": [bool(strict(a, a)) for a in TABLE_ANSWERS]}
    golden = {"profile": "thyme", "source": SOURCE,
              "recorded_with": "scripts/goldens/record_rewards_thyme.py (its judge: a local endpoint)",
              "math_equal_bound_to": "module swift.plugin.math_equal (calling it raises TypeError)",
              "cases": cases, "strict_table": table}
    Path(out).write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
