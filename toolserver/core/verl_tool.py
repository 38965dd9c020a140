"""verl-tool's tool-server protocol over the core, so that a verl-tool trainer changes only its server URL.

verl-tool's agent loop (TIGER-AI-Lab/verl-tool @ 980962b, `verl_tool/agent_loop/verltool_agent_loop.py`) posts
`{trajectory_ids, actions, finish, is_last_step, extra_fields}` to its tool server (`verl_tool/servers/
tool_server.py`) and reads back `{observations, dones, valids}`, one of each per trajectory. Here a trajectory
is a session of one profile, created the first time its id is seen from the images in its `extra_fields`
(sent with every call; read once) and released by a `finish`. The trajectory's id names its session in the
session store (`stores.aliases`), so with several replicas any of them serves any step. Each action is the
model's raw turn, run as `/act` runs it. What the reference server answers, we answer:
- `finish` (a top-level list, or the key in a trajectory's `extra_fields`): `""`, done, valid; the
  trajectory's session is released. `is_last_step` alone releases nothing (the Pixel-Reasoner tool keeps its
  environment until the finish that the agent loop always sends last).
- A text in which the profile's call format finds no action: the tool server's own `{"obs": "",
  "invalid_reason": "No valid tool found for action", "available_tools": ...}`, not valid, not done.
- A call that fails: its text, not valid. A call that returns images: `{"obs": text, "image": data URL}` (a
  list of data URLs for a tool that returns several, like `select_frames`).
- An error the reference would raise inside its tool (an image that does not decode, one too large):
  `"Processing error: ..."`, not valid, not done; no session is kept, so the next call tries again.
Trajectories of one request run concurrently; the actions of one trajectory run in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from typing import Any

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from toolserver.core.act import act
from toolserver.core.calls import ToolCalls
from toolserver.core.intake import Intake
from toolserver.errors import NotFound, ServiceError, SessionGone
from toolserver.messages import image_url
from toolserver.models import ActResponse, CreateSessionRequest, ImageInput
from toolserver.profiles import get_profile

NO_TOOL_REASON = "No valid tool found for action"
FINISH_TOOL = "finish"


class ObservationRequest(BaseModel):
    """verl-tool's `ActionRequest`: one entry per trajectory in each list."""

    trajectory_ids: list[str] = Field(min_length=1)
    actions: list[str] = Field(min_length=1)
    extra_fields: list[dict[str, Any]] | None = None
    finish: list[bool] | None = None
    is_last_step: list[bool] | None = None

    @field_validator("actions", "extra_fields")
    @classmethod
    def _one_per_trajectory(cls, value: list | None, info: ValidationInfo) -> list | None:
        ids = info.data.get("trajectory_ids")
        if value is not None and ids and len(value) != len(ids):
            raise ValueError(f"Length of {info.field_name} must match trajectory_ids")
        return value

    def per_trajectory_fields(self) -> list[dict[str, Any]]:
        """Each trajectory's `extra_fields`, with `finish` and `is_last_step` copied in where the first has
        neither (the reference's `_prepare_extra_fields`, which decides what a `finish` is)."""
        fields = [dict(f) for f in self.extra_fields] if self.extra_fields else [{} for _ in self.trajectory_ids]
        for key in ("finish", "is_last_step"):
            values = getattr(self, key)
            if values is not None and key not in fields[0]:
                for field, value in zip(fields, values, strict=False):
                    field[key] = value
        return fields


class ObservationResponse(BaseModel):
    """verl-tool's `AgentResponse`."""

    observations: list[str | dict[str, Any]]
    dones: list[bool]
    valids: list[bool]
    processing_time_ms: float | None = None
    queue_time_ms: float | None = None


Outcome = tuple[str | dict[str, Any], bool, bool]


