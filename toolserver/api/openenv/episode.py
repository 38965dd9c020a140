"""One OpenEnv episode over the core: a session of the URL's profile, opened by `reset`, stepped with raw turns or
structured calls, and released by `close`, by the next reset, or when its connection ends. Errors are the core's
(`ServiceError`) and pydantic's; `reply_for` turns them into OpenEnv's error messages."""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Any

from pydantic import ValidationError

from toolserver.api.openenv.wire import (
    EpisodeAction,
    EpisodeObservation,
    EpisodeState,
    ErrorCode,
    ResetInputs,
    RewardSpec,
    action_model,
    error,
    validation_error,
)
from toolserver.core import Core
from toolserver.core.episodes import CapacityReached
from toolserver.errors import NotFound, ServiceError, SessionGone
from toolserver.models import ActResponse
from toolserver.reward_models import SessionRewardRequest

log = logging.getLogger("toolserver")


class NoEpisode(ServiceError):
    status = 409
    code = "no_episode"


class Episode:
    def __init__(self, core: Core, profile: str, *, base_url: str = ""):
        self.core = core
        self.profile = profile
        self.base_url = base_url
        self.action_model = action_model(profile)
        self.session_id: str | None = None
        self.episode_id: str | None = None
        self.seed: int | None = None
        self.step_count = 0
        self.columns: dict[str, Any] = {}
        self.reward: RewardSpec | None = None
        self.turns: list[str] = []  # the model's raw turns, for the episode's reward

    async def reset(self, data: ResetInputs | dict[str, Any]) -> EpisodeObservation:
        """A new episode from the reset's inputs (validated here unless they are already). The previous episode's
        session is released once the new one exists, so a reset that fails (an image that does not decode) leaves
        the episode as it was."""
        inputs = data if isinstance(data, ResetInputs) else ResetInputs.model_validate(data)
        if inputs.reward is not None:
            self.core.reward_of(self.profile)  # a profile without a reward: said at the reset
        created = await self.core.create_session(inputs.session_request(self.profile))
        await self.close()
        self.session_id, self.episode_id = created.session_id, inputs.episode_id or str(uuid.uuid4())
        self.seed, self.step_count, self.columns = inputs.seed, 0, inputs.columns
        self.reward, self.turns = inputs.reward, []
        metadata = {"session_id": created.session_id, "profile": created.profile, "episode_id": self.episode_id,
                    "images": [info.model_dump() for info in created.images],
                    "videos": [video.model_dump() for video in created.videos],
                    "texts": created.texts, "columns": list(self.columns)}
        return EpisodeObservation(metadata=metadata)

    async def step(self, data: EpisodeAction | dict[str, Any]) -> EpisodeObservation:
        """One step: the action, validated here against the profile's action model unless the caller did."""
        action = data if isinstance(data, EpisodeAction) else self.action_model.model_validate(data)
        if self.session_id is None:
            raise NoEpisode("no episode is running: send a reset first")
        if action.text is not None:
            self.turns.append(action.text)
            response = await self.core.act(self.session_id, action.text, action.format, base_url=self.base_url)
        else:
            assert action.tool_name is not None
            response = await self.core.call_as_turn(self.session_id, action.tool_name, action.arguments,
                                                    base_url=self.base_url)
        self.step_count += 1
        observation = self.observation(response)
        if self.reward is not None:
            await self._score(observation)
        return observation

    async def _score(self, observation: EpisodeObservation) -> None:
        """0.0 for a step that does not end the episode (the references' environments give none before the end);
        the episode's reward, from its turns and its session's call log, for the one that does."""
        if not observation.done or self.reward is None or self.session_id is None:
            observation.reward = 0.0
            return
        spec = self.reward
        scored = await self.core.reward(self.session_id, SessionRewardRequest(
            turns=self.turns, ground_truth=spec.ground_truth, question=spec.question, extra=spec.extra))
        observation.reward = scored.total
        observation.metadata["reward"] = scored.model_dump(mode="json")

    def observation(self, response: ActResponse) -> EpisodeObservation:
        results = [r.model_dump(mode="json") for r in response.results]
        metadata = {"session_id": self.session_id, "profile": self.profile, "episode_id": self.episode_id,
                    "step": self.step_count, "format": response.format, "calls": response.calls, "results": results}
        return EpisodeObservation(messages=response.observation, prompt=response.prompt, done=response.done,
                           metadata=metadata)

    async def state(self) -> EpisodeState:
        state = EpisodeState(episode_id=self.episode_id, step_count=self.step_count, session_id=self.session_id,
                      profile=self.profile, seed=self.seed, columns=self.columns)
        if self.session_id is not None:
            info = await self.core.session_info(self.session_id)
            state.images = [image.model_dump() for image in info.images]
            state.tool_calls = info.tool_calls
        return state

    async def close(self) -> None:
        """Release the episode's session (one already gone is not an error)."""
        session_id, self.session_id = self.session_id, None
        if session_id is not None:
            with contextlib.suppress(NotFound, SessionGone):
                await self.core.release(session_id)


def reply_for(exc: Exception) -> dict[str, Any]:
    """OpenEnv's error message for what went wrong in a message's handling."""
    if isinstance(exc, ValidationError):
        return validation_error(exc)
    if isinstance(exc, CapacityReached):
        return error(exc.message, ErrorCode.CAPACITY_REACHED, active_sessions=exc.active, max_sessions=exc.limit)
    if isinstance(exc, ServiceError):
        code = (ErrorCode.VALIDATION_ERROR if exc.status in (413, 422) else
                ErrorCode.SESSION_ERROR if exc.status in (404, 410) else ErrorCode.EXECUTION_ERROR)
        extra = {"retry_after_s": exc.retry_after_s} if hasattr(exc, "retry_after_s") else {}
        return error(exc.message, code, toolserver_code=exc.code, **extra)
    log.exception("OpenEnv message failed")  # a bug: logged with its traceback, answered without details
    return error("Internal error while handling the message", ErrorCode.EXECUTION_ERROR)
