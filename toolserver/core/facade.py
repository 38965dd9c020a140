"""`Core`: the one object every adapter (HTTP, MCP, tests) calls. No HTTP here.

A facade over the jobs it wires together: intake (sessions, images, videos, texts), tool calls and their delivery,
`/act` through the call formats, inspection, documents, validation and readiness. Errors that are the caller's
protocol problem are raised as `ServiceError` subclasses; tool-level failures come back as `ToolResult(ok=False)`
with model-readable text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from toolserver import resample
from toolserver.allocator import give_back_freed_memory
from toolserver.batching import Transport
from toolserver.config import Settings
from toolserver.core.act import act, call_as_turn, carry_images_once
from toolserver.core.archive import FinishedSessionList, FinishedTrajectory, TrajectoryArchive
from toolserver.core.calls import IdempotencyKey, ToolCalls
from toolserver.core.delivery import Delivery
from toolserver.core.documents import Documents
from toolserver.core.episodes import EpisodeSlots
from toolserver.core.inspection import Inspection
from toolserver.core.intake import Intake, RawImage
from toolserver.core.ors import OrsSessions
from toolserver.core.readiness import Readiness, readiness
from toolserver.core.rewards import Rewards
from toolserver.core.verl_tool import ObservationRequest, ObservationResponse, VerlToolBridge
from toolserver.core.wiring import Services
from toolserver.documents.corpus import CorpusHit
from toolserver.errors import ServiceError, TooLarge
from toolserver.geometry import Coords
from toolserver.models import (
    ActResponse,
    AddedImages,
    CreateSessionRequest,
    DocumentInfo,
    ImageInput,
    OpenAIToolCall,
    SessionCreated,
    SessionInfo,
    SessionList,
    ToolCallsResponse,
    ToolResult,
    Trajectory,
    ValidateItem,
    ValidateResponse,
)
from toolserver.plugins import load_plugins
from toolserver.profiles import get_profile
from toolserver.reward_models import RewardsRequest, RewardsResponse, SessionReward, SessionRewardRequest
from toolserver.rewards import REWARDS, WITHOUT_REWARD, Reward, get_reward
from toolserver.validation import sentences
from toolserver.validation.batch import validate_items

log = logging.getLogger("toolserver")


class Core:
    def __init__(self, settings: Settings | None = None, transports: dict[str, Transport] | None = None):
        """`transports`: how each model is reached (`toolserver.batching`); by default the models run here."""
        load_plugins()  # installed environments join the registries before any profile is looked up
        self.settings = settings or Settings()
        self.services = Services.build(self.settings, transports)
        self.store = self.services.store
        self.pool = self.services.pool
        self.sr = self.services.sr
        self.documents = self.services.documents  # the library itself (shared by all sessions)
        self.metrics = self.services.metrics
        self._intake = Intake(self.services)
        self._delivery = Delivery(self.services)
        self._calls = ToolCalls(self.services, self._delivery)
        self._inspection = Inspection(self.services)
        self.archive = TrajectoryArchive(self.settings.resolved_archive_dir(), self.settings.archive_max_sessions)
        self.store.ended = self.archive.session_ended
        self._documents = Documents(self.documents, self.settings)
        self._rewards = Rewards(self._inspection, self.settings, self.pool)
        self._verl_tool: dict[str, VerlToolBridge] = {}
        self.episodes = EpisodeSlots(self.settings.openenv_max_episodes)  # connections that hold a session
        self.metrics.gauge("toolserver_openenv_episodes", "OpenEnv episodes open (WebSocket connections and "
                           "openenv/session/create sessions)", lambda: self.episodes.active)
        self.ors = OrsSessions(self)  # the ORS endpoint's sessions (docs/ors.md)
        self.started = time.time()
        self._sweeper: asyncio.Task | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever())
        if self.settings.doc_warm_up and self.documents.embedding_roles() and self.documents.has_documents():
            # Loading sentence-transformers takes seconds: do it before the first query needs it.
            threading.Thread(target=self.documents.warm_up, name="toolserver-doc-warmup", daemon=True).start()
        if self._delivery.encoders.processes:  # fpng's encode processes spawn (≈ 0.5 s each) before they are needed
            threading.Thread(target=self._delivery.encoders.start, name="toolserver-encode-start", daemon=True).start()
        # The resize kernels load (or compile, once per machine) and check themselves against Pillow (≈ 1 s):
        # before the first crop, not during it.
        threading.Thread(target=resample.exact_here, name="toolserver-resample-check", daemon=True).start()
        # The same for the validators' compiled sentence splitter, checked against NLTK's punkt (≈ 1 s).
        sentences.use_native(self.settings.sentence_splitter == "native")
        if self.settings.sentence_splitter == "native":
            threading.Thread(target=sentences.native_punkt, name="toolserver-punkt-check", daemon=True).start()
        if self.settings.sandbox_start == "startup":  # the self-test, so that /readyz says what isolation holds
            threading.Thread(target=self._start_sandbox, name="toolserver-sandbox-start", daemon=True).start()

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        self.pool.shutdown()
        await self._delivery.close()
        self.services.sandbox.stop()
        self.sr.close()
        self.documents.close()
        await self.store.close()
        await self._rewards.close()
        self.archive.flush()  # after the store: the sessions live at stop are written too

    async def _close_workers_of_gone_sessions(self) -> None:
        """Stateful workers are named by their session: an expired or evicted session's worker ends here."""
        sandbox = self.services.sandbox
        for session_id in list(sandbox.workers):
            if not await self.store.holds(session_id):
                sandbox.close_worker(session_id)

    def _start_sandbox(self) -> None:
        try:
            self.services.sandbox.start()
        except Exception:  # reported by /readyz; the next execution tries again
            log.exception("the code sandbox did not start")

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sweep_interval_s)
            self.store.sweep()
            with contextlib.suppress(ServiceError, OSError):  # a store outage: the next sweep tries again
                await self.store.sweep_ended()
                await self._delivery.sweep_outputs()
                await self._delivery.sweep_shm()
                await self._close_workers_of_gone_sessions()
                await self.ors.sweep()
            await asyncio.to_thread(give_back_freed_memory)  # what bursts freed, not kept by malloc (allocator.py)

    async def readiness(self, *, draining: bool = False) -> Readiness:
        return await readiness(self.services, draining=draining)

    # -- sessions and intake ---------------------------------------------------------------------
    async def create_session(self, request: CreateSessionRequest | None = None,
                             raw_images: Sequence[RawImage] = ()) -> SessionCreated:
        return await self._intake.create_session(request, raw_images)

    async def add_images(self, session_id: str, images: Sequence[ImageInput] = (),
                         raw_images: Sequence[RawImage] = ()) -> AddedImages:
        return await self._intake.add_images(session_id, images, raw_images)

    async def add_texts(self, session_id: str, texts: dict[str, str] | list[str]) -> list[str]:
        return await self._intake.add_texts(session_id, texts)

    async def release(self, session_id: str) -> None:
        await self.store.release(session_id)
        await self._delivery.remove_outputs(session_id)
        self.services.sandbox.close_worker(session_id)  # its code's state goes with it
        self._rewards.forget(session_id)

    # -- inspection: what the model saw -------------------------------------------------------------
    async def session_info(self, session_id: str) -> SessionInfo:
        return await self._inspection.session_info(session_id)

    async def trajectory(self, session_id: str) -> Trajectory:
        found = await self._inspection.trajectory(session_id)
        return found.model_copy(update={"rewards": self._rewards.of_session(session_id)})

    async def list_sessions(self, offset: int = 0, limit: int = 50) -> SessionList:
        return await self._inspection.list_sessions(offset, limit)

    # -- finished sessions (the trajectory archive; its files read off the event loop) ----------------------
    async def finished_sessions(self, offset: int = 0, limit: int = 50, **filters: Any) -> FinishedSessionList:
        return await asyncio.to_thread(self.archive.list, offset, limit, **filters)

    async def finished_trajectory(self, session_id: str) -> FinishedTrajectory:
        return await asyncio.to_thread(self.archive.trajectory, session_id)

    async def finished_image(self, session_id: str, key: str) -> bytes:
        return await asyncio.to_thread(self.archive.thumbnail, session_id, key)

    async def image_bytes(self, session_id: str, key: str, fmt: str | None = None) -> tuple[bytes, str]:
        return await self._delivery.image_bytes(session_id, key, fmt)

    async def thumbnail(self, session_id: str, key: str, max_side: int) -> bytes:
        return await self._delivery.thumbnail(session_id, key, max_side)

    # -- tools ----------------------------------------------------------------------------------
    def list_tools(self, profile: str = "default", *, strict: bool = False,
                   coords: Coords | None = None) -> list[dict[str, Any]]:
        return get_profile(profile).openai_tools(strict=strict, coords=coords, subs=self.capability_phrases())

    def capability_phrases(self) -> dict[str, str]:
        return self.services.capability_phrases()

    async def call_tool(self, session_id: str, name: str, arguments: dict[str, Any] | str | None,
                        *, base_url: str = "", binary: bool = False,
                        idempotency_key: str | None = None) -> ToolResult:
        """One call. With `idempotency_key`, a retry returns the recorded result instead of running again."""
        key = IdempotencyKey(idempotency_key) if idempotency_key else None
        return await self._calls.call_tool(session_id, name, arguments, base_url=base_url, binary=binary,
                                           idempotency_key=key)

    async def execute_tool_calls(self, session_id: str, tool_calls: Sequence[OpenAIToolCall],
                                 image_message: str = "tool", *, base_url: str = "") -> ToolCallsResponse:
        return await self._calls.execute_tool_calls(session_id, tool_calls, image_message, base_url=base_url)

    async def act(self, session_id: str, text: str, fmt: str = "auto", *, base_url: str = "",
                  idempotency_key: str | None = None) -> ActResponse:
        return carry_images_once(await act(self._calls, session_id, text, fmt, base_url=base_url,
                                           idempotency_key=idempotency_key))

    async def call_as_turn(self, session_id: str, name: str, arguments: dict[str, Any] | str, *,
                           base_url: str = "") -> ActResponse:
        """One structured call, answered as `/act` answers a turn holding that call (the profile's rendering and
        its rule for the episode's end)."""
        return carry_images_once(await call_as_turn(self._calls, session_id, name, arguments, base_url=base_url))

    async def validate(self, items: Sequence[ValidateItem]) -> ValidateResponse:
        """Batch validation without a session (rewards): results in order, one error per bad item."""
        if len(items) > self.settings.max_validate_items:
            raise TooLarge(f"at most {self.settings.max_validate_items} items per validation request")
        results = await self.pool.run(validate_items, items, self.settings.max_text_chars,
                                      timeout=self.settings.tool_timeout_s)
        self.metrics.validations.inc(len(items))
        return ValidateResponse(results=results)

    # -- rewards (toolserver.rewards: each profile's reward as its reference computes it) ---------------------
    async def reward(self, session_id: str, body: SessionRewardRequest) -> SessionReward:
        """The session's episode (its call log, and the response and ground truth given) scored by its profile's
        reward; kept for the trajectory export."""
        return await self._rewards.session_reward(session_id, body)

    def reward_of(self, profile: str) -> Reward:
        """The profile's reward (422 `no_reward` when it has none)."""
        return get_reward(profile)

    def list_rewards(self) -> dict[str, Any]:
        served = [reward.info() | {"registered_by": REWARDS.source(name)} for name, reward in REWARDS.items()]
        return {"rewards": served, "without_reward": dict(WITHOUT_REWARD), "judge": self._rewards.judge is not None}

    async def rewards(self, request: RewardsRequest) -> RewardsResponse:
        """Episodes scored without sessions (a GRPO group): results in order, one error per bad item."""
        return await self._rewards.batch(request)

    # -- verl-tool's tool-server protocol ------------------------------------------------------------
    def verl_tool(self, profile: str | None = None) -> VerlToolBridge:
        """The bridge serving verl-tool's protocol for `profile` (default: the `verl_tool_profile` setting)."""
        name = get_profile(profile or self.settings.verl_tool_profile).name  # unknown: 422 unknown_profile
        if name not in self._verl_tool:
            self._verl_tool[name] = VerlToolBridge(name, self._intake, self._calls,
                                                   done_if_invalid=self.settings.verl_tool_done_if_invalid)
        return self._verl_tool[name]

    async def get_observation(self, request: ObservationRequest, profile: str | None = None) -> ObservationResponse:
        return await self.verl_tool(profile).get_observation(request)

    # -- documents (global, not per session) -------------------------------------------------------
    async def ingest_document(self, *, data: bytes | None = None, upload_name: str = "document.pdf",
                              path: str | None = None, filename: str | None = None,
                              wait: bool = False) -> DocumentInfo:
        return await self._documents.ingest(data=data, upload_name=upload_name, path=path, filename=filename,
                                            wait=wait)

    def list_documents(self) -> list[DocumentInfo]:
        return self._documents.list()

    async def document(self, filename: str) -> DocumentInfo:
        return await self._documents.get(filename)

    async def search_pages(self, queries: list[str], top_k: int, only: str | None = None) -> list[list[CorpusHit]]:
        return await self._documents.search_pages(queries, top_k, only)

    async def delete_document(self, filename: str) -> None:
        await self._documents.delete(filename)
