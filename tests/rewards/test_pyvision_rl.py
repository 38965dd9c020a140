"""PyVision-RL's reward scores the goldens recorded from its own code (scripts/goldens/record_rewards_pyvision_rl.py),
each through a local judge endpoint that checks the exact requests."""

from __future__ import annotations

import asyncio

import pytest

from tests.rewards.helpers import check_goldens, episode_of, load_golden
from toolserver.rewards import RewardInputError, get_reward


@pytest.mark.slow  # every judged golden against a local judge: in .ci/run's slow leg
def test_pyvision_rl_scores_its_goldens() -> None:
    assert check_goldens("pyvision-rl") == len(load_golden("pyvision-rl")["cases"]) >= 21


def test_a_source_without_judge_examples_is_refused() -> None:
    episode = episode_of("pyvision-rl", {"response": "x", "ground_truth": "a", "question": "q",
                                         "extra": {"data_source": "zebra_cot"}})
    with pytest.raises(RewardInputError, match="data_source"):
        asyncio.run(get_reward("pyvision-rl").score(episode))


@pytest.mark.slow  # every judged golden against a local judge: in .ci/run's slow leg
def test_pyvision_rl_scores_turns_like_the_response_they_make() -> None:
    from tests.rewards.helpers import _check_judged

    reward = get_reward("pyvision-rl")
    cases = [c for c in load_golden("pyvision-rl")["cases"] if "<code>" not in c["episode"]["response"]]
    assert len(cases) >= 18
    for case in cases:
        episode = {k: v for k, v in case["episode"].items() if k != "response"}
        _check_judged("pyvision-rl", reward, {**case, "episode": {**episode, "turns": [case["episode"]["response"]]}})
