"""Pixel-Reasoner's reward: GRPO groups recorded by running verl-tool's reward manager, scored exactly (the
curiosity bonus depends on the group); the decoded text rebuilt from the turns; a group through /v1/rewards."""

from __future__ import annotations

from tests.rewards.helpers import TOLERANCE, check_goldens, episode_of, load_golden
from toolserver.rewards.pixel_reasoner import decoded

GOLDEN = load_golden("pixel-reasoner")


def test_goldens_scored_exactly_as_groups() -> None:
    assert check_goldens("pixel-reasoner") == len(GOLDEN["cases"]) >= 9
    assert any(c["expected"]["terms"]["curiosity"] > 0 for c in GOLDEN["cases"])


def test_decoded_text_rebuilt_from_turns() -> None:
    for case in GOLDEN["cases"]:
        assert decoded(episode_of("pixel-reasoner", case["episode"])) == case["episode"]["decoded"], case["name"]


def test_group_through_the_batch_door(client) -> None:
    cases = [c for c in GOLDEN["cases"] if c["group"] in ("g1", "g2")]
    items = [{**c["episode"], "group": c["group"]} for c in cases]
    r = client.post("/v1/rewards", json={"profile": "pixel-reasoner", "items": items})
    assert r.status_code == 200, r.text
    for got, case in zip(r.json()["results"], cases, strict=True):
        assert abs(got["total"] - case["expected"]["total"]) <= TOLERANCE, case["name"]
    alone = client.post("/v1/rewards", json={"profile": "pixel-reasoner", "items": [items[0]]}).json()["results"][0]
    assert alone["terms"]["curiosity"] == 0.0 and alone["details"]["group_tool_call_rate"] == 1.0
