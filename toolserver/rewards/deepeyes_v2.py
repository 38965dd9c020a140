"""DeepEyesV2's reward (profile `deepeyes-v2`): 0.8·accuracy + 0.2·format, accuracy from an LLM judge, for its three
training data sources (`extra.data_source`), as `verl/utils/reward_score/__init__.py` dispatches them.

Source: Visual-Agent/DeepEyesV2 @ 0373e6e0, `reinforcement_learning/verl/utils/reward_score/deepeyesv2.py`
(`compute_score` for `perception`, `compute_score_math` for `reason`, `compute_score_search` for `search`), with the
recipe `examples/deepeyesv2/run_qwen2_5_vl-7b_final_allin.sh` (reward manager `naive_async`: the whole decoded
response, special tokens kept, is what `response` must hold).

- format: `<think>` is put in front when the response does not start with it; then the think tags must pair up and
  be present, `<code>` tags pair up (`search`: `<tool_call>` tags too), and the text after the last `</think>`
  (stripped) must hold paired `<answer>` tags with a non-empty first answer.
- perception, search: an answer of 300 characters or more is a format error and scores accuracy 0 without asking
  the judge; otherwise the judge gets `verify_prompt.md` as system prompt and the question, reference answer and
  answer (the text "None" when there is none) in the user template, at temperature 0.3, max 8192 tokens, a random
  seed; its stripped verdict (after `<最终结果>`, inside `boxed{…}` when present) is correct when it contains "Yes".
  A search rollout that called the search tool has its accuracy scaled by 0.9.
- reason: the answer, cut after its last "=", normalized as the reference normalizes math answers (its substitution
  and removal tables, `$…$`, `\\text{}`, `\\boxed{}`, shorthand `\\frac`/`\\sqrt`, thousands separators), is judged
  with `MATH_VERIFY_PROMPT` alone (temperature 0.5, a random seed, up to 8 tries): correct when the text after the
  last "## Equivalence Judgement" says true and not false. No answer, or one that normalizes to nothing: 0.
"""

from __future__ import annotations

import random
import re
from types import MappingProxyType
from typing import Any

from toolserver.profiles.deepeyes_v2 import DeepEyesV2Format
from toolserver.rewards.base import Episode, Judge, Reward, RewardInputError, RewardResult
from toolserver.rewards.deepeyes_v2_prompts import MATH, REMOVED_EXPRESSIONS, SUBSTITUTIONS, SYSTEM, USER
from toolserver.rewards.judge import JudgeFailed
from toolserver.rewards.text import episode_text

SOURCES = ("perception", "reason", "search")
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
LONG_ANSWER, SEARCH_PENALTY, MATH_TRIES = 300, 0.1, 8
RESULT_OPEN, RESULT_CLOSE = "<最终结果>", "<\\最终结果>"


def first_answer(text: str) -> str | None:
    match = ANSWER.search(text)
    return match.group(1).strip() if match else None


def format_error(response: str, search: bool) -> tuple[bool, str | None, int]:
    """(whether the format is broken, the answer, the `<code>` openings)."""
    text = response if response.startswith("<think>") else "<think>" + response
    opened, closed = text.count("<think>"), text.count("</think>")
    error = opened != closed or opened == 0 or closed == 0
    codes = text.count("<code>")
    error = error or codes != text.count("</code>")
    if search:
        error = error or text.count("<tool_call>") != text.count("</tool_call>")
    tail = text.split("</think>")[-1].strip()
    opened, closed = tail.count("<answer>"), tail.count("</answer>")
    error = error or opened != closed or opened == 0 or closed == 0
    answer = first_answer(tail)
    return error or not answer, answer, codes


def normalize_math(answer: str) -> str:
    text = answer.split("=")[-1]
    for before, after in SUBSTITUTIONS:
        text = text.replace(before, after)
    for expression in REMOVED_EXPRESSIONS:
        text = text.replace(expression, "")
    text = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", text)
    for command in ("text", "textbf", "overline"):
        text = re.sub(r"(\\" + command + r"\{)(.*?)(\})", "\\2", text)
    text = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", text)
    text = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", text)
    text = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", text)
    text = text.replace("$", "")
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


