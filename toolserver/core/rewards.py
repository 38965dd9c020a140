"""Rewards next to the tools: a session's episode scored by its profile's reward, and GRPO groups scored without
sessions. The episode is read from the call log (a session) or from the request (a batch); the reward itself is
the profile's (`toolserver.rewards`)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, defaultdict
from collections.abc import Sequence

from toolserver.config import Settings
from toolserver.core.inspection import Inspection
from toolserver.errors import BadRequest, TooLarge
from toolserver.models import CallRecord
from toolserver.pool import WorkPool
from toolserver.reward_models import (
    RewardCall,
    RewardEpisodeFields,
    RewardError,
    RewardScore,
    RewardsRequest,
    RewardsResponse,
    SessionReward,
    SessionRewardRequest,
)
from toolserver.rewards import Episode, Reward, RewardResult, RuleReward, Step, get_reward
from toolserver.rewards.judge import OpenAIJudge, judge_from_settings

KEPT_SESSIONS = 10_000  # sessions whose rewards this replica remembers for the trajectory export


class Rewards:
    def __init__(self, inspection: Inspection, settings: Settings, pool: WorkPool):
        self._inspection = inspection
        self.settings = settings
        self._pool = pool
        self.judge: OpenAIJudge | None = judge_from_settings(settings)
        self._kept: OrderedDict[str, list[SessionReward]] = OrderedDict()

    async def session_reward(self, session_id: str, body: SessionRewardRequest) -> SessionReward:
        trajectory = await self._inspection.trajectory(session_id)
        reward = get_reward(trajectory.profile)
        episode = _episode(trajectory.profile, body, tuple(_step_of_record(c) for c in trajectory.calls))
        reward.check(episode)
        result = (await self._group(reward, [episode]))[0]
        scored = SessionReward(session_id=session_id, profile=trajectory.profile, source=reward.source,
                               scored_at=time.time(), **_score(result).model_dump())
        self._keep(session_id, scored)
        return scored

    def of_session(self, session_id: str) -> list[SessionReward]:
        return list(self._kept.get(session_id, ()))

    def forget(self, session_id: str) -> None:
        self._kept.pop(session_id, None)

    async def batch(self, request: RewardsRequest) -> RewardsResponse:
        if len(request.items) > self.settings.max_reward_items:
            raise TooLarge(f"at most {self.settings.max_reward_items} items per rewards request")
        reward = get_reward(request.profile)
        results: list[RewardScore | None] = [None] * len(request.items)
        groups: dict[str | None, list[tuple[int, Episode]]] = defaultdict(list)
        for i, item in enumerate(request.items):
            episode = _episode(request.profile, item, tuple(_step_of_call(c) for c in item.calls))
            try:
                reward.check(episode)
            except BadRequest as exc:
                results[i] = RewardScore(ok=False, error=RewardError(code=exc.code, message=str(exc)))
                continue
            groups[item.group].append((i, episode))
        members = list(groups.values())
        scored = await asyncio.gather(*(self._group(reward, [episode for _, episode in group]) for group in members))
        for group, group_scores in zip(members, scored, strict=True):
            for (i, _), result in zip(group, group_scores, strict=True):
                results[i] = _score(result)
        return RewardsResponse(profile=request.profile, source=reward.source,
                               results=[r for r in results if r is not None])

    async def _group(self, reward: Reward, episodes: list[Episode]) -> list[RewardResult]:
        """A rule-based reward in the worker pool (off the event loop); a judged one awaits its judge here."""
        if isinstance(reward, RuleReward):
            return await self._pool.run(reward.rule_group, episodes, timeout=self.settings.tool_timeout_s)
        return await reward.score_group(episodes, self.judge)

    def _keep(self, session_id: str, scored: SessionReward) -> None:
        self._kept.setdefault(session_id, []).append(scored)
        self._kept.move_to_end(session_id)
        while len(self._kept) > KEPT_SESSIONS:
            self._kept.popitem(last=False)

    async def close(self) -> None:
        if self.judge is not None:
            await self.judge.close()


def _episode(profile: str, fields: RewardEpisodeFields, steps: Sequence[Step]) -> Episode:
    return Episode(profile=profile, response=fields.response, ground_truth=fields.ground_truth, calls=tuple(steps),
                   turns=tuple(fields.turns), question=fields.question, extra=fields.extra,
                   truncated=fields.truncated)


def _step_of_record(record: CallRecord) -> Step:
    return Step(tool=record.tool, arguments=record.arguments, ok=record.ok, error_code=record.error_code,
                text=record.text, images=len(record.keys), meta=record.meta)


def _step_of_call(call: RewardCall) -> Step:
    return Step(tool=call.tool, arguments=call.arguments, ok=call.ok, error_code=call.error_code, text=call.text,
                images=call.images, meta=call.meta)


def _score(result: RewardResult) -> RewardScore:
    return RewardScore(total=result.total, terms=result.terms, weights=result.weights, finished=result.finished,
                       violation=result.violation, details=result.details)
