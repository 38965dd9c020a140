"""The reward contract: one `Reward` per profile, scoring an `Episode` into a `RewardResult`.

Design (issue #42):
- An `Episode` is what a reference's reward function reads, gathered in one place: the tool calls the session
  made (`Step`s, from toolserver's call log, or sent by a trainer that scores without sessions), the assistant
  turns' raw texts where the caller keeps them (toolserver does not see the model's turns that hold no call), the
  model's response text, the ground truth, and the optional fields a reference needs (`question`, `extra`, e.g.
  DeepEyes' `data_source`). `response` is the text the reference's reward function is given: each profile's
  module says which one (the final answer turn, or the decoded response of the whole episode) and, where the
  reference scores text that toolserver can rebuild (the observations it rendered), how it is rebuilt from
  `turns` and `calls` when `response` is left empty.
- A `RewardResult` holds the total as the reference computes it (not always a weighted sum), each term by name
  with its raw value, the recipe's weights, `finished` (whether the episode ended as the reference ends it),
  `violation` (the rule a rule-breaking trajectory broke; its total is what the reference gives it) and
  `details` (the extracted answer, the judge's verdict text: what a person checks first).
- A `Reward` is registered under its profile's name (`toolserver.rewards.REWARDS`), one module per profile
  under `toolserver/rewards/`, like `toolserver/profiles/`. It names its source (`repo/path@commit`), its terms
  and weights, and whether it calls a judge. `score` scores one episode; `score_group` scores a GRPO group
  (the episodes of one prompt), independently by default: a reward whose terms depend on the group (a bonus
  shared by the group's rollouts) overrides it.
- Rule-based rewards subclass `RuleReward` and implement `rule(episode)` (and `rule_group` where the group
  matters): synchronous and pure; the server runs them in its worker pool, off the event loop. Judged rewards
  subclass `Reward` and await `Judge.chat` with the reference's own messages and sampling parameters; the verdict
  is parsed as the reference parses it.
- A `Judge` is an OpenAI-compatible chat endpoint the operator configures (`toolserver.rewards.judge`); there is
  no default one. A judged reward given none raises `JudgeNotConfigured` (503 `judge_not_configured`).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolserver.errors import BadRequest, Unavailable


@dataclass(frozen=True)
class Step:
    """One tool call as the call log records it (`toolserver.models.CallRecord`)."""

    tool: str
    arguments: Any = None
    ok: bool = True
    error_code: str | None = None
    text: str = ""  # what the model was shown
    images: int = 0  # images the call returned to the model
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Episode:
    """What a reward reads about one rollout."""

    profile: str
    response: str = ""  # the text the reference's reward function is given (see the profile's reward module)
    ground_truth: Any = None
    calls: tuple[Step, ...] = ()  # oldest first
    turns: tuple[str, ...] = ()  # the assistant turns' raw texts, oldest first, the last (answer) turn included
    question: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # reference-specific fields (data_source, ...)
    truncated: bool = False  # the trainer cut the episode (turn or length limit) before it ended itself

    @property
    def final_turn(self) -> str:
        """The last assistant turn, or `response` when no turns were given."""
        return self.turns[-1] if self.turns else self.response


@dataclass
class RewardResult:
    total: float
    terms: dict[str, float]  # each term's raw value, by name, in the reference's order
    weights: dict[str, float] = field(default_factory=dict)  # the recipe's weight of each term it weighs
    finished: bool = True  # the episode ended as the reference ends it (an answer, not a cut)
    violation: str | None = None  # the rule a rule-breaking trajectory broke; `total` is what it got for it
    details: dict[str, Any] = field(default_factory=dict)  # extracted answer, judge verdict, ...


class JudgeNotConfigured(Unavailable):
    code = "judge_not_configured"


class RewardInputError(BadRequest):
    """An episode a reward cannot read (a missing ground truth, a field the reference requires)."""

    code = "invalid_reward_input"


class Judge(Protocol):
    """An LLM judge: an OpenAI-compatible chat completion, its first choice's message text returned as is."""

    @property
    def model(self) -> str: ...

    async def chat(self, messages: list[dict[str, Any]], **params: Any) -> str:
        """`params` are the reference's sampling parameters (temperature, seed, max_tokens...), sent as given."""
        ...


class Reward(ABC):
    """A profile's reward, as its reference computes it."""

    profile: str = ""  # the profile it is registered under
    source: str = ""  # where the reference computes it: `owner/repo/path@commit` (function names after a colon)
    terms: tuple[str, ...] = ()
    weights: Mapping[str, float] = {}
    judged: bool = False  # whether it calls an LLM judge
    description: str = ""

    def check(self, episode: Episode) -> None:
        """Raise `RewardInputError` for an episode this reward cannot read (scored apart from its group's others,
        which are still scored). Nothing by default."""
        return None

    @abstractmethod
    async def score(self, episode: Episode, judge: Judge | None = None) -> RewardResult:
        """Score one episode."""

    async def score_group(self, episodes: Sequence[Episode], judge: Judge | None = None) -> list[RewardResult]:
        """Score the rollouts of one prompt: independently unless the reference's terms depend on the group."""
        if not self.judged:
            return [await self.score(episode, judge) for episode in episodes]
        return list(await asyncio.gather(*(self.score(episode, judge) for episode in episodes)))

    def need_judge(self, judge: Judge | None) -> Judge:
        if judge is None:
            raise JudgeNotConfigured(
                f"the {self.profile!r} reward asks an LLM judge ({self.source}) and none is configured: set "
                "TOOLSERVER_JUDGE_URL and TOOLSERVER_JUDGE_MODEL (and the key in TOOLSERVER_JUDGE_API_KEY)")
        return judge

    def info(self) -> dict[str, Any]:
        return {"profile": self.profile, "source": self.source, "terms": list(self.terms),
                "weights": dict(self.weights), "judged": self.judged, "description": self.description}


class RuleReward(Reward):
    """A reward without a judge: `rule` is synchronous and pure."""

    @abstractmethod
    def rule(self, episode: Episode) -> RewardResult:
        """Score one episode."""

    def rule_group(self, episodes: Sequence[Episode]) -> list[RewardResult]:
        """Score the rollouts of one prompt (override where the terms depend on the group). Synchronous: the server
        runs it in a worker thread."""
        return [self.rule(episode) for episode in episodes]

    async def score(self, episode: Episode, judge: Judge | None = None) -> RewardResult:
        return self.rule_group([episode])[0]

    async def score_group(self, episodes: Sequence[Episode], judge: Judge | None = None) -> list[RewardResult]:
        return self.rule_group(episodes)


def weighted(terms: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Σ weight·term over the weighted terms, summed in the weights' order (the reference's expression order,
    so the float sum is the reference's)."""
    total = 0.0
    for name, weight in weights.items():
        total += weight * terms[name]
    return total
