"""Mini-o3's reward (profile `mini-o3`): Mini-o3/Mini-o3 @ 8654dbf4, `verl/utils/reward_score/general_qa_tool.py`.

Its recipe (README: `reward_model.use_hybrid_reward_manager=True`, `data.gpt_general_qa_reward_fn=general_qa_tool`)
scores every rollout with this judged function (the rule-based `general_qa_tool_mc` it also names is then not
used), over the assistant turns as its reward manager decodes them (`turns`, each without special tokens):

- accuracy: with `gpt_extract_answer` and `extract_answer_tags: strict`, the first `<answer>…</answer>` of the turns
  joined by spaces (none: 0, no judge). The judge gets the reference's system and query prompts as text parts,
  `max_tokens` 16384, temperature 0, 0.2, 0.4… on up to 5 attempts; an attempt counts when its text holds `score:`
  and the first word after the last one holds a 0 or 1; then 1 when that word holds a 1. Five failed attempts:
  the rollout is filtered out of training (`is_filter`; here total 0 and violation `filtered`).
- format: `grounding_format_reward`: one turn must be `<think>…</think>…<answer>…</answer>` (each once, no
  `<grounding>`); several: each turn but the last `<think>…</think>…<grounding>…</grounding>` without `<answer>`,
  the last a direct answer. Tool use: a `<grounding>` block in a turn.
- total = (1 - tool_call_penalty if a tool was used else 1) · acc_reward_weight · accuracy
  + format_reward_weight · format + (use_tool_reward_weight if a tool was used else 0), with the recipe's weights
  (1.0, 0, penalty 0, tool weight 0: the total is the accuracy), each overridable in `extra` under its own name.
The question is the recipe's `raw_prompt` (`extra.raw_prompt`, the chat messages, written as Python writes a
list), else `question`. A truncated episode (over the turn limit) is masked from the loss by its trainer
(`ignore_exceed`): `finished` is false.
"""

from __future__ import annotations

import re
from typing import Any

from toolserver.rewards.base import Episode, Judge, Reward, RewardInputError, RewardResult
from toolserver.rewards.judge import JudgeFailed
from toolserver.rewards.mini_o3_prompts import QUERY_PROMPT, SYSTEM_PROMPT

SOURCE = "Mini-o3/Mini-o3/verl/utils/reward_score/general_qa_tool.py@8654dbf4"
RECIPE = {"acc_reward_weight": 1.0, "format_reward_weight": 0.0, "tool_call_penalty": 0.0,
          "use_tool_reward_weight": 0.0}
ATTEMPTS = 5
DIRECT = re.compile(r"^<think>.*</think>.*<answer>.*</answer>$", re.DOTALL)
STEP = re.compile(r"^<think>.*</think>.*<grounding>.*</grounding>$", re.DOTALL)
GROUNDING = re.compile(r"<grounding>(.*?)</grounding>", re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def direct_answer(turn: str) -> bool:
    if not DIRECT.match(turn) or turn.count("<think>") != 1 or turn.count("</think>") != 1:
        return False
    if turn.count("<answer>") != 1 or turn.count("</answer>") != 1:
        return False
    return "<grounding>" not in turn and "</grounding>" not in turn


def grounding_step(turn: str) -> bool:
    if not STEP.match(turn) or turn.count("<think>") != 1 or turn.count("</think>") != 1:
        return False
    if turn.count("<grounding>") != 1 and turn.count("</grounding>") != 1:
        return False
    return "<answer>" not in turn and "</answer>" not in turn


def format_and_tools(turns: list[str]) -> tuple[int, int]:
    """`grounding_format_reward`: (format score, turns that called the tool, counted as the reference counts)."""
    if len(turns) == 1:
        turn = turns[0].strip()
        return int(direct_answer(turn)), int(bool(GROUNDING.findall(turn)))
    calls, steps_ok = 0, True
    for turn in turns[:-1]:
        turn = turn.strip()
        calls += bool(GROUNDING.findall(turn))
        if not grounding_step(turn):
            steps_ok = False
            break
    return int(steps_ok and direct_answer(turns[-1])), calls


def read_score(text: str) -> str | None:
    """An attempt's verdict word, or None when the attempt does not count."""
    if "score:" not in text.lower():
        return None
    word = text.lower().split("score:")[-1].strip().split("\n")[0].strip().split(" ")[0]
    return word if "1" in word or "0" in word else None


class MiniO3Reward(Reward):
    profile = "mini-o3"
    source = SOURCE
    terms = ("accuracy", "format", "tool_used")
    weights = RECIPE
    judged = True
    description = "LLM-judged accuracy (the recipe weighs only it), the grounding format and the tool terms."

    def check(self, episode: Episode) -> None:
        if not episode.turns and not episode.response:
            raise RewardInputError("Mini-o3's reward reads the assistant turns: give `turns`")
        if episode.ground_truth is None:
            raise RewardInputError("Mini-o3's reward needs the ground truth")

    async def score(self, episode: Episode, judge: Judge | None = None) -> RewardResult:
        self.check(episode)
        turns = list(episode.turns) or [episode.response]
        weights = {name: float(episode.extra.get(name, value)) for name, value in RECIPE.items()}
        found = ANSWER.search(" ".join(turns))
        verdicts: list[str] = []
        accuracy: float = 0.0
        word: str | None = ""
        if found:
            prompt = QUERY_PROMPT.format(question=_question(episode), ground_truth=episode.ground_truth,
                                         prediction=found.group(1))
            word = await _judged(self.need_judge(judge), prompt, verdicts)
            accuracy = 1.0 if word and "1" in word else 0.0
        form, tools = format_and_tools(turns)
        terms = {"accuracy": accuracy, "format": float(form), "tool_used": 1.0 if tools > 0 else 0.0}
        details: dict[str, Any] = {"answer": found.group(1) if found else None, "judge": verdicts}
        if word is None:
            return RewardResult(total=0.0, terms=terms, weights=weights, finished=not episode.truncated,
                                violation="filtered", details=details | {"is_filter": True})
        factor = (1 - weights["tool_call_penalty"]) if tools > 0 else 1.0
        bonus = weights["use_tool_reward_weight"] if tools > 0 else 0.0
        total = factor * (weights["acc_reward_weight"] * accuracy) + weights["format_reward_weight"] * form + bonus
        return RewardResult(total=total, terms=terms, weights=weights, finished=not episode.truncated,
                            details=details)


def _question(episode: Episode) -> Any:
    raw = episode.extra.get("raw_prompt")
    return raw if raw is not None else episode.question


async def _judged(judge: Judge, prompt: str, verdicts: list[str]) -> str | None:
    messages = [{"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
                {"role": "user", "content": [{"type": "text", "text": prompt}]}]
    for attempt in range(ATTEMPTS):
        try:
            text = await judge.chat(messages, temperature=min(0.2 * attempt, 1.0), max_tokens=16384)
        except JudgeFailed:
            continue
        verdicts.append(text)
        word = read_score(text)
        if word is not None:
            return word
    return None


REWARDS = (MiniO3Reward(),)
