"""Thyme's reward (profile `thyme`): a format term, an answer-accuracy term and a thinking/answer consistency term, as
`scripts/rl.sh` trains (`--reward_funcs fmt_orm vqa_orm cst_orm`, the reward functions' default weights).

Source: yfzhang114/Thyme @ b9285b7a, `examples/train/grpo/plugin/agent_rm.py` (`FMTORM`, `VQAORM`, `CSTORM`), its
strict math check `swift/plugin/strict_math_verify.py` (`toolserver.rewards.thyme_math`) and the combination in
`swift/trainers/rlhf_trainer/grpo_trainer.py` (`_score_completions`). `response` is the completion as swift hands it
to the reward functions: the assistant text with each `<sandbox_output>…</sandbox_output>` the trainer appended
(images as `<image>`); given the turns instead, it is rebuilt from them and the call log.

- format (0.5 or 0): the whole completion is `…</think>` + one whitespace character + `<answer>…</answer>` at the
  very end, with exactly one of each of the four tags.
- accuracy: the first `<answer>…</answer>` (stripped; none or empty: 0, no judge), its answer-prefix phrases
  ("The answer is", …) removed; 1.0 when the strict math check passes, else when math-verify's
  `verify(parse(answer), parse(truth))` is positive (the answer parsed as the gold, as the reference calls it); else
  the judge (`VQA` prompt, the answer as extracted, the question, the ground truth): `{"Correctness": n}` read from
  the text (the only ``` fence's content, the first `{` to the next `}`, backslashes doubled, `int(n)`), the score
  (n − 0.5)·2 (so 1 or −1); three tries; no readable verdict in three: 0.
- consistency (0.5 per point): the judge (`CONSISTENCY` prompt: the thinking's last 500 characters, `<image>` and the
  sandbox tags removed, and the answer) reads `{"Consistency": n}` the same way, n·0.5; no answer: 0, no judge.
- the trainer: each term as float32; the consistency term zeroed when accuracy ≤ 0; the total the float32 sum
  (reward weights 1).

The judge is asked with the reference's parameters (temperature 0.1, max_tokens 256, top_p null, n 1), one user
message holding one text part. A failed request is one failed try, as there.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from types import MappingProxyType
from typing import Any

import numpy as np

from toolserver.profiles.thyme import ThymeFormat
from toolserver.rewards.base import Episode, Judge, Reward, RewardInputError, RewardResult
from toolserver.rewards.judge import JudgeFailed
from toolserver.rewards.text import episode_text
from toolserver.rewards.thyme_math import evaluate_math, libraries
from toolserver.rewards.thyme_prompts import CONSISTENCY, VQA

FMT_WEIGHT, VQA_WEIGHT, CST_WEIGHT, TRIES, THINKING_CHARS = 0.5, 1.0, 0.5, 3, 500
JUDGE_PARAMS = MappingProxyType({"temperature": 0.1, "max_tokens": 256, "top_p": None, "n": 1})
FORMAT = re.compile(r"^(?:(?!</think>).)*</think>\s<answer>(?:(?!</answer>).)*</answer>\Z", re.DOTALL)
THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
FENCE = re.compile(r"```(.*?)```", re.DOTALL)
PREFIXES = ("The best answer is", "The correct answer is", "The answer is", "The answer: ", "Answer: ",
            "The best option is", "The correct option is", "Best answer:", "Best option:")
TAGS = ("<think>", "</think>", "<answer>", "</answer>")
CALLS = ThymeFormat()


def format_ok(completion: str) -> bool:
    return FORMAT.fullmatch(completion) is not None and all(completion.count(tag) == 1 for tag in TAGS)


def answer_of(completion: str) -> str:
    match = ANSWER.search(completion)
    return match.group(1).strip() if match else ""


def thinking_of(completion: str) -> str:
    match = THINK.search(completion)
    thinking = match.group(1) if match else ""
    if thinking == "":
        thinking = completion.split("</think>")[0].replace("<think>", "")
    for tag in ("<image>", "</sandbox_output>", "<sandbox_output>"):
        thinking = thinking.replace(tag, "")
    return thinking


def without_prefixes(answer: str) -> str:
    answer = answer.strip()
    for prefix in PREFIXES:
        answer = answer.replace(prefix, "")
    return answer


def verdict_score(text: str, key: str) -> int:
    """The verdict's integer as the reference reads it; raises (a failed try) when it cannot."""
    if "```" in text:
        fenced = FENCE.findall(text)
        if len(fenced) == 1:
            text = fenced[0]
    start = text.find("{")
    body = text[start:text.find("}", start + 1) + 1].replace("\\", "\\\\")
    return int(json.loads(body)[key])


