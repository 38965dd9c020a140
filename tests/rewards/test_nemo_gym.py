"""NeMo Gym's rewards score the goldens recorded from its own code (scripts/goldens/record_rewards_nemo_gym.py):
the PivotRL verifier field by field, and the image-tools agent's tool reward."""

from __future__ import annotations

import pytest

from tests.rewards.helpers import TOLERANCE, check_goldens, episode_of, load_golden
from toolserver.rewards import RewardInputError, Step, get_reward
from toolserver.rewards.base import Episode


def test_nemo_gym_scores_its_goldens() -> None:
    assert check_goldens("nemo-gym") == len(load_golden("nemo-gym")["cases"]) > 300


def test_pivot_verifier_reports_the_references_fields() -> None:
    reward = get_reward("nemo-gym")
    for case in load_golden("nemo-gym")["cases"]:
        if "details" not in case["expected"]:
            continue
        details = reward.rule(episode_of("nemo-gym", case["episode"])).details  # type: ignore[attr-defined]
        for key, want in case["expected"]["details"].items():
            got = details[key]
            if isinstance(want, float) and got is not None:
                assert abs(got - want) <= TOLERANCE, (case["name"], key)
            else:
                assert got == want, (case["name"], key, got, want)


def test_agent_adds_the_tasks_base_reward() -> None:
    calls = (Step("image_zoom_in_tool", images=1, meta={"reward": 0.02}),)
    result = get_reward("nemo-gym").rule(  # type: ignore[attr-defined]
        Episode("nemo-gym", calls=calls, extra={"base_reward": 1.0}))
    assert result.terms == {"base": 1.0, "tools": 0.02} and result.total == 1.0 + 0.02


def test_bad_settings_and_base_are_refused() -> None:
    reward = get_reward("nemo-gym")
    with pytest.raises(RewardInputError, match="base_reward"):
        reward.rule(Episode("nemo-gym", extra={"base_reward": "high"}))  # type: ignore[attr-defined]
    with pytest.raises(RewardInputError, match="unknown PivotRL settings"):
        reward.rule(Episode("nemo-gym", extra={"verifier": "image_tools_pivot",  # type: ignore[attr-defined]
                                               "settings": {"threshold": 0.3}}))
