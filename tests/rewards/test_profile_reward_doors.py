"""The rule-based rewards of this set (MGPO, NeMo Gym, Groundlight) through `/v1/rewards`, scoring their goldens as
a batch, and the profiles whose papers released no code in the listing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rewards.helpers import TOLERANCE, load_golden


@pytest.mark.parametrize("profile", ["mgpo", "nemo-gym", "groundlight"])
def test_rule_rewards_score_their_goldens_over_http(client: Any, profile: str) -> None:
    cases = load_golden(profile)["cases"]
    items = [{**case["episode"], "group": case["name"]} for case in cases]
    scores = []
    for start in range(0, len(items), 64):  # a GRPO batch at a time: the server admits 64 episodes at once
        r = client.post("/v1/rewards", json={"profile": profile, "items": items[start:start + 64]})
        assert r.status_code == 200, r.text
        scores += r.json()["results"]
    assert len(scores) == len(cases)
    for case, score in zip(cases, scores, strict=True):
        assert score["ok"], (case["name"], score)
        assert abs(score["total"] - case["expected"]["total"]) <= TOLERANCE, case["name"]
        for name, value in case["expected"].get("terms", {}).items():
            assert abs(score["terms"][name] - value) <= TOLERANCE, (case["name"], name)


def test_listing_names_every_profile_of_this_set(client: Any) -> None:
    listed = client.get("/v1/rewards").json()
    served = {r["profile"]: r for r in listed["rewards"]}
    mine = {"visionthink", "deepeyes-v2", "pyvision-rl", "codedance", "nemo-gym", "groundlight", "mgpo"}
    assert mine <= set(served)
    assert served["visionthink"]["judged"] and not served["groundlight"]["judged"]
    assert served["mgpo"]["source"].startswith("xinyu1205/verl/")
    r = client.post("/v1/rewards", json={"profile": "imagent", "items": [{"response": "x"}]})
    assert r.status_code == 422 and r.json()["code"] == "no_reward" and "released no code" in r.json()["detail"]
    assert set(listed["without_reward"]) >= {"mags-rl", "imagent"}