def math_verified(answer: str, truth: str) -> bool:
    """math-verify with the answer parsed as the gold, as the reference calls it; its default limits (5 s by SIGALRM)
    on the main thread, none off it (signals cannot be set there: the same answers, none cut short)."""
    from math_verify import parse, verify

    if threading.current_thread() is threading.main_thread():
        return float(verify(parse(answer), parse(truth))) > 0
    return float(verify(parse(answer, parsing_timeout=None), parse(truth, parsing_timeout=None),
                        timeout_seconds=None)) > 0


async def ask(judge: Judge, prompt: str, key: str, details: dict[str, Any]) -> int | None:
    """Up to three tries for a readable verdict; None when none was."""
    messages = [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
    verdicts = details.setdefault(f"{key.lower()}_verdicts", [])
    for _ in range(TRIES):
        try:
            text = await judge.chat(messages, **JUDGE_PARAMS)
        except JudgeFailed as exc:
            verdicts.append({"error": str(exc)})
            continue
        verdicts.append(text)
        try:
            return verdict_score(text, key)
        except Exception:  # the reference's tries catch every failure to read a verdict
            continue
    return None


class ThymeReward(Reward):
    profile = "thyme"
    source = "yfzhang114/Thyme/examples/train/grpo/plugin/agent_rm.py@b9285b7a:fmt_orm+vqa_orm+cst_orm"
    terms = ("format", "accuracy", "consistency")
    weights = MappingProxyType({"format": 1.0, "accuracy": 1.0, "consistency": 1.0})
    judged = True
    description = ("format 0.5 + accuracy (strict math check, math-verify, then a judge: ±1) + 0.5·judged "
                   "consistency of the thinking with the answer, zeroed when accuracy ≤ 0; float32 sum")

    def check(self, episode: Episode) -> None:
        if episode.ground_truth is None or episode.question is None:
            raise RewardInputError("the thyme reward needs the ground truth and the question (its judge is "
                                   "given both)")
        try:
            import math_verify  # noqa: F401

            libraries()
        except ImportError:
            raise RewardInputError("Thyme's reward needs math-verify, sympy and pylatexenc (pip install "
                                   "'vlm-toolserver[rewards]')") from None

    async def score(self, episode: Episode, judge: Judge | None = None) -> RewardResult:
        self.check(episode)
        completion = episode_text(episode, CALLS, image="<image>")
        truth, question = str(episode.ground_truth), str(episode.question)
        answer = answer_of(completion)
        details: dict[str, Any] = {"answer": answer}
        fmt = FMT_WEIGHT if format_ok(completion) else 0.0
        accuracy = consistency = 0.0
        if answer:
            judge = self.need_judge(judge)
            accuracy = await self._accuracy(answer, truth, question, judge, details)
            thinking = thinking_of(completion)[-THINKING_CHARS:]
            prompt = CONSISTENCY.replace("gen_solution", thinking).replace("gen_answer", answer)
            consistent = await ask(judge, prompt, "Consistency", details)
            consistency = 0.0 if consistent is None else _scaled(consistent, 1.0, CST_WEIGHT, "Consistency")
        raw = {"format": fmt, "accuracy": accuracy, "consistency": consistency}
        terms32 = {name: np.float32(value) for name, value in raw.items()}
        if terms32["accuracy"] <= 0:
            terms32["consistency"] = np.float32(0.0)
        total = np.float32(0.0)
        for name in self.terms:
            total = np.float32(total + terms32[name] * np.float32(self.weights[name]))
        details["before_mask"] = raw
        return RewardResult(total=float(total), terms={name: float(v) for name, v in terms32.items()},
                            weights=dict(self.weights), details=details)

    async def _accuracy(self, answer: str, truth: str, question: str, judge: Judge, details: dict[str, Any]) -> float:
        student = without_prefixes(answer)
        # In a worker thread: sympy has no time limit there (nor in the reference), so an answer it cannot finish
        # holds a thread, not the event loop (docs/decisions.md, "Thyme's reward served").
        if await asyncio.to_thread(evaluate_math, student, truth):
            details["verified_by"] = "strict_math"
            return VQA_WEIGHT
        if math_verified(student, truth):
            details["verified_by"] = "math_verify"
            return VQA_WEIGHT
        prompt = VQA.replace("ref_answer", truth).replace("gen_answer", answer).replace("input_question", question)
        correct = await ask(judge, prompt, "Correctness", details)
        return 0.0 if correct is None else _scaled(correct, 2.0, VQA_WEIGHT, "Correctness", shift=0.5)


def _scaled(score: int, scale: float, weight: float, key: str, shift: float = 0.0) -> float:
    """The verdict as the reference scores it: (n − shift)·scale·weight. An integer past a float's range fails the
    reference's step there; here it answers `judge_failed`."""
    try:
        return (score - shift) * scale * weight if shift else score * weight
    except OverflowError:
        raise JudgeFailed(f"the judge's {key} {score} is past a float's range") from None


REWARDS = (ThymeReward(),)
