"""CodeDance's reward (profile `codedance`): an LLM judge's accuracy, a format penalty, and the tool terms its trainer
shapes advantages with, per data-source family, as its recipes train
(`examples/run_qwen2.5-vl-7b-sft-tool-codeformat_step_beta0.*.sh`: `custom_reward_function` `compute_score_batch`,
the `batch` reward manager, `use_step_reward`).

Source: CodeDance-VL/CodeDance @ 62f8c6f5, `verl/utils/reward_score/llm_judge_qwen_tool_step.py`. `response` is the
decoded response (the tool turns with their `<tool_response>` blocks, as the rollout's chat template renders them).

- `extra.data_source` `vstar`, `vl_agent`, `chart`, any other non-empty name (the reference's SA1B branch) or none:
  the first `<answer>…</answer>` (stripped; none is "" and a format error) is judged with the reference's
  in-context prompt (system "You are a helpful assistant.", temperature 0.3, a random seed); the stripped verdict,
  after its last "Judgement:", is correct when it holds "1". Unpaired think tags or not exactly one answer pair: a
  format error. An answer of 1000 characters or more scores 0 and is a format error. Total: accuracy − 0.2 for a
  format error. A judge that cannot be reached scores 0 (the reference's loop gives up on anything but a 429).
- `thinklite_eureka`, `xince` (math): the last answer after the last `</think>`; math-verify first, then the judge
  with `MATH_VERIFY_PROMPT` (temperature 0.0, up to 8 tries): true and not false. "tool_call" after the last
  `</think>`, unpaired think tags or no answer: a format error. Total: 1.2·accuracy − 0.4 for a format error.
- tool terms, from the `<tool_response>` blocks (a call failed when its response holds "Error", "timeout" or the
  no-output text): `tool_success_rate`, `tool_reward` (1.5 or 0.5 times it by accuracy; 2 or 1 for math), and the
  per-call step rewards (−0.5 a failed call, discounted by 0.2 from the end), which the trainer adds to the
  advantages; they are reported, not summed into the total, as there.
"""

from __future__ import annotations

import random
import re
from types import MappingProxyType
from typing import Any

from toolserver.profiles.codedance import CodeDanceFormat
from toolserver.rewards.base import Episode, Judge, Reward, RewardInputError, RewardResult
from toolserver.rewards.codedance_prompts import DEMO, ERRORS, MATH, TEST
from toolserver.rewards.judge import JudgeFailed
from toolserver.rewards.text import episode_text

MATH_SOURCES = frozenset({"thinklite_eureka", "xince"})
RESPONSE = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
LONG_ANSWER, MATH_TRIES, DISCOUNT = 1000, 8, 0.2


def tool_terms(response: str) -> tuple[list[float], float | None]:
    """The per-call step rewards (discounted from the end, a final 0 appended) and the calls' success rate."""
    failed = [any(text in block for text in ERRORS) for block in RESPONSE.findall(response)]
    scores = [-0.5 if bad else 0.0 for bad in failed] + [0]
    steps: list[float] = [1.0] * len(scores)
    steps[-1] = scores[-1]
    for i in range(len(scores) - 2, -1, -1):
        steps[i] = scores[i] + DISCOUNT * steps[i + 1]
    rate = (len(failed) - sum(failed)) / len(failed) if failed else None
    return steps, rate


def judged_correct(verdict: str | None) -> float:
    if not verdict:
        return 0.0
    text = verdict.strip()
    if "Judgement:" in text:
        text = text.split("Judgement:")[-1].strip()
    return 1.0 if "1" in text else 0.0


def math_verified(truth: str, answer: str) -> bool:
    from math_verify import parse, verify

    return bool(verify(parse(truth), parse(answer)))


# The profile's turns and observation texts: the response rebuilt from the turns and the call log.
FORMAT = CodeDanceFormat()


