"""MGPO's reward scores the goldens recorded from its own code (scripts/goldens/record_rewards_mgpo.py)."""

from __future__ import annotations

import pytest

from tests.rewards.helpers import check_goldens, episode_of
from toolserver.errors import BadRequest
from toolserver.rewards import RewardInputError, get_reward


def test_mgpo_scores_its_goldens() -> None:
    assert check_goldens("mgpo") == 36


def test_mgpo_needs_a_ground_truth() -> None:
    with pytest.raises(RewardInputError, match="ground truth"):
        get_reward("mgpo").rule(episode_of("mgpo", {"response": "\\boxed{B}"}))  # type: ignore[attr-defined]


def test_mgpo_reports_the_answer_it_graded() -> None:
    result = get_reward("mgpo").rule(  # type: ignore[attr-defined]
        episode_of("mgpo", {"turns": ["x", "so \\boxed{\\text{B}}"], "ground_truth": "B"}))
    assert (result.total, result.details["answer"]) == (1.0, "\\text{B}")


@pytest.mark.parametrize(("profile", "why"), [("mags-rl", "released no code"), ("imagent", "released no code")])
def test_a_profile_without_a_served_reward_says_why(profile: str, why: str) -> None:
    with pytest.raises(BadRequest, match=why):
        get_reward(profile)
