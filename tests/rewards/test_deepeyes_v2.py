"""DeepEyesV2's reward scores the goldens recorded from its own code (scripts/goldens/record_rewards_deepeyes_v2.py),
each through a local judge endpoint that checks the exact requests."""

from __future__ import annotations

import asyncio

import pytest

from tests.rewards.helpers import check_goldens, episode_of, load_golden
from toolserver.rewards import RewardInputError, get_reward
from toolserver.rewards.deepeyes_v2 import normalize_math


@pytest.mark.slow  # every judged golden against a local judge: in .ci/run's slow leg
def test_deepeyes_v2_scores_its_goldens() -> None:
    assert check_goldens("deepeyes-v2") == len(load_golden("deepeyes-v2")["cases"]) >= 28


def test_deepeyes_v2_needs_its_data_source() -> None:
    episode = episode_of("deepeyes-v2", {"response": "<answer>a</answer>", "ground_truth": "a", "question": "q"})
    with pytest.raises(RewardInputError, match="data_source"):
        asyncio.run(get_reward("deepeyes-v2").score(episode))


@pytest.mark.parametrize(("answer", "normalized"), [("x = 5 \\text{ cm}", "5"), ("\\boxed{1,000}", "1000"),
                                                    ("$\\frac12$", "\\frac{1}{2}"), ("\\sqrt2", "\\sqrt{2}")])
def test_math_answers_are_normalized_as_the_reference_does(answer: str, normalized: str) -> None:
    assert normalize_math(answer) == normalized


@pytest.mark.slow  # every judged golden against a local judge: in .ci/run's slow leg
def test_deepeyes_v2_scores_turns_like_the_response_they_make() -> None:
    from tests.rewards.helpers import _check_judged

    reward = get_reward("deepeyes-v2")
    cases = [c for c in load_golden("deepeyes-v2")["cases"] if "<code>" not in c["episode"]["response"]
             and "<tool_call>" not in c["episode"]["response"]]
    assert len(cases) >= 20
    for case in cases:
        episode = {k: v for k, v in case["episode"].items() if k != "response"}
        _check_judged("deepeyes-v2", reward, {**case, "episode": {**episode, "turns": [case["episode"]["response"]]}})
