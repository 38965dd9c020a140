"""DeepEyes' reward (profile `deepeyes`): Visual-Agent/DeepEyes @ 6c5e796, `verl/utils/reward_score/vl_agent.py`,
picked by `data_source` as `verl/utils/reward_score/__init__.py` picks it:

- `vstar`, `vl_agent`, `chart` (the default; V* and the chart data of its recipe): `compute_score`. Format error
  when the text's `<think>` and `</think>` counts differ, its `<|vision_start|><|image_pad|>` and
  `<|image_pad|><|vision_end|>` counts differ, or the `<answer>`/`</answer>` counts after the last `</think>`
  differ. The answer is the text after the last `<answer>` up to the next `</answer>`, stripped. The judge is
  asked with the reference's in-context prompt (system "You are a helpful assistant.", temperature 0.3, a random
  seed); its verdict is 1 when the text after its last `Judgement:` holds a `1`, else 0 when it holds a `0`;
  without `Judgement:` only the exact texts `1`/`0` count; anything else is 0. An answer of 1000 characters or
  more scores 0 and is a format error. Total = 0.8·accuracy + 0.2·format (0 or -1) + 1.2·tool, the tool term
  1 when the episode shows an image (any tool result) and the answer was judged right.
- `geoguessr`: `compute_common_reasoning`, the `<answer>` block after the last `</think>` (missing or empty: a
  format error, no judge), `COMMON_VERIFY_PROMPT` at temperature 0.5, up to 8 asks until the text after
  `## Equivalence Judgement` (lowercased) holds exactly one of `true`/`false`; same weights.
- `thinklite_eureka`, `xince`: `compute_score_math`, the last `\\boxed{...}` after the last `</think>` (none: a
  format error; several: a format error), math-verify first, then the judge with `MATH_VERIFY_PROMPT` at
  temperature 0; total = 1.2·accuracy + 0.4·format. Needs the `math-verify` package.

The text scored is the decoded response of the episode: every assistant turn followed by the tool-response turn
its rollout appended (rebuilt from `turns` and the call log by the `deepeyes` call format), or `response` as given
when no turns are.
"""

from __future__ import annotations

import random
import re
import threading
from typing import Any

from toolserver.formats.deepeyes import DEEPEYES
from toolserver.rewards.base import Episode, Judge, Reward, RewardInputError, RewardResult, weighted
from toolserver.rewards.deepeyes_prompts import COMMON_VERIFY_PROMPT, MATH_VERIFY_PROMPT, judge_prompt
from toolserver.rewards.judge import JudgeFailed
from toolserver.rewards.text import episode_text

SOURCE = "Visual-Agent/DeepEyes/verl/utils/reward_score/vl_agent.py@6c5e796"
VISION_OPEN, VISION_CLOSE = "<|vision_start|><|image_pad|>", "<|image_pad|><|vision_end|>"
GENERAL, COMMON, MATH = ("vstar", "vl_agent", "chart"), ("geoguessr",), ("thinklite_eureka", "xince")
WEIGHTS = {"accuracy": 0.8, "format": 0.2, "tool": 1.2}
MATH_WEIGHTS = {"accuracy": 1.2, "format": 0.4}
LONG_ANSWER = 1000
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
BOXED = re.compile(r"\\boxed{([^}]+)}", re.DOTALL)
JUDGE_ASKS = 8
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def _seed() -> int:
    return random.randint(0, 1000000)


def tag_format_error(text: str, vision: bool = True) -> bool:
    if text.count("<think>") != text.count("</think>"):
        return True
    if vision and text.count(VISION_OPEN) != text.count(VISION_CLOSE):
        return True
    tail = text.split("</think>")[-1].strip()
    return tail.count("<answer>") != tail.count("</answer>")


def general_verdict(answer: str) -> float:
    answer = answer.strip()
    if "Judgement:" in answer:
        answer = answer.split("Judgement:")[-1].strip()
        return 1.0 if "1" in answer else 0.0
    return 1.0 if answer == "1" else 0.0


def equivalence_verdict(answer: str) -> bool | None:
    judgement = answer.strip().split("## Equivalence Judgement")[-1].lower()
    if "true" in judgement and "false" not in judgement:
        return True
    if "false" in judgement and "true" not in judgement:
        return False
    return None