def perception_verdict(verdict: str) -> bool:
    text = verdict
    if RESULT_OPEN in text:
        text = text.split(RESULT_OPEN)[-1].strip().split(RESULT_CLOSE)[0].strip()
    if "boxed" in text:
        text = text.split("boxed{")[-1].strip().split("}")[0].strip()
    return "Yes" in text


def math_verdict(verdict: str) -> bool:
    judgement = verdict.split("## Equivalence Judgement")[-1].lower()
    return "true" in judgement and "false" not in judgement


# The profile's turns and observation texts: the response rebuilt from the turns and the call log.
FORMAT = DeepEyesV2Format()


class DeepEyesV2Reward(Reward):
    profile = "deepeyes-v2"
    source = "Visual-Agent/DeepEyesV2/reinforcement_learning/verl/utils/reward_score/deepeyesv2.py@0373e6e0"
    terms = ("accuracy", "format")
    weights = MappingProxyType({"accuracy": 0.8, "format": 0.2})
    judged = True
    description = "0.8·judge accuracy (×0.9 after a search) + 0.2·format; data sources perception, reason, search"

    async def score(self, episode: Episode, judge: Judge | None = None) -> RewardResult:
        source = episode.extra.get("data_source")
        if source not in SOURCES:
            raise RewardInputError(f"the deepeyes-v2 reward needs extra.data_source, one of {list(SOURCES)}")
        text = episode_text(episode, FORMAT)
        if not text or episode.question is None or episode.ground_truth is None:
            raise RewardInputError("the deepeyes-v2 reward needs the decoded response (or the turns), the question "
                                   "and the ground truth")
        judge = self.need_judge(judge)
        truth = str(episode.ground_truth)
        error, answer, _ = format_error(text, search=source == "search")
        details: dict[str, Any] = {"answer": answer}
        if source == "reason":
            accuracy = await self._math(judge, episode.question, truth, answer, details)
        elif answer and len(answer) >= LONG_ANSWER:
            error, accuracy = True, 0.0
        else:
            accuracy = await self._perception(judge, episode.question, truth, answer, details)
        form = 0.0 if error else 1.0
        if source == "search":
            text = text if text.startswith("<think>") else "<think>" + text
            penalty = SEARCH_PENALTY if text.count("<tool_call>") > 0 else 0.0
            total = 0.8 * accuracy * (1 - penalty) + 0.2 * form
        else:
            total = 0.8 * accuracy + 0.2 * form
        return RewardResult(total=total, terms={"accuracy": accuracy, "format": form}, weights=dict(self.weights),
                            details=details)

    async def _perception(self, judge: Judge, question: str, truth: str, answer: str | None,
                          details: dict[str, Any]) -> float:
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": USER.format(question=question, answer=truth, prediction=answer)}]
        verdict = (await judge.chat(messages, seed=random.randint(0, 1000000), temperature=0.3,
                                    max_tokens=8192)).strip()
        details["verdict"] = verdict
        return 1.0 if perception_verdict(verdict) else 0.0

    async def _math(self, judge: Judge, question: str, truth: str, answer: str | None,
                    details: dict[str, Any]) -> float:
        if not answer:
            return 0.0
        normalized = details["normalized"] = normalize_math(answer)
        if not normalized or not truth:
            return 0.0
        messages = [{"role": "user", "content": MATH.format(query=question, gold_ans=truth, pred_ans=normalized)}]
        verdict = ""
        for _ in range(MATH_TRIES):
            try:
                verdict = (await judge.chat(messages, seed=random.randint(0, 1000000), temperature=0.5)).strip()
                break
            except JudgeFailed as exc:
                details.setdefault("judge_errors", []).append(str(exc))
        details["verdict"] = verdict
        return 1.0 if math_verdict(verdict) else 0.0


REWARDS = (DeepEyesV2Reward(),)
