"""DeepEyes' reward: its goldens (recorded by running vl_agent.py) scored exactly, the judge asked with the
reference's prompt over HTTP, the episode's text rebuilt from the turns and the call log, and the doors."""

from __future__ import annotations

import asyncio

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import b64, png_bytes
from tests.rewards.helpers import TOLERANCE, check_goldens, episode_of, judge_server, load_golden
from toolserver.api.app import create_app
from toolserver.config import Settings
from toolserver.formats.deepeyes import DEEPEYES
from toolserver.rewards import JudgeNotConfigured, get_reward
from toolserver.rewards.judge import JudgeFailed, OpenAIJudge
from toolserver.rewards.text import rebuild

GOLDEN = load_golden("deepeyes")
MULTI = [case for case in GOLDEN["cases"] if "turns" in case["episode"]]


@pytest.mark.slow  # every judged golden against a local judge: in .ci/run's slow leg
def test_goldens_scored_exactly() -> None:
    assert check_goldens("deepeyes") == len(GOLDEN["cases"]) >= 20


@pytest.mark.parametrize("case", MULTI, ids=[c["name"] for c in MULTI])
def test_text_rebuilt_from_turns_and_call_log_is_the_rollouts(case) -> None:
    episode = episode_of("deepeyes", case["episode"])
    assert rebuild(episode, DEEPEYES) == case["episode"]["response"]


def test_judge_not_configured_is_a_clear_error() -> None:
    case = GOLDEN["cases"][0]
    with pytest.raises(JudgeNotConfigured, match="TOOLSERVER_JUDGE_URL"):
        asyncio.run(get_reward("deepeyes").score(episode_of("deepeyes", case["episode"])))


def test_judge_retries_then_fails_clearly() -> None:
    case = GOLDEN["cases"][0]

    async def score(url: str):
        judge = OpenAIJudge(url, "m", api_key="secret", retries=2, backoff_s=0.0)
        try:
            return await get_reward("deepeyes").score(episode_of("deepeyes", case["episode"]), judge)
        finally:
            await judge.close()

    with judge_server([503, 429, "1"]) as server:
        assert asyncio.run(score(server.url)).total == case["expected"]["total"]
    assert len(server.requests) == 3 and server.headers[0]["Authorization"] == "Bearer secret"
    with judge_server([500, 500, 500]) as server, pytest.raises(JudgeFailed, match="3 tries"):
        asyncio.run(score(server.url))


def _settings(tmp_path, url: str | None) -> Settings:
    judge = {"judge_url": url, "judge_model": "judge-model"} if url else {}
    return Settings(data_dir=tmp_path / "data", workers=2, sr_model_dir=tmp_path / "none", **judge)


def test_session_door_scores_the_call_log(tmp_path) -> None:
    """A DeepEyes session driven turn by turn through /act, then scored from its call log and the turns."""
    case = next(c for c in MULTI if c["name"] == "zoom, then right")
    episode = case["episode"]
    image = Image.new("RGB", tuple(GOLDEN["image_size"]), (120, 100, 80))
    with judge_server([r["answer"] for r in case["judge"]]) as server, \
            TestClient(create_app(_settings(tmp_path, server.url))) as client:
        sid = client.post("/v1/sessions", json={"profile": "deepeyes",
                                                "images": [{"data": b64(png_bytes(image))}]}).json()["session_id"]
        for turn in episode["turns"][:-1]:
            assert client.post(f"/v1/sessions/{sid}/act", json={"text": turn}).status_code == 200
        r = client.post(f"/v1/sessions/{sid}/reward", json={
            "turns": episode["turns"], "ground_truth": episode["ground_truth"], "question": episode["question"]})
        assert r.status_code == 200, r.text
        scored = r.json()
        exported = client.get(f"/v1/sessions/{sid}/trajectory").json()
    assert abs(scored["total"] - case["expected"]["total"]) <= TOLERANCE
    assert scored["terms"] == {"accuracy": 1.0, "format": 0.0, "tool": 1.0}
    assert scored["weights"] == {"accuracy": 0.8, "format": 0.2, "tool": 1.2}
    assert scored["source"] == GOLDEN["source"] and scored["details"]["answer"] == "tan"
    assert server.requests[0]["messages"] == case["judge"][0]["messages"]
    assert server.requests[0]["model"] == "judge-model" and server.requests[0]["temperature"] == 0.3
    assert exported["rewards"][0]["total"] == scored["total"]


def test_batch_door_and_its_errors(tmp_path) -> None:
    """A group scored at once (its judge requests in flight together, so each case here gets the same verdict),
    results in order, an unreadable item answered alone."""
    cases = [c for c in GOLDEN["cases"] if [r["answer"] for r in c["judge"]] == ["1"]]
    assert len({c["expected"]["total"] for c in cases}) >= 3
    with judge_server(["1"] * len(cases)) as server, \
            TestClient(create_app(_settings(tmp_path, server.url))) as client:
        r = client.post("/v1/rewards", json={"profile": "deepeyes", "items": [c["episode"] for c in cases] +
                                             [{"response": "<answer>x</answer>", "question": "q"}]})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        unknown = client.post("/v1/rewards", json={"profile": "no-such", "items": []})
    assert len(server.requests) == len(cases)
    for got, case in zip(results, cases, strict=False):
        assert got["ok"] and abs(got["total"] - case["expected"]["total"]) <= TOLERANCE, case["name"]
    assert results[-1]["ok"] is False and results[-1]["total"] is None
    assert results[-1]["error"]["code"] == "invalid_reward_input"
    assert unknown.status_code == 422 and unknown.json()["code"] == "no_reward"


def test_judged_reward_without_judge_answers_503(tmp_path) -> None:
    with TestClient(create_app(_settings(tmp_path, None))) as client:
        r = client.post("/v1/rewards", json={"profile": "deepeyes", "items": [GOLDEN["cases"][0]["episode"]]})
        listed = client.get("/v1/rewards").json()
    assert r.status_code == 503 and r.json()["code"] == "judge_not_configured"
    assert listed["judge"] is False and any(x["profile"] == "deepeyes" for x in listed["rewards"])


@pytest.mark.parametrize("case", MULTI, ids=[c["name"] for c in MULTI])
def test_call_log_of_act_rebuilds_the_rollouts_text(client, case) -> None:
    """The turns run through /act: the call log they leave rebuilds the text DeepEyes' own toolbox produced."""
    image = Image.new("RGB", tuple(GOLDEN["image_size"]), (120, 100, 80))
    sid = client.post("/v1/sessions", json={"profile": "deepeyes",
                                            "images": [{"data": b64(png_bytes(image))}]}).json()["session_id"]
    for turn in case["episode"]["turns"][:-1]:
        assert client.post(f"/v1/sessions/{sid}/act", json={"text": turn}).status_code == 200
    calls = client.get(f"/v1/sessions/{sid}/trajectory").json()["calls"]
    steps = [{"tool": c["tool"], "ok": c["ok"], "text": c["text"], "images": len(c["keys"])} for c in calls]
    episode = episode_of("deepeyes", {**case["episode"], "calls": steps})
    assert rebuild(episode, DEEPEYES) == case["episode"]["response"]


def test_math_source_off_the_main_thread(client) -> None:
    """The app under test runs off the main thread, where math-verify's signal-based limits cannot be set."""
    case = next(c for c in GOLDEN["cases"] if c["name"] == "math verified by math-verify")
    r = client.post("/v1/rewards", json={"profile": "deepeyes", "items": [case["episode"]]})
    assert r.status_code == 200, r.text
    assert abs(r.json()["results"][0]["total"] - case["expected"]["total"]) <= TOLERANCE
