"""VisionThink's reward (profile `visionthink`): a GPT-4o judge's accuracy, a format term, and a penalty on calling the
resize tool, as its efficient-reasoning recipe trains (`scripts/run_efficient_gpt4o_judge.sh`).

Source: dvlab-research/VisionThink @ 42afd8c3, `verl/utils/reward_score/general_qa_tool.py` (`compute_score`,
`format_reward`, `acc_reward`), reached through `_default_compute_score` for its `open_source` data sources, with the
`extra_info` that `verl/trainer/main_ppo.py` builds from the recipe (accuracy weight 1.0, format weight 0.5,
tool-use weight 0.0, tool-call penalty 0.1, the answer split out of `<answer>`), and the group step of
`verl/trainer/ppo/ray_trainer.py` (`fit`: soft tool-call penalty ratio 0.2, direct-answer penalty 0.1).

- accuracy: the judge (`SYSTEM_PROMPT`/`QUERY_PROMPT`, the question being the user turn's text) is given the text
  after the last `<answer>` and before the next `</answer>` of the turns joined by spaces, stripped; its verdict is
  1.0 when it contains the character "1". A verdict holding neither "0" nor "1" (or a failed request) is asked again,
  at temperature 0.2 then 0.4; after three tries the reference drops the prompt's whole group from the batch
  (`violation`: `judge_gave_no_verdict`, total 0).
- format (0.5): one turn: `<think>…</think>…<answer>…</answer>`, each tag once, no `<tool_call>` (stripped first);
  several: every turn but the last `<think>…</think>…<tool_call>…</tool_call>` with one think pair and no answer tag,
  the last (not stripped) the one-turn answer shape.
- a turn holding a `<tool_call>…</tool_call>` (every turn but the last; the only turn when there is one) counts as a
  call, up to the first ill-formed call turn; any call scales accuracy by 0.9. Total: 0.9^[called]·accuracy + format.
- group (`score_group`, the rollouts of one prompt): when fewer than a fifth (but some) of the correct rollouts
  answered directly, each direct correct one's accuracy becomes 0.9; the group's totals are the trainer's float32.
  The trainer then drops groups whose totals are all equal (`rejection_sample`), which is not a reward.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from toolserver.rewards.base import Episode, Judge, Reward, RewardInputError, RewardResult
from toolserver.rewards.judge import JudgeFailed
from toolserver.rewards.visionthink_prompts import QUERY, SYSTEM

ACC_WEIGHT, FORMAT_WEIGHT, USE_TOOL_WEIGHT, TOOL_PENALTY = 1.0, 0.5, 0.0, 0.1
SOFT_RATIO, DIRECT_PENALTY = 0.2, 0.1
TRIES, MAX_TOKENS = 3, 16384
DIRECT = re.compile(r"^<think>.*</think>.*<answer>.*</answer>$", re.DOTALL)
STEP = re.compile(r"^<think>.*</think>.*<tool_call>.*</tool_call>$", re.DOTALL)
CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
NO_VERDICT = "judge_gave_no_verdict"


def _direct_ok(text: str) -> bool:
    return (DIRECT.match(text) is not None and text.count("<think>") == 1 and text.count("</think>") == 1
            and text.count("<answer>") == 1 and text.count("</answer>") == 1
            and "<tool_call>" not in text and "</tool_call>" not in text)


def _step_ok(text: str) -> bool:
    both_wrong = text.count("<tool_call>") != 1 and text.count("</tool_call>") != 1
    return (STEP.match(text) is not None and text.count("<think>") == 1 and text.count("</think>") == 1
            and not both_wrong and "<answer>" not in text and "</answer>" not in text)


def format_and_calls(turns: Sequence[str]) -> tuple[int, int]:
    """(1 when the episode has the recipe's shape else 0, the turns counted as tool calls)."""
    if len(turns) == 1:
        text = turns[0].strip()
        return (1 if _direct_ok(text) else 0), (1 if CALL.findall(text) else 0)
    calls, steps_ok = 0, True
    for turn in turns[:-1]:
        text = turn.strip()
        if CALL.findall(text):
            calls += 1
        if not _step_ok(text):
            steps_ok = False
            break
    return (1 if steps_ok and _direct_ok(turns[-1]) else 0), calls


def prediction(turns: Sequence[str]) -> str:
    return " ".join(turns).split("<answer>")[-1].split("</answer>")[0].strip()


class VisionThinkReward(Reward):
    profile = "visionthink"
    source = "dvlab-research/VisionThink/verl/utils/reward_score/general_qa_tool.py@42afd8c3:compute_score"
    terms = ("accuracy", "format")
    weights = MappingProxyType({"accuracy": ACC_WEIGHT, "format": FORMAT_WEIGHT})
    judged = True
    description = ("0.9^[resized]·judge accuracy + 0.5·format; in a group, direct correct answers lose 0.1 when "
                   "fewer than a fifth of the correct rollouts answered directly")

    async def score(self, episode: Episode, judge: Judge | None = None) -> RewardResult:
        judge = self.need_judge(judge)
        turns = list(episode.turns) or [episode.response]
        if episode.ground_truth is None or episode.question is None:
            raise RewardInputError("the visionthink reward needs the ground truth and the question (the user turn)")
        predicted = prediction(turns)
        verdict, errors = await self._ask(judge, episode.question, str(episode.ground_truth), predicted)
        details: dict[str, Any] = {"answer": predicted, "verdict": verdict}
        if errors:
            details["judge_errors"] = errors
        if not verdict:
            return RewardResult(total=0.0, terms={}, weights=dict(self.weights), violation=NO_VERDICT,
                                details=details)
        accuracy = ACC_WEIGHT * (1.0 if "1" in verdict else 0.0)
        shape, calls = format_and_calls(turns)
        form = FORMAT_WEIGHT * shape
        if calls > 0:
            form += 1.0 * USE_TOOL_WEIGHT
        factor = (1 - TOOL_PENALTY) if calls > 0 else 1.0
        details["tool_calls"] = calls
        return RewardResult(total=factor * accuracy + form, terms={"accuracy": accuracy, "format": form},
                            weights=dict(self.weights), details=details)

    async def _ask(self, judge: Judge, question: str, truth: str, predicted: str) -> tuple[str, list[str]]:
        messages: list[Any] = [
            {"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
            {"role": "user", "content": [{"type": "text", "text": QUERY.format(
                question=question, ground_truth=truth, prediction=predicted)}]}]
        errors: list[str] = []
        for attempt in range(TRIES):
            try:
                verdict = await judge.chat(messages, temperature=min(0.2 * attempt, 1.0), max_tokens=MAX_TOKENS)
            except JudgeFailed as exc:
                errors.append(str(exc))
                continue
            if "1" in verdict or "0" in verdict:
                return verdict, errors
            errors.append(f"no '0' nor '1' in the verdict: {verdict[:200]}")
        return "", errors

    async def score_group(self, episodes: Sequence[Episode], judge: Judge | None = None) -> list[RewardResult]:
        results = list(await asyncio.gather(*(self.score(episode, judge) for episode in episodes)))
        return soft_penalty(results)


def soft_penalty(results: list[RewardResult]) -> list[RewardResult]:
    """The trainer's group step over one prompt's rollouts, in its float32."""
    total = np.array([r.total for r in results], dtype=np.float32)
    form = np.array([r.terms.get("format", 0.0) for r in results], dtype=np.float32)
    accuracy = total - form
    correct = int((accuracy > 0).sum())
    direct = accuracy == np.float32(ACC_WEIGHT)
    ratio = np.float32(direct.sum()) / (np.float32(correct) + np.float32(1e-4))
    penalized = bool(np.float32(0) < ratio < np.float32(SOFT_RATIO))
    if penalized:
        accuracy[direct] = np.float32(ACC_WEIGHT - DIRECT_PENALTY)
    final = accuracy + form
    dropped = any(r.violation == NO_VERDICT for r in results)
    out = []
    for i, result in enumerate(results):
        details = {**result.details, "group_penalized": penalized and bool(direct[i]), "group_dropped": dropped}
        terms = {"accuracy": float(accuracy[i]), "format": float(form[i])} if result.terms else {}
        out.append(RewardResult(total=float(final[i]), terms=terms, weights=result.weights,
                                violation=result.violation, details=details))
    return out


REWARDS = (VisionThinkReward(),)
