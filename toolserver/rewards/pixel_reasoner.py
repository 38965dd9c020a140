"""Pixel-Reasoner's reward (profile `pixel-reasoner`): TIGER-AI-Lab/verl-tool @ 980962b,
`verl_tool/workers/reward_manager/pixel_reasoner.py` (`PixelReasonerRewardManager`, the `reward_manager` of
`examples/train/pixel_reasoner/train_qwen25vl.sh`). Pixel-Reasoner's own repository trains with the same terms.

- accuracy: math-verify on the whole decoded response against the ground truth (`\\boxed{…}` around it unless it
  has one; `dfrac`, `\\text`, `\\varnothing`, `minutes` and `cm` normalised), then again lowercased; 1 or 0; a
  list of ground truths takes the best.
- curiosity (a bonus): for a rollout with a valid action, 0.5 · max(0, 0.3 - the group's rate of rollouts with a
  valid action) — the group is the GRPO group (the `uid`), so score its rollouts together (`/v1/rewards`, one
  `group` per prompt; a session scored alone is a group of one).
- action redundancy: 0.05 · min(1 - valid actions, 0).
- total = accuracy + curiosity + redundancy (validation scores the accuracy alone: `details.validation_reward`).
A valid action is a call the tool answered (`ok` in the call log: verl-tool's `valid` is set only when the crop or
the frames came back). The decoded response is `response`, or the turns with each turn's observation as the agent
loop appends it (`enable_mtrl`: Qwen's user turn, special tokens and image tokens skipped in decoding).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from toolserver.formats.pixel_reasoner import PIXEL_REASONER
from toolserver.rewards.base import Episode, RewardInputError, RewardResult, RuleReward
from toolserver.rewards.text import turn_results

SOURCE = "TIGER-AI-Lab/verl-tool/verl_tool/workers/reward_manager/pixel_reasoner.py@980962b"
RATE_FLOOR, ALPHA = 0.3, 0.5  # H and α of the paper
REDUNDANCY_LIMIT, BETA = 1, 0.05  # n_vo and β
WEIGHTS = {"curiosity": ALPHA, "action_redundancy": BETA}
OBSERVATION_TURN = "\nuser\n{obs}\nassistant\n"


def decoded(episode: Episode) -> str:
    if not episode.turns:
        return episode.response
    steps, position, parts = list(episode.calls), 0, []
    for i, turn in enumerate(episode.turns):
        parts.append(turn)
        if i < len(episode.turns) - 1:
            results, position = turn_results(PIXEL_REASONER, turn, steps, position)
            parts.append(OBSERVATION_TURN.format(obs=PIXEL_REASONER.prompt(results, image="")))
    return "".join(parts)


def normalize(text: str) -> str:
    """`normalize_answer`'s replacements, in its order (each is a no-op where its text is absent)."""
    for old, new in (("dfrac", "frac"), ("\\text", ""), ("\\varnothing", "\\emptyset"), ("minutes", ""), ("cm", "")):
        text = text.replace(old, new)
    return text


@functools.lru_cache(maxsize=4096)
def parsed(text: str) -> Any:
    """math-verify's `parse` (deterministic: a group's ground truth, shared by its rollouts, is parsed once)."""
    from math_verify import parse

    return parse(text, parsing_timeout=None)


def accuracy(text: str, truth: Any) -> float:
    if isinstance(truth, list):
        return max(accuracy(text, one) for one in truth)
    from math_verify import parse, verify

    text = normalize(text)
    truth = normalize(truth) if "\\boxed" in truth else f"\\boxed{{{truth}}}"
    if verify(parse(text, parsing_timeout=None), parsed(truth), timeout_seconds=None):
        return 1.0
    lowered = verify(parse(text.lower(), parsing_timeout=None), parsed(truth.lower()), timeout_seconds=None)
    return 1.0 if lowered else 0.0


class PixelReasonerReward(RuleReward):
    profile = "pixel-reasoner"
    source = SOURCE
    terms = ("accuracy", "curiosity", "action_redundancy")
    weights = WEIGHTS
    description = "math-verified accuracy + the group's curiosity bonus + an action-redundancy penalty."

    def check(self, episode: Episode) -> None:
        if not isinstance(episode.ground_truth, (str, list)):
            raise RewardInputError("Pixel-Reasoner's reward needs the ground truth as a string (or a list of them)")
        try:
            import math_verify  # noqa: F401
        except ImportError:
            raise RewardInputError("Pixel-Reasoner's reward needs the `math-verify` package (pip install "
                                   "'vlm-toolserver[rewards]')") from None

    def rule(self, episode: Episode) -> RewardResult:
        return self._score(episode, rate=_rate([episode]))

    def rule_group(self, episodes: Sequence[Episode]) -> list[RewardResult]:
        rate = _rate(episodes)
        return [self._score(episode, rate) for episode in episodes]

    def _score(self, episode: Episode, rate: float) -> RewardResult:
        self.check(episode)
        valid = _valid_actions(episode)
        right = accuracy(decoded(episode), episode.ground_truth)
        curiosity = (valid != 0) * max(0, RATE_FLOOR - rate) * ALPHA
        redundancy = min(REDUNDANCY_LIMIT - valid, 0) * BETA
        total = right
        total += curiosity
        total += redundancy
        terms = {"accuracy": right, "curiosity": float(curiosity), "action_redundancy": float(redundancy)}
        return RewardResult(total=total, terms=terms, weights=dict(self.weights), finished=not episode.truncated,
                            violation="redundant_actions" if redundancy < 0 else None,
                            details={"valid_actions": valid, "group_tool_call_rate": rate,
                                     "validation_reward": right})


def _valid_actions(episode: Episode) -> int:
    return sum(1 for step in episode.calls if step.ok)


def _rate(episodes: Sequence[Episode]) -> float:
    return sum(1 for e in episodes if _valid_actions(e) > 0) / len(episodes) if episodes else 0.0


REWARDS = (PixelReasonerReward(),)
