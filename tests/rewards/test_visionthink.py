"""VisionThink's reward scores the goldens recorded from its own code (scripts/goldens/record_rewards_visionthink.py):
each episode through a local judge endpoint that checks the exact requests, and its GRPO groups' totals after the
trainer's group step."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.rewards.helpers import TOLERANCE, check_goldens, episode_of, groups_of, load_golden
from toolserver.rewards import JudgeNotConfigured, get_reward


@pytest.mark.slow  # every judged golden against a local judge: in .ci/run's slow leg
def test_visionthink_scores_its_goldens() -> None:
    assert check_goldens("visionthink") == len(load_golden("visionthink")["cases"])


class RecordedJudge:
    """Answers each request with the verdict the reference got for the same messages (order-free, for groups)."""

    model = "judge-model"

    def __init__(self, cases: list[dict[str, Any]]):
        self.verdicts = {json.dumps(x["messages"]): x["answer"] for case in cases for x in case["judge"]}

    async def chat(self, messages: list[Any], **params: Any) -> str:
        return self.verdicts[json.dumps(messages)]


def test_visionthink_groups_get_the_trainers_soft_penalty() -> None:
    golden = load_golden("visionthink")
    reward = get_reward("visionthink")
    groups = [group for group in groups_of(golden) if "group" in group[0]]
    assert len(groups) == 3
    for group in groups:
        episodes = [episode_of("visionthink", case["episode"]) for case in group]
        results = asyncio.run(reward.score_group(episodes, RecordedJudge(group)))
        for case, result in zip(group, results, strict=True):
            assert abs(result.total - case["expected"]["group_total"]) <= TOLERANCE, case["name"]
    penalized = [r for r in asyncio.run(reward.score_group(
        [episode_of("visionthink", c["episode"]) for c in groups[0]], RecordedJudge(groups[0])))
        if r.details["group_penalized"]]
    assert len(penalized) == 1


def test_visionthink_needs_a_judge_and_a_question() -> None:
    reward = get_reward("visionthink")
    episode = episode_of("visionthink", {"turns": ["<answer>x</answer>"], "ground_truth": "x"})
    with pytest.raises(JudgeNotConfigured):
        asyncio.run(reward.score(episode))
    with pytest.raises(Exception, match="question"):
        asyncio.run(reward.score(episode, RecordedJudge([])))