class CodeDanceReward(Reward):
    profile = "codedance"
    source = "CodeDance-VL/CodeDance/verl/utils/reward_score/llm_judge_qwen_tool_step.py@62f8c6f5:compute_score_batch"
    terms = ("accuracy", "format", "tool_reward")
    weights = MappingProxyType({"accuracy": 1.0, "format": 0.2})
    judged = True
    description = ("judge accuracy − 0.2 on a format error (math: 1.2·accuracy − 0.4), with the tool success rate, "
                   "tool reward and per-call step rewards its trainer shapes advantages with")

    async def score(self, episode: Episode, judge: Judge | None = None) -> RewardResult:
        source = episode.extra.get("data_source", "")
        text = episode_text(episode, FORMAT)
        if not isinstance(source, str) or episode.ground_truth is None or not text:
            raise RewardInputError("the codedance reward needs the decoded response (or the turns), the ground "
                                   "truth and extra.data_source (a string; '' for none)")
        judge = self.need_judge(judge)
        details: dict[str, Any] = {}
        math = source in MATH_SOURCES
        if math:
            accuracy, error = await self._math(episode, text, judge, details)
        else:
            accuracy, error = await self._general(episode, text, judge, details)
        scale, penalty, tool_weights = (1.2, 0.4, (2.0, 1.0)) if math else (1.0, 0.2, (1.5, 0.5))
        form = -1.0 if error else 0.0
        steps, rate = tool_terms(text)
        tool = 0.0
        if rate is not None:
            tool = (tool_weights[0] if accuracy > 0.5 else tool_weights[1]) * rate
        details.update(tool_step=steps, tool_success_rate=rate)
        weights = {"accuracy": scale, "format": penalty}
        return RewardResult(total=accuracy * scale + penalty * form,
                            terms={"accuracy": accuracy, "format": form, "tool_reward": tool}, weights=weights,
                            details=details)

    async def _general(self, episode: Episode, text: str, judge: Judge,
                       details: dict[str, Any]) -> tuple[float, bool]:
        error = text.count("<think>") != text.count("</think>")
        error = error or text.count("<answer>") != 1 or text.count("</answer>") != 1
        match = ANSWER.search(text)
        answer = match.group(1).strip() if match else ""
        error = error or match is None
        details["answer"] = answer
        user = DEMO + TEST.format(question=episode.question or "", ground_truth=episode.ground_truth,
                                  prediction=answer)
        messages = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": user}]
        try:
            verdict: str | None = await judge.chat(messages, seed=random.randint(0, 1000000), temperature=0.3)
        except JudgeFailed as exc:
            verdict, details["judge_error"] = None, str(exc)
        details["verdict"] = verdict
        accuracy = judged_correct(verdict)
        if len(answer) >= LONG_ANSWER:
            accuracy, error = 0.0, True
        return accuracy, error

    async def _math(self, episode: Episode, text: str, judge: Judge,
                    details: dict[str, Any]) -> tuple[float, bool]:
        error = text.count("<think>") != text.count("</think>")
        tail = text.split("</think>")[-1].strip()
        error = error or "tool_call" in tail
        answers = ANSWER.findall(tail)
        if not answers:
            details["answer"] = ""
            return 0.0, True
        answer = details["answer"] = answers[-1].strip()
        truth = str(episode.ground_truth)
        if math_verified(truth, answer):
            return 1.0, error
        messages = [{"role": "user", "content": MATH.format(query=episode.question or "", gold_ans=truth,
                                                            pred_ans=answer)}]
        verdict = ""
        for _ in range(MATH_TRIES):
            try:
                verdict = (await judge.chat(messages, seed=random.randint(0, 1000000), temperature=0.0)).strip()
                break
            except JudgeFailed as exc:
                details.setdefault("judge_errors", []).append(str(exc))
        details["verdict"] = verdict
        judgement = verdict.split("## Equivalence Judgement")[-1].lower()
        return (1.0 if "true" in judgement and "false" not in judgement else 0.0), error


REWARDS = (CodeDanceReward(),)
