"""ARM-Thinker's rewards: goldens recorded by running its reward_score modules, scored exactly by both profiles;
the decoded text rebuilt from the turns and the calls; a validator session scored through the session door."""

from __future__ import annotations

import pytest

from tests.rewards.helpers import TOLERANCE, check_goldens, episode_of, load_golden
from toolserver.rewards import RewardInputError, get_reward
from toolserver.rewards.arm_thinker import decoded

GOLDEN = load_golden("arm-thinker")


def test_goldens_scored_exactly() -> None:
    assert check_goldens("arm-thinker") == len(GOLDEN["cases"]) >= 20


@pytest.mark.parametrize("profile", ["arm-thinker", "arm-thinker-qwen3vl"])
def test_both_profiles_score_alike(profile) -> None:
    reward = get_reward(profile)
    for case in GOLDEN["cases"]:
        episode = episode_of(profile, case["episode"])
        assert decoded(episode) == case["episode"]["decoded"], case["name"]
        assert abs(reward.rule(episode).total - case["expected"]["total"]) <= TOLERANCE, case["name"]


def test_unknown_source_and_missing_rm_tag_are_clear() -> None:
    reward = get_reward("arm-thinker")
    with pytest.raises(RewardInputError, match="NotImplementedError"):
        reward.check(episode_of("arm-thinker", {"response": "x", "extra": {"data_source": "gsm8k"}}))
    with pytest.raises(RewardInputError, match="rm_tag"):
        reward.check(episode_of("arm-thinker", {"response": "x", "extra": {"data_source": "mp_docvqa"}}))


def test_session_door_with_a_validator_call(client) -> None:
    """The instruction-following task: a validator called through /act, the judgment scored from the turns."""
    case = next(c for c in GOLDEN["cases"] if c["name"] == "mmif lower case, after a validator call")
    turns = case["episode"]["turns"]
    sid = client.post("/v1/sessions", json={"profile": "arm-thinker"}).json()["session_id"]
    acted = client.post(f"/v1/sessions/{sid}/act", json={"text": turns[0]}).json()
    assert acted["results"][0]["text"] == case["episode"]["calls"][0]["text"]
    r = client.post(f"/v1/sessions/{sid}/reward", json={"turns": turns, "ground_truth": "false",
                                                        "extra": {"data_source": "mmif_instruction_following"}})
    assert r.status_code == 200, r.text
    assert r.json()["total"] == case["expected"]["total"] == 1.0
    assert r.json()["details"] == {"judgment": "false", "variant": "mmif"}
