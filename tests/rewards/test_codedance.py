"""CodeDance's reward scores the goldens recorded from its own code (scripts/goldens/record_rewards_codedance.py),
each through a local judge endpoint that checks the exact requests; its tool terms as the reference reports them."""

from __future__ import annotations

import pytest

from tests.rewards.helpers import TOLERANCE, check_goldens, load_golden
from toolserver.rewards.codedance import tool_terms


@pytest.mark.slow  # every judged golden against a local judge: in .ci/run's slow leg
def test_codedance_scores_its_goldens() -> None:
    assert check_goldens("codedance") == len(load_golden("codedance")["cases"]) >= 23


@pytest.mark.parametrize("case", load_golden("codedance")["cases"], ids=lambda case: case["name"])
def test_codedance_tool_terms_are_the_references(case: dict) -> None:
    steps, rate = tool_terms(case["episode"]["response"])
    want = case["expected"]
    assert len(steps) == len(want["tool_step"])
    assert all(abs(a - b) <= TOLERANCE for a, b in zip(steps, want["tool_step"], strict=True))
    assert (rate is None) == (want["tool_success_rate"] is None)
    assert rate is None or abs(rate - want["tool_success_rate"]) <= TOLERANCE


@pytest.mark.slow  # every judged golden against a local judge: in .ci/run's slow leg
def test_codedance_scores_turns_like_the_response_they_make() -> None:
    from tests.rewards.helpers import _check_judged
    from toolserver.rewards import get_reward

    reward = get_reward("codedance")
    cases = [c for c in load_golden("codedance")["cases"] if "<tool_call>" not in c["episode"]["response"]]
    assert len(cases) >= 15
    for case in cases:
        episode = {k: v for k, v in case["episode"].items() if k != "response"}
        _check_judged("codedance", reward, {**case, "episode": {**episode, "turns": [case["episode"]["response"]]}})