class DeepEyesReward(Reward):
    profile = "deepeyes"
    source = SOURCE
    terms = ("accuracy", "format", "tool")
    weights = WEIGHTS
    judged = True
    description = "LLM-judged accuracy, a -1 format term, and a tool bonus for right answers that used a tool."

    def check(self, episode: Episode) -> None:
        source = episode.extra.get("data_source", "vl_agent")
        if source not in GENERAL + COMMON + MATH:
            raise RewardInputError(f"DeepEyes has no reward for data_source {source!r} (its reward_score raises "
                                   f"NotImplementedError); one of {', '.join(GENERAL + COMMON + MATH)}")
        if episode.ground_truth is None:
            raise RewardInputError("DeepEyes' reward needs the ground truth")
        if episode.question is None and source not in MATH:
            raise RewardInputError("DeepEyes' judge reads the question (its `extra_info['question']`): give it")

    async def score(self, episode: Episode, judge: Judge | None = None) -> RewardResult:
        self.check(episode)
        text = episode_text(episode, DEEPEYES)
        source = episode.extra.get("data_source", "vl_agent")
        if source in MATH:
            return await self._math(episode, text, judge)
        if source in COMMON:
            return await self._common(episode, text, judge)
        return await self._general(episode, text, judge)

    async def _general(self, episode: Episode, text: str, judge: Judge | None) -> RewardResult:
        format_error = tag_format_error(text)
        answer = text.split("<answer>")[-1].split("</answer>")[0].strip()
        prompt = judge_prompt(answer, episode.ground_truth, episode.question)
        verdict = await self.need_judge(judge).chat([SYSTEM, {"role": "user", "content": prompt}], seed=_seed(),
                                                    temperature=0.3)
        accuracy = general_verdict(verdict)
        if len(answer) >= LONG_ANSWER:
            accuracy, format_error = 0.0, True
        return self._result(text, accuracy, format_error, answer, [verdict], long=len(answer) >= LONG_ANSWER,
                            finished=not episode.truncated)

    async def _common(self, episode: Episode, text: str, judge: Judge | None) -> RewardResult:
        format_error = tag_format_error(text)
        found = ANSWER.search(text.split("</think>")[-1].strip())
        answer = found.group(1).strip() if found else ""
        verdicts: list[str] = []
        accuracy = 0.0
        if not answer or len(answer) >= LONG_ANSWER:
            format_error = True
        else:
            asked = self.need_judge(judge)
            prompt = COMMON_VERIFY_PROMPT.format(query=episode.question, gold_ans=episode.ground_truth,
                                                 pred_ans=answer)
            for _ in range(JUDGE_ASKS):
                verdicts.append(await asked.chat([{"role": "user", "content": prompt}], seed=_seed(),
                                                 temperature=0.5))
                judged = equivalence_verdict(verdicts[-1])
                if judged is not None:
                    accuracy = 1.0 if judged else 0.0
                    break
        return self._result(text, accuracy, format_error, answer, verdicts, long=len(answer) >= LONG_ANSWER,
                            finished=not episode.truncated)

    def _result(self, text: str, accuracy: float, format_error: bool, answer: str, verdicts: list[str],
                *, long: bool, finished: bool) -> RewardResult:
        images = text.count(VISION_OPEN)
        terms = {"accuracy": accuracy, "format": -1.0 if format_error else 0.0,
                 "tool": 1.0 if images > 0 and accuracy > 0.5 else 0.0}
        violation = "answer_too_long" if long else ("format" if format_error else None)
        return RewardResult(total=weighted(terms, WEIGHTS), terms=terms, weights=dict(WEIGHTS), finished=finished,
                            violation=violation, details={"answer": answer, "judge": verdicts, "images": images})

    async def _math(self, episode: Episode, text: str, judge: Judge | None) -> RewardResult:
        format_error = text.count("<think>") != text.count("</think>")
        boxed = BOXED.findall(text.split("</think>")[-1].strip())
        answer, verdicts, accuracy = "", [], 0.0
        if not boxed:
            format_error = True
        else:
            format_error = format_error or len(boxed) > 1
            answer = boxed[-1]
            if _math_verify(str(episode.ground_truth), answer):
                accuracy = 1.0
            else:
                prompt = MATH_VERIFY_PROMPT.format(query=episode.question, gold_ans=episode.ground_truth,
                                                   pred_ans=answer)
                verdicts.append(await _ask_tolerantly(self.need_judge(judge), prompt))
                accuracy = 1.0 if equivalence_verdict(verdicts[-1]) else 0.0
        terms = {"accuracy": accuracy, "format": -1.0 if format_error else 0.0}
        return RewardResult(total=weighted(terms, MATH_WEIGHTS), terms=terms, weights=dict(MATH_WEIGHTS),
                            finished=not episode.truncated, violation="format" if format_error else None,
                            details={"answer": answer, "judge": verdicts})


async def _ask_tolerantly(judge: Judge, prompt: str) -> str:
    """`generative_verify`: up to 8 asks at temperature 0, a failed ask tried again; none answering reads as ""
    (then neither TRUE nor FALSE: not right)."""
    for _ in range(JUDGE_ASKS):
        try:
            return await judge.chat([{"role": "user", "content": prompt}], seed=_seed(), temperature=0.0)
        except JudgeFailed:
            continue
    return ""


def _math_verify(ground_truth: str, answer: str) -> Any:
    """`rule_math_verify`: math-verify's `verify(parse(gold), parse(answer))` with its default limits (5 s each, by
    SIGALRM). Off the main thread (an app run in a worker thread, a Ray replica) signals cannot be set, so there
    the limits are off: the same answers, only an input that would have timed out is not cut short."""
    try:
        from math_verify import parse, verify
    except ImportError:
        raise RewardInputError("DeepEyes' math data sources need the `math-verify` package (pip install "
                               "'vlm-toolserver[rewards]')") from None
    if threading.current_thread() is threading.main_thread():
        return verify(parse(ground_truth), parse(answer))
    return verify(parse(ground_truth, parsing_timeout=None), parse(answer, parsing_timeout=None),
                  timeout_seconds=None)


REWARDS = (DeepEyesReward(),)
