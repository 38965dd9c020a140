"""Thyme's reward scores the goldens recorded from its own code (scripts/goldens/record_rewards_thyme.py): the strict
math check and math-verify answer for each recorded answer as the reference's did, each episode asks the judge
exactly what the reference asked (messages and parameters) and gets its total and terms after the trainer's mask and
float32 sum."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.rewards.helpers import assert_scored, check_goldens, episode_of, load_golden
from toolserver.rewards import JudgeNotConfigured, RewardInputError, Step, get_reward
from toolserver.rewards import thyme as thyme_reward
from toolserver.rewards.base import Episode
from toolserver.rewards.judge import JudgeFailed
from toolserver.rewards.thyme_math import evaluate_math, extract, grade

GOLDEN = load_golden("thyme")
CASES = GOLDEN["cases"]


@pytest.mark.slow  # every judged golden against a local judge over HTTP: in .ci/run's slow leg
def test_thyme_scores_its_goldens() -> None:
    assert check_goldens("thyme") == len(CASES) == 83


class ScriptedJudge:
    """Answers the recorded verdicts in order and keeps each request, in process (the fast twin of the HTTP test)."""

    model = "judge-model"

    def __init__(self, answers: list[str | Exception]):
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []

    async def chat(self, messages: list[Any], **params: Any) -> str:
        self.requests.append({"messages": json.loads(json.dumps(messages)), "params": params})
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_thyme_golden_case_in_process(case: dict[str, Any]) -> None:
    judge = ScriptedJudge([x["answer"] for x in case["judge"]])
    result = asyncio.run(get_reward("thyme").score(episode_of("thyme", case["episode"]), judge))
    assert [r["messages"] for r in judge.requests] == [x["messages"] for x in case["judge"]]
    assert [r["params"] for r in judge.requests] == [x["params"] for x in case["judge"]]
    assert_scored(case, result.total, result.terms)
    assert result.details["before_mask"] == pytest.approx(case["expected"]["before_mask"], abs=1e-9)


@pytest.mark.parametrize("case", [c for c in CASES if "checks" in c], ids=[c["name"] for c in CASES if "checks" in c])
def test_thyme_strict_check_and_math_verify_agree_with_the_reference(case: dict[str, Any]) -> None:
    checks, truth = case["checks"], case["episode"]["ground_truth"]
    assert evaluate_math(checks["answer"], truth) is checks["evaluate_math"]
    assert thyme_reward.math_verified(checks["answer"], truth) is checks["math_verify"]


def test_the_strict_check_covers_its_branches_in_the_goldens() -> None:
    names = {c["name"] for c in CASES}
    for branch in ("pi", "interval", "pmatrix", "set", "text", "percent", "mixed", "guard", "boxed", "units"):
        assert any(branch in name for name in names), branch
    strict = [c["checks"] for c in CASES if "checks" in c]
    assert any(c["evaluate_math"] for c in strict) and any(not c["evaluate_math"] for c in strict)
    assert any(c["math_verify"] and not c["evaluate_math"] for c in strict)  # the fallback decides some


@pytest.mark.parametrize(("answer", "truth"), [("3.14", "\\pi"), ("2\\pi", "6.283"), ("4\\pi", "12.566"),
                                               ("[[1],[2]]", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}")])
def test_math_equal_is_never_reached(answer: str, truth: str) -> None:
    """Qwen-Math's `math_equal` (whose `handle_pi` and matrix branch `eval` the answer) would accept these (π as 3.14,
    a list as the matrix), but at b9285b7a its name is bound to a module and the call always fails: the reference
    rejected each (recorded), and so does toolserver, without evaluating anything."""
    assert not evaluate_math(answer, truth)
    recorded = {(c["checks"]["answer"], c["episode"]["ground_truth"]): c["checks"]["evaluate_math"]
                for c in CASES if "checks" in c}
    assert recorded[(answer, truth)] is False


def test_strict_check_reads_answers_as_the_reference_does() -> None:
    assert extract("so the answer is \\boxed{\\frac{1}{2}}. Done") == "\\frac{1}{2}"
    assert extract("We get x = 4") == "4"
    assert grade("1,234", "1234") and not grade("2/4", "1/2") and not grade("3.5", "3")
    assert grade("(1, 2)", "(1,2)") and not grade("[1, 2]", "(1, 2)")


def test_a_judge_that_never_answers_is_three_failed_tries() -> None:
    failures: list[str | Exception] = [JudgeFailed("down")] * 6
    judge = ScriptedJudge(failures)
    episode = Episode(profile="thyme", response="<think>x</think> <answer>blue</answer>", ground_truth="red",
                      question="What colour?")
    result = asyncio.run(get_reward("thyme").score(episode, judge))
    assert len(judge.requests) == 6 and (result.total, result.terms["accuracy"]) == (0.5, 0.0)
    assert result.terms["consistency"] == 0.0


def test_thyme_needs_a_judge_a_ground_truth_and_a_question() -> None:
    reward = get_reward("thyme")
    episode = Episode(profile="thyme", response="<think>x</think> <answer>12.5</answer>", ground_truth="12.5",
                      question="q")
    with pytest.raises(JudgeNotConfigured):
        asyncio.run(reward.score(episode))
    for missing in ({"ground_truth": None}, {"question": None}):
        with pytest.raises(RewardInputError, match="question"):
            asyncio.run(reward.score(Episode(**{**episode.__dict__, **missing}), ScriptedJudge([])))
    no_answer = Episode(profile="thyme", response="<think>x</think> 12.5", ground_truth="12.5", question="q")
    assert asyncio.run(reward.score(no_answer)).total == 0.0  # no answer: no judge asked


def test_thyme_rebuilds_the_completion_from_the_turns_and_the_call_log() -> None:
    code = "<think>\nLet me compute.\n<code>\n```python\nprint(1)\n```\n</code>"
    output = "<sandbox_output>12.50</sandbox_output>"
    episode = Episode(profile="thyme", turns=(code, "\nSo 12.50.\n</think> <answer>12.50</answer>"),
                      calls=(Step(tool="python", text=output),), ground_truth="12.5", question="q")
    judge = ScriptedJudge(['{"Consistency": 1}'])
    result = asyncio.run(get_reward("thyme").score(episode, judge))
    prompt = judge.requests[0]["messages"][0]["content"][0]["text"]
    assert "print(1)\n```\n</code>12.50\nSo 12.50.\n" in prompt  # the sandbox tags removed from the thinking
    assert (result.total, result.terms["format"]) == (2.0, 0.5)


@pytest.mark.slow  # 1,440 gradings through sympy (about 5 s here): in .ci/run's slow leg
def test_thyme_strict_check_matches_the_reference_table() -> None:
    table = GOLDEN["strict_table"]
    got = [[evaluate_math(a, t) for t in table["truths"]] for a in table["answers"]]
    assert got == table["evaluate_math"]
    assert [evaluate_math(a, a) for a in table["answers"]] == table["itself"]


def test_thyme_over_http_with_the_configured_judge(tmp_path) -> None:
    from fastapi.testclient import TestClient

    from tests.rewards.helpers import judge_server
    from toolserver.api.app import create_app
    from toolserver.config import Settings

    chosen = [c for c in CASES if c["name"] in ("math_verified", "judge_wrong", "strict_pi_truth_3_14", "no_answer")]
    answers: list[str | int] = [x["answer"] for case in chosen for x in case["judge"]]
    with judge_server(answers) as server:
        settings = Settings(data_dir=tmp_path / "data", workers=2, sr_model_dir=tmp_path / "none",
                            judge_url=server.url, judge_model="judge")
        with TestClient(create_app(settings)) as client:
            listed = {r["profile"]: r for r in client.get("/v1/rewards").json()["rewards"]}
            scores = [client.post("/v1/rewards", json={"profile": "thyme", "items": [case["episode"]]}).json()
                      for case in chosen]  # one at a time: the judge answers in order
    assert listed["thyme"]["judged"] and listed["thyme"]["source"] == GOLDEN["source"]
    assert [r["messages"] for r in server.requests] == [x["messages"] for c in chosen for x in c["judge"]]
    for case, score in zip(chosen, scores, strict=True):
        result = score["results"][0]
        assert result["ok"], result
        assert_scored(case, result["total"], result["terms"])


def test_a_verdict_past_a_floats_range_is_a_judge_failure() -> None:
    episode = Episode(profile="thyme", response="<think>x</think> <answer>blue</answer>", ground_truth="red",
                      question="What colour?")
    judge = ScriptedJudge(['{"Correctness": 1' + "0" * 400 + "}"])
    with pytest.raises(JudgeFailed, match="Correctness"):
        asyncio.run(get_reward("thyme").score(episode, judge))
