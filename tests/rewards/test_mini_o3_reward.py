"""Mini-o3's reward: goldens recorded by running general_qa_tool.py against a local judge, scored exactly with
the judge asked exactly as the reference asks; a filtered rollout; the session door over a grounding turn."""

from __future__ import annotations

import asyncio

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import b64, png_bytes
from tests.rewards.helpers import TOLERANCE, check_goldens, episode_of, judge_server, load_golden
from toolserver.api.app import create_app
from toolserver.config import Settings
from toolserver.rewards import get_reward
from toolserver.rewards.judge import OpenAIJudge

GOLDEN = load_golden("mini-o3")


@pytest.mark.slow  # every judged golden against a local judge: in .ci/run's slow leg
def test_goldens_scored_exactly() -> None:
    assert check_goldens("mini-o3") == len(GOLDEN["cases"]) >= 10


def test_five_unreadable_verdicts_filter_the_rollout() -> None:
    case = next(c for c in GOLDEN["cases"] if c["expected"].get("filtered"))

    async def score(url: str):
        judge = OpenAIJudge(url, "m", retries=0)
        try:
            return await get_reward("mini-o3").score(episode_of("mini-o3", case["episode"]), judge)
        finally:
            await judge.close()

    with judge_server([r["answer"] for r in case["judge"]]) as server:
        result = asyncio.run(score(server.url))
    assert result.violation == "filtered" and result.details["is_filter"] and result.total == 0.0
    assert [r["temperature"] for r in server.requests] == [0.0, 0.2, 0.4, 0.6000000000000001, 0.8]


def test_session_door_after_a_grounding_turn(tmp_path) -> None:
    case = next(c for c in GOLDEN["cases"] if c["name"] == "zoom then right")
    episode = case["episode"]
    settings = Settings(data_dir=tmp_path / "data", workers=2, sr_model_dir=tmp_path / "none", judge_url="",
                        judge_model="")
    with judge_server([r["answer"] for r in case["judge"]]) as server:
        settings = settings.model_copy(update={"judge_url": server.url, "judge_model": "judge"})
        with TestClient(create_app(settings)) as client:
            image = b64(png_bytes(Image.new("RGB", (400, 300), (9, 99, 199))))
            sid = client.post("/v1/sessions", json={"profile": "mini-o3", "images": [{"data": image}]}).json()
            sid = sid["session_id"]
            assert client.post(f"/v1/sessions/{sid}/act", json={"text": episode["turns"][0]}).status_code == 200
            r = client.post(f"/v1/sessions/{sid}/reward", json={k: episode[k] for k in ("turns", "ground_truth",
                                                                                         "extra")})
    assert r.status_code == 200, r.text
    assert abs(r.json()["total"] - case["expected"]["total"]) <= TOLERANCE
    assert r.json()["terms"] == {"accuracy": 1.0, "format": 1.0, "tool_used": 1.0}
    assert server.requests[0]["messages"] == case["judge"][0]["messages"]
