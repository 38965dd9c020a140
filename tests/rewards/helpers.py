"""Helpers of the reward tests: the golden files' format, an episode from its JSON, and a local judge server.

A golden file, `tests/data/rewards/<profile>.json` (written by `scripts/goldens/record_rewards_*.py` running the
reference's own reward code):

    {"profile": "deepeyes", "source": "owner/repo/path@commit", "recorded_with": "how it was recorded",
     "cases": [{"name": "...", "group": "optional: cases with the same group are one GRPO group",
                "episode": {"response": "...", "ground_truth": ..., "calls": [{"tool": "...", "ok": true,
                            "images": 1, "text": "...", "arguments": ..., "error_code": null, "meta": {}}],
                            "turns": ["..."], "question": "...", "extra": {...}, "truncated": false},
                "judge": [{"messages": [...], "params": {...}, "answer": "..."}],   # judged rewards: each request
                                                                                  # the reference sent, and the
                                                                                  # verdict text it was given
                "expected": {"total": 1.2, "terms": {"accuracy": 1.0, ...}}}]}

The fields the reference reads but the episode does not hold go in `extra`. `expected.terms` may name only the
terms the reference exposes; `total` is always the reference's return value.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from toolserver.rewards import Episode, Step, get_reward
from toolserver.rewards.judge import OpenAIJudge

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "data" / "rewards"
TOLERANCE = 1e-9


def load_golden(profile: str) -> dict[str, Any]:
    return json.loads((GOLDEN_DIR / f"{profile.replace('-', '_')}.json").read_text())


def episode_of(profile: str, data: dict[str, Any]) -> Episode:
    calls = tuple(Step(**call) for call in data.get("calls", ()))
    return Episode(profile=profile, response=data.get("response", ""), ground_truth=data.get("ground_truth"),
                   calls=calls, turns=tuple(data.get("turns", ())), question=data.get("question"),
                   extra=data.get("extra", {}), truncated=data.get("truncated", False))


def groups_of(golden: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The cases as GRPO groups, in order: cases sharing `group` together, each other case alone."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for i, case in enumerate(golden["cases"]):
        groups.setdefault(case.get("group") or f"#{i}", []).append(case)
    return list(groups.values())


def assert_scored(case: dict[str, Any], total: float, terms: dict[str, float]) -> None:
    expected = case["expected"]
    assert abs(total - expected["total"]) <= TOLERANCE, (case["name"], total, expected["total"])
    for name, value in expected.get("terms", {}).items():
        assert abs(terms[name] - value) <= TOLERANCE, (case["name"], name, terms[name], value)


class JudgeServer:
    """An OpenAI-compatible `/v1/chat/completions` on localhost: it records each request body and answers with
    the next of `answers` (a str: that content; an int: that HTTP status, for retries)."""

    def __init__(self, answers: list[str | int]):
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    answer = server.answers.pop(0) if server.answers else 500
                if isinstance(answer, int):
                    self.send_response(answer)
                    self.end_headers()
                    return
                payload = json.dumps({"id": "x", "object": "chat.completion", "model": body.get("model"),
                                      "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant", "content": answer}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> JudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def judge_server(answers: list[str | int]) -> Iterator[JudgeServer]:
    with JudgeServer(answers) as server:
        yield server


RANDOM_PARAMS = frozenset({"seed"})  # sampling parameters a reference draws at random: present, value not compared


def check_goldens(profile: str) -> int:
    """Score every golden case of `profile` with its registered reward and compare with the reference's scores.
    A judged reward asks a local judge server that answers each case's recorded verdicts, and each request it
    sends must be the reference's (messages exactly; parameters exactly but for RANDOM_PARAMS). Returns the cases
    checked."""
    golden = load_golden(profile)
    reward = get_reward(profile)
    assert golden["source"] == reward.source, (golden["source"], reward.source)
    checked = 0
    for group in groups_of(golden):
        if reward.judged:
            for case in group:
                _check_judged(profile, reward, case)
        else:
            results = asyncio.run(reward.score_group([episode_of(profile, c["episode"]) for c in group]))
            for case, result in zip(group, results, strict=True):
                assert_scored(case, result.total, result.terms)
        checked += len(group)
    return checked


def _check_judged(profile: str, reward: Any, case: dict[str, Any]) -> None:
    sent = case.get("judge", [])
    with judge_server([request["answer"] for request in sent]) as server:
        judge = OpenAIJudge(server.url, "judge-model", retries=0)

        async def score() -> Any:
            try:
                return await reward.score(episode_of(profile, case["episode"]), judge)
            finally:
                await judge.close()

        result = asyncio.run(score())
    assert len(server.requests) == len(sent), (case["name"], server.requests)
    for got, want in zip(server.requests, sent, strict=True):
        assert got["messages"] == want["messages"], case["name"]
        params = {k: v for k, v in got.items() if k not in ("model", "messages")}
        assert set(params) == set(want["params"]), (case["name"], params, want["params"])
        for key, value in want["params"].items():
            if key not in RANDOM_PARAMS:
                assert params[key] == value, (case["name"], key, params[key], value)
    assert_scored(case, result.total, result.terms)
