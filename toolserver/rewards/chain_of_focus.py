"""Chain-of-Focus' reward (profile `chain-of-focus`): xtong-zhang/Chain-of-Focus @ 431ff0dd,
`verl/recipe/zoomin/zoomin_reward3.py`, `zoomin_reward_function`, the one its RL job names
(`slurm_jobs/rl/run.sh`: `custom_reward_function.path=…/zoomin_reward3.py`, `reward_type=acc_format`, which the
function prints and does not use). Picked by `data_source`:

- `vstar_threevgr`, `visdrone_threevgr`, `vstar` (the default), `chart`, `threevgr`, `rl_multiresolution`:
  `compute_llm_judge_score`. The tool turns' prompt sentence (DeepEyes' turn prompt, which its zoom tool returns)
  is removed from the text; the answer is the last `<answer>…</answer>` (inner spaces trimmed); the judge gets
  DeepEyes' in-context prompt (system "You are a helpful assistant.", temperature 0.3, a random seed) and its
  verdict is read as DeepEyes reads it. Format: 1 unless the `<think>`/`</think>` counts differ or are 0, the
  `<answer>`/`</answer>` counts differ or are 0, or the answer has more than 1000 words.
- `thinklite_eureka`: `compute_score_math` over the whole text: the last `<answer>` (empty: accuracy 0), math-verify,
  else the judge with DeepEyes' math prompt (system message, temperature 0, up to 8 asks on errors).
- total = 0.9·accuracy + 0.1·format.

The text is the decoded response (`response`), or the turns with each call's tool message
(`toolserver.rewards.text.with_tool_turns`).
"""

from __future__ import annotations

import random
import re

from toolserver.profiles import get_profile
from toolserver.rewards.base import Episode, Judge, Reward, RewardInputError, RewardResult, weighted
from toolserver.rewards.deepeyes import SYSTEM, _math_verify, equivalence_verdict, general_verdict
from toolserver.rewards.deepeyes_prompts import MATH_VERIFY_PROMPT, judge_prompt
from toolserver.rewards.judge import JudgeFailed
from toolserver.rewards.text import with_tool_turns

SOURCE = "xtong-zhang/Chain-of-Focus/verl/recipe/zoomin/zoomin_reward3.py@431ff0dd"
JUDGED = ("vstar_threevgr", "visdrone_threevgr", "vstar", "chart", "threevgr", "rl_multiresolution")
MATH = ("thinklite_eureka",)
WEIGHTS = {"accuracy": 0.9, "format": 0.1}
TURN_PROMPT = ("Think in the mind first, and then decide whether to call tools one or more times OR provide final "
               "answer. Format strictly as: <think>...</think> <tool_call>...</tool_call> <tool_call>...</tool_call> "
               "(if any tools needed) OR <answer>...</answer> (if no tools needed).")
ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)
MAX_WORDS = 1000


def last_answer(text: str) -> str:
    found = ANSWER.findall(text)
    return found[-1].strip() if found else ""


def format_error(text: str) -> bool:
    opened, closed = text.count("<think>"), text.count("</think>")
    if opened != closed or opened == 0:
        return True
    opened, closed = text.count("<answer>"), text.count("</answer>")
    if opened != closed or opened == 0:
        return True
    return len(last_answer(text).split()) > MAX_WORDS


class ChainOfFocusReward(Reward):
    profile = "chain-of-focus"
    source = SOURCE
    terms = ("accuracy", "format")
    weights = WEIGHTS
    judged = True
    description = "0.9 · LLM-judged (or math-verified) accuracy + 0.1 · format."

    def check(self, episode: Episode) -> None:
        source = episode.extra.get("data_source", "vstar")
        if source not in JUDGED + MATH:
            raise RewardInputError(f"Chain-of-Focus has no reward for data_source {source!r} (its function leaves "
                                   f"its terms unset); one of {', '.join(JUDGED + MATH)}")
        if episode.question is None:
            raise RewardInputError("Chain-of-Focus' judge reads the question (`extra_info['question']`): give it")

    async def score(self, episode: Episode, judge: Judge | None = None) -> RewardResult:
        self.check(episode)
        text = with_tool_turns(episode, get_profile(self.profile).format)
        if episode.extra.get("data_source", "vstar") in MATH:
            text_scored = text
            answer = last_answer(text)
            verdicts: list[str] = []
            accuracy = 0.0 if not answer else await _math(episode, answer, self.need_judge(judge), verdicts)
        else:
            text_scored = text.replace(TURN_PROMPT, "")
            answer = last_answer(text_scored)
            prompt = judge_prompt(answer, episode.ground_truth, episode.question)
            verdicts = [await self.need_judge(judge).chat([SYSTEM, {"role": "user", "content": prompt}],
                                                          seed=random.randint(0, 1000000),
                                                          temperature=0.3)]
            accuracy = general_verdict(verdicts[0])
        broken = format_error(text_scored)
        terms = {"accuracy": accuracy, "format": 0.0 if broken else 1.0}
        return RewardResult(total=weighted(terms, WEIGHTS), terms=terms, weights=dict(WEIGHTS),
                            finished=not episode.truncated, violation="format" if broken else None,
                            details={"answer": answer, "judge": verdicts})


async def _math(episode: Episode, answer: str, judge: Judge, verdicts: list[str]) -> float:
    if _math_verify(str(episode.ground_truth), answer):
        return 1.0
    prompt = MATH_VERIFY_PROMPT.format(query=episode.question, gold_ans=episode.ground_truth, pred_ans=answer)
    text = ""
    for _ in range(8):
        try:
            text = await judge.chat([SYSTEM, {"role": "user", "content": prompt}],
                                    seed=random.randint(0, 1000000), temperature=0.0)
            break
        except JudgeFailed:
            continue
    verdicts.append(text)
    return 1.0 if equivalence_verdict(text) else 0.0


REWARDS = (ChainOfFocusReward(),)
