"""PyVision-RL's reward (profile `pyvision-rl`): the judge's accuracy alone, 1.0 or 0.0, after format gates that
score 0 without asking it.

Source: agents-x-project/PyVision-RL @ 62ca599d, `verl_agents/verl/utils/reward_score/multi_task_verifier.py`
(`compute_score`), which `verl/utils/reward_score/__init__.py` picks for its visual data sources; `response` is the
decoded response (special tokens kept: the observations in `<interpreter>`, images as vision tokens).

- gates (0, no judge): `<|vision_start|><|image_pad|>` and `<|image_pad|><|vision_end|>` counts differ; the answer
  tags after the last `</interpreter>` do not pair; no `<answer>\\n\\boxed{…}\\n</answer>` anywhere (the first one
  is the answer); an answer holding `<interpreter>`, `<answer>` or `\\boxed`.
- the judge: the in-context prompt of the data source's family (`extra.data_source`: visual search `deepeyes`,
  `minio3`, `vstar`, `hrbench-4k`, `hrbench-8k`; chart `ecd`; math `wemath-standard`, `wemath-pro`, `wemath`,
  `v-interaction`, `mathvision`, `mathvista`, `mathverse`, `logicvista`; spatial `vsi`; long video `longvila`; the
  reference has no examples for any other source and fails there), system "You are a helpful assistant.",
  temperature 0.3, a random seed. Its stripped verdict: after the last "Judgement:", correct when it holds "1";
  without that word, correct only when it is exactly "1".
- an answer of 1000 characters or more scores 0 (the judge is still asked, as there).
"""

from __future__ import annotations

import random
import re
from types import MappingProxyType
from typing import Any

from toolserver.profiles.pyvision_rl import PyVisionFormat
from toolserver.rewards.base import Episode, Judge, Reward, RewardInputError, RewardResult
from toolserver.rewards.pyvision_rl_prompts import CHART, MATH, TEST, VISUAL_SEARCH
from toolserver.rewards.pyvision_rl_prompts_video import LONGVILA, VSI
from toolserver.rewards.text import episode_text

DEMOS: dict[str, str] = {
    **dict.fromkeys(("deepeyes", "minio3", "vstar", "hrbench-4k", "hrbench-8k"), VISUAL_SEARCH),
    "ecd": CHART,
    **dict.fromkeys(("wemath-standard", "wemath-pro", "v-interaction", "mathvision", "wemath", "mathvista",
                     "mathverse", "logicvista"), MATH),
    "vsi": VSI,
    "longvila": LONGVILA,
}
ANSWER = re.compile(r"<answer>\n\\boxed\{(.*?)\}\n</answer>", re.DOTALL)
LONG_ANSWER = 1000


def gate(response: str) -> tuple[str | None, str | None]:
    """(the answer, or None with the rule the response broke)."""
    if response.count("<|vision_start|><|image_pad|>") != response.count("<|image_pad|><|vision_end|>"):
        return None, "vision_tokens_unpaired"
    tail = response.split("</interpreter>")[-1].strip()
    if tail.count("<answer>") != tail.count("</answer>"):
        return None, "answer_tags_unpaired"
    match = ANSWER.search(response)
    if match is None:
        return None, "no_boxed_answer"
    answer = match.group(1).strip()
    if "<interpreter>" in answer or "<answer>" in answer or "\\boxed" in answer:
        return None, "answer_holds_markup"
    return answer, None


def verdict_correct(verdict: str) -> bool:
    if "Judgement:" in verdict:
        return "1" in verdict.split("Judgement:")[-1].strip()
    return verdict == "1"


# The profile's turns and observation texts: the response rebuilt from the turns and the call log.
FORMAT = PyVisionFormat()


class PyVisionRLReward(Reward):
    profile = "pyvision-rl"
    source = ("agents-x-project/PyVision-RL/verl_agents/verl/utils/reward_score/multi_task_verifier.py@62ca599d"
              ":compute_score")
    terms = ("accuracy",)
    weights = MappingProxyType({"accuracy": 1.0})
    judged = True
    description = "the judge's accuracy (1/0) of the boxed answer, 0 without asking when the format gates fail"

    async def score(self, episode: Episode, judge: Judge | None = None) -> RewardResult:
        source = episode.extra.get("data_source")
        if source not in DEMOS:
            raise RewardInputError(f"the pyvision-rl reward needs extra.data_source, one of {sorted(DEMOS)} (the "
                                   "reference's judge has in-context examples for those only)")
        text = episode_text(episode, FORMAT)
        if not text or episode.ground_truth is None or episode.question is None:
            raise RewardInputError("the pyvision-rl reward needs the decoded response (or the turns), the question "
                                   "and the ground truth")
        answer, broken = gate(text)
        if answer is None:
            return RewardResult(total=0.0, terms={"accuracy": 0.0}, weights=dict(self.weights), violation=broken)
        judge = self.need_judge(judge)
        user = DEMOS[source] + TEST.format(question=episode.question, ground_truth=episode.ground_truth,
                                           prediction=answer)
        messages = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": user}]
        verdict = (await judge.chat(messages, seed=random.randint(0, 1000000), temperature=0.3)).strip()
        right = verdict_correct(verdict)
        details: dict[str, Any] = {"answer": answer, "verdict": verdict, "is_answer_right": right}
        accuracy = 1.0 if right and len(answer) < LONG_ANSWER else 0.0
        return RewardResult(total=1.0 * accuracy, terms={"accuracy": accuracy}, weights=dict(self.weights),
                            violation=None if len(answer) < LONG_ANSWER else "answer_too_long", details=details)


REWARDS = (PyVisionRLReward(),)
