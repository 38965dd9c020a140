"""MGPO's reward (profile `mgpo`): accuracy alone, 1.0 when the last `\\boxed{…}` of the response grades equal to the
ground truth under MathRuler, else 0.0. No format term, no grounding term: the box the model draws is rewarded only
through the answer it leads to.

Source: xinyu1205/verl (branch `mgpo`, the code MGPO's README points to) @ 994efbe6,
`verl/utils/reward_score/high_resolution.py` (`compute_score` → `acc_reward`), picked by `_default_compute_score`
for its MME-RealWorld and V* data sources; the run script (`examples/grpo_trainer/run_qwen2_5_vl-7b_mgpo.sh`) adds
no other term. Matching is MathRuler's own (`extract_boxed_content`, `grade_answer`), used as a library.

What it reads: the response as verl's reward manager decodes it (special tokens dropped), i.e. the grounding turn,
the user turn the rollout inserts, and the final turn. Both inserted turns end their instruction with an empty
`\\boxed{}`, so when `response` is not given and the episode has two or more turns, the answer is the final turn's
last box, or the empty string when the final turn has none (the inserted `\\boxed{}` is then the last one); a
single turn is read alone (no box there: the string "None", as MathRuler returns it).
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

from toolserver.rewards.base import Episode, RewardInputError, RewardResult, RuleReward

BOX = "\\boxed{"


def _mathruler() -> tuple[Callable[[str], str], Callable[[str, str], bool]]:
    """MathRuler's two functions, imported when a reward is scored (the `rewards` extra; the server runs without)."""
    try:
        from mathruler.grader import extract_boxed_content, grade_answer
    except ImportError:
        raise RewardInputError("MGPO's reward needs the `mathruler` package (pip install 'vlm-toolserver[rewards]')"
                               ) from None
    return extract_boxed_content, grade_answer


def answer_of(episode: Episode) -> str:
    extract_boxed_content, _ = _mathruler()
    if episode.response or not episode.turns:
        return extract_boxed_content(episode.response)
    final = episode.turns[-1]
    if len(episode.turns) > 1 and BOX not in final:
        return ""  # the inserted turn's empty `\boxed{}` is the last box of the decoded response
    return extract_boxed_content(final)


class MgpoReward(RuleReward):
    profile = "mgpo"
    source = ("xinyu1205/verl/verl/utils/reward_score/high_resolution.py@994efbe611e89e5ba153d32c2461a58f45e72e24"
              ":compute_score")
    terms = ("accuracy",)
    weights = MappingProxyType({"accuracy": 1.0})
    description = "1.0 if the last \\boxed{} grades equal to the ground truth (MathRuler), else 0.0"

    def rule(self, episode: Episode) -> RewardResult:
        if episode.ground_truth is None:
            raise RewardInputError("the mgpo reward needs a ground truth (the choice letter or value)")
        answer = answer_of(episode)
        _, grade_answer = _mathruler()
        accuracy = 1.0 if grade_answer(answer, str(episode.ground_truth)) else 0.0
        return RewardResult(total=accuracy, terms={"accuracy": accuracy}, weights=dict(self.weights),
                            details={"answer": answer})


REWARDS = (MgpoReward(),)