class VerlToolBridge:
    """verl-tool's protocol for one profile: trajectory ids mapped to sessions of that profile."""

    def __init__(self, profile: str, intake: Intake, calls: ToolCalls, *, done_if_invalid: bool = False,
                 max_trajectories: int = 100_000):
        self.profile = get_profile(profile)
        self.tool_type = self.profile.name.replace("-", "_")  # how verl-tool names the tool (`pixel_reasoner`)
        self.intake = intake
        self.calls = calls
        self.store = calls.services.store
        self.done_if_invalid = done_if_invalid
        self.max_trajectories = max_trajectories
        # Trajectory id -> session id, as this process last resolved it (the store's aliases are the truth, shared
        # by every replica): oldest first.
        self._sessions: OrderedDict[str, str] = OrderedDict()
        self.space = f"verl-tool:{self.profile.name}"
        self._creating: dict[str, asyncio.Future[str]] = {}

    @property
    def tool_names(self) -> list[str]:
        return [self.tool_type, FINISH_TOOL]

    @property
    def trajectories(self) -> int:
        return len(self._sessions)

    async def get_observation(self, request: ObservationRequest) -> ObservationResponse:
        started = time.perf_counter()
        fields = request.per_trajectory_fields()
        outcomes: list[Outcome | None] = [None] * len(request.trajectory_ids)
        by_trajectory: dict[str, list[int]] = {}
        for i, trajectory_id in enumerate(request.trajectory_ids):
            by_trajectory.setdefault(trajectory_id, []).append(i)

        async def run_in_order(indices: list[int]) -> None:
            for i in indices:
                outcomes[i] = await self.observe(request.trajectory_ids[i], request.actions[i], fields[i])

        await asyncio.gather(*(run_in_order(indices) for indices in by_trajectory.values()))
        done = [o for o in outcomes if o is not None]
        return ObservationResponse(observations=[o[0] for o in done], dones=[o[1] for o in done],
                                   valids=[o[2] for o in done], queue_time_ms=0.0,
                                   processing_time_ms=(time.perf_counter() - started) * 1000)

    async def observe(self, trajectory_id: str, action: str, fields: dict[str, Any]) -> Outcome:
        if fields.get("finish", False):
            await self.finish(trajectory_id)
            return "", True, True
        if not self.profile.format.read(action).is_action:
            return self.invalid_action(), self.done_if_invalid, False
        try:
            response = await self._act(trajectory_id, action, fields)
        except ServiceError as exc:
            return f"Processing error: {exc.message}", False, False
        return _outcome(response)

    def invalid_action(self) -> dict[str, Any]:
        return {"obs": "", "invalid_reason": NO_TOOL_REASON,
                "available_tools": "\n".join(["Available tools:", f"• {self.tool_type}: "])}

    async def finish(self, trajectory_id: str) -> None:
        pending = self._creating.get(trajectory_id)
        if pending is not None:  # a first call still creating the session: release what it creates
            with contextlib.suppress(Exception):
                await asyncio.shield(pending)
        named = {self._sessions.pop(trajectory_id, None), await self.store.aliases.drop(self.space, trajectory_id)}
        for session_id in named - {None}:
            assert session_id is not None
            with contextlib.suppress(NotFound, SessionGone):
                await self.store.release(session_id)

    async def _act(self, trajectory_id: str, action: str, fields: dict[str, Any]) -> ActResponse:
        session_id = await self._session_for(trajectory_id, fields)
        try:
            return await act(self.calls, session_id, action)
        except (NotFound, SessionGone):
            # Expired while the trainer was generating (idle past its ttl): the trajectory starts a new session
            # from the images it sends with every call; images returned before are gone with the old one.
            if self._sessions.get(trajectory_id) == session_id:
                del self._sessions[trajectory_id]
            await self.store.aliases.drop_if(self.space, trajectory_id, session_id)
            return await act(self.calls, await self._session_for(trajectory_id, fields), action)

    async def _session_for(self, trajectory_id: str, fields: dict[str, Any]) -> str:
        session_id = self._sessions.get(trajectory_id)
        if session_id is not None:
            self._sessions.move_to_end(trajectory_id)
            return session_id
        pending = self._creating.get(trajectory_id)
        if pending is None:  # the first of concurrent first calls here resolves; the others wait for it
            pending = asyncio.ensure_future(self._resolve(trajectory_id, fields))
            self._creating[trajectory_id] = pending
            pending.add_done_callback(lambda _: self._creating.pop(trajectory_id, None))
        return await asyncio.shield(pending)

    async def _resolve(self, trajectory_id: str, fields: dict[str, Any]) -> str:
        """The trajectory's session: named in the store by any replica that saw it first, else a new one. Of two
        replicas creating at once, the first to name its session wins; the other releases its own."""
        aliases, ttl = self.store.aliases, self.calls.services.settings.default_ttl_s
        session_id = await aliases.get(self.space, trajectory_id, ttl)
        if session_id is None:
            created = await self._create(fields)
            session_id = await aliases.claim(self.space, trajectory_id, created, ttl)
            if session_id != created:
                with contextlib.suppress(NotFound, SessionGone):
                    await self.store.release(created)
        self._sessions[trajectory_id] = session_id
        while len(self._sessions) > self.max_trajectories:  # trajectories never finished: their sessions expire
            self._sessions.popitem(last=False)
        return session_id

    async def _create(self, fields: dict[str, Any]) -> str:
        images = fields.get("images") or []
        if not isinstance(images, list) or not all(isinstance(x, str) for x in images):
            raise _InvalidImages("extra_fields 'images' must be a list of data URLs or paths")
        inputs = [ImageInput(data=x) if x.startswith("data:") else ImageInput(path=x) for x in images]
        # The agent loop sends the images the model sees (verl's dataset resized them), as the model sees them,
        # and replaces each `<image>` of an observation with its own tokens itself.
        request = CreateSessionRequest(profile=self.profile.name, input_form="view", images=inputs,
                                       image_marker="image_tag")
        created = await self.intake.create_session(request, check_views=False)
        return created.session_id


class _InvalidImages(ServiceError):
    status = 422
    code = "invalid_images"


def _outcome(response: ActResponse) -> Outcome:
    results = response.results
    valid = bool(results) and all(r.ok for r in results)
    text = response.prompt if response.prompt is not None else "\n".join(r.text for r in results)
    urls = [image_url(img) for r in results for img in r.images if img.data is not None]
    if not urls:
        return text, response.done, valid
    several = len(urls) > 1 or any(r.tool in MANY_IMAGE_TOOLS for r in results)
    return {"obs": text, "image": urls if several else urls[0]}, response.done, valid


# Tools whose result verl-tool sends as a list of images even when there is one.
MANY_IMAGE_TOOLS = frozenset({"select_frames"})
