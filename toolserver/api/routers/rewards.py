"""Rewards: a session's episode scored by its profile's reward, and GRPO groups scored without sessions
(docs/rewards.md)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from toolserver.api.bodies import BoundedJSONRoute, core_of, json_response
from toolserver.reward_models import RewardsRequest, RewardsResponse, SessionReward, SessionRewardRequest

router = APIRouter(route_class=BoundedJSONRoute, tags=["rewards"])

_JUDGE_ERRORS: dict[int | str, dict[str, Any]] = {502: {"description": "The LLM judge failed (`judge_failed`)"},
                 503: {"description": "The reward asks an LLM judge and none is configured (`judge_not_configured`)"}}


@router.post("/v1/sessions/{session_id}/reward", response_model=SessionReward, responses=_JUDGE_ERRORS,
             summary="Score the session's episode with its profile's reward")
async def session_reward(session_id: str, body: SessionRewardRequest, request: Request) -> Response:
    """The calls come from the session's call log; the body gives the model's response, the ground truth and what
    else the profile's reward reads. The total and each term by name; kept in the session's trajectory export."""
    return json_response(await core_of(request).reward(session_id, body))


@router.post("/v1/rewards", response_model=RewardsResponse, responses=_JUDGE_ERRORS,
             summary="Score episodes without sessions (a GRPO group)")
async def rewards(body: RewardsRequest, request: Request) -> Response:
    """Each item is an episode (its calls, response, ground truth); results come back in the same order, with
    `{"ok": false, "error": {...}}` for an item the reward cannot read (the rest still score)."""
    return json_response(await core_of(request).rewards(body))


@router.get("/v1/rewards", summary="The rewards served, by profile, and the profiles whose references have none")
async def list_rewards(request: Request) -> dict[str, object]:
    return core_of(request).list_rewards()
