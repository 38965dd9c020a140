"""Groundlight's reward scores the goldens recorded from its own code (scripts/goldens/record_rewards_groundlight.py),
from the trainer's messages and from the turns and call log toolserver keeps."""

from __future__ import annotations

import pytest

from tests.rewards.helpers import TOLERANCE, assert_scored, check_goldens, episode_of, load_golden
from toolserver.rewards import RewardInputError, Step, get_reward
from toolserver.rewards.base import Episode


def test_groundlight_scores_its_goldens() -> None:
    assert check_goldens("groundlight") == len(load_golden("groundlight")["cases"]) >= 21


@pytest.mark.parametrize("name", ["zoom_then_answer", "zoom_error_then_answer", "two_zooms", "direct_correct"])
def test_groundlight_rebuilds_the_conversation_from_turns_and_calls(name: str) -> None:
    case = next(c for c in load_golden("groundlight")["cases"] if c["name"] == name)
    messages = case["episode"]["extra"]["messages"]
    results = [m["content"][0]["text"].removeprefix("<result>\n").removesuffix("\n</result>")
               for m in messages if m["role"] == "user"]
    episode = Episode("groundlight", turns=tuple(case["episode"]["turns"]), ground_truth=case["episode"]["ground_truth"],
                      calls=tuple(Step("zoom", text=text) for text in results))
    result = get_reward("groundlight").rule(episode)  # type: ignore[attr-defined]
    assert_scored(case, result.total, result.terms)
    assert abs(result.total - case["expected"]["total"]) <= TOLERANCE


def test_groundlight_needs_the_labelers_answers() -> None:
    with pytest.raises(RewardInputError, match="labelers"):
        get_reward("groundlight").rule(episode_of("groundlight", {"turns": ["x"], "ground_truth": "nokia"}))  # type: ignore[attr-defined]
