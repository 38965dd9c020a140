"""The Ray Serve deployments: the ingress (the same FastAPI app as under uvicorn) and one deployment per model.

Neither knows where it runs: the Serve config file (`deploy/ray/toolserver.yaml`) places them (custom resources,
fractional GPUs), sizes them (replicas, `max_ongoing_requests`, bounded queues answering 429) and sets their
environment (`TOOLSERVER_*`, read by `Settings` in every replica as under uvicorn).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

import ray
from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle

from toolserver.api.app import create_app
from toolserver.batching import LocalTransport, Transport
from toolserver.config import Settings
from toolserver.core import Core
from toolserver.core.modelset import batch_rule, build_models
from toolserver.core.wiring import settle_process

log = logging.getLogger("toolserver.ray")


class RayTransport:
    """A model deployment reached through its handle, from the ingress' tool threads (never its event loop).

    The calls are awaited on the replica's event loop, the thread only waiting for their outcome: a blocking
    `DeploymentResponse.result()` (a `ray.get`) in the tool threads held the GIL for seconds at a time while
    sixteen calls waited on the model (measured with py-spy), stalling the event loop and with it the renewal of
    the calls' session locks, which then lapsed.
    """

    def __init__(self, handle: DeploymentHandle, name: str, loop: asyncio.AbstractEventLoop,
                 describe_timeout_s: float = 60.0):
        self.handle = handle
        self.where = f"ray serve deployment {name!r}"
        self.loop = loop
        self.describe_timeout_s = describe_timeout_s

    def _wait(self, calls: Coroutine[Any, Any, Any], timeout_s: float | None) -> Any:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            calls.close()
            raise RuntimeError("a model deployment's call was made from the event loop that must await it")
        return asyncio.run_coroutine_threadsafe(asyncio.wait_for(calls, timeout_s), self.loop).result()

    def call_many(self, requests: list[Any], timeout_s: float | None = None) -> list[Any]:
        async def calls() -> list[Any]:
            responses = [self.handle.call.remote(request) for request in requests]  # all sent before any awaited
            try:
                return list(await asyncio.gather(*responses))
            except BaseException:
                for response in responses:
                    response.cancel()
                raise

        return list(self._wait(calls(), timeout_s))

    def describe(self) -> dict[str, Any]:
        async def ask() -> dict[str, Any]:
            return dict(await self.handle.describe.remote())

        return dict(self._wait(ask(), self.describe_timeout_s))

    def warm(self) -> None:
        async def warm() -> None:
            await self.handle.warm.remote()

        self._wait(warm(), None)

    def close(self) -> None:
        """The model's deployment outlives this replica: nothing to close here."""


@serve.deployment(name="smfanet", max_ongoing_requests=64)
class ModelServer:
    """One model (`smfanet`, `clip` or `text`), its calls from every ingress replica gathered by `@serve.batch` under
    the same rule (`BatchRule`: size, wait, batches at once) as in process."""

    def __init__(self, name: str):
        settings = Settings()
        self.name = name
        self.model = build_models(settings, (name,))[name]
        rule = batch_rule(settings, name)
        self._batched = serve.batch(max_batch_size=rule.max_size, batch_wait_timeout_s=rule.wait_s,
                                    max_concurrent_batches=rule.concurrent)(self._run)

    async def _run(self, requests: list[Any]) -> list[Any]:
        return await asyncio.to_thread(self.model.batch, requests)

    async def call(self, request: Any) -> Any:
        return await self._batched(request)

    async def describe(self) -> dict[str, Any]:
        info = await asyncio.to_thread(self.model.describe)
        where = {"replica": serve.get_replica_context().replica_tag, "node": ray.get_runtime_context().get_node_id()}
        return {**info, "status": {**info["status"], **where}}

    async def warm(self) -> None:
        await asyncio.to_thread(self.model.warm)

    def __del__(self) -> None:
        close = getattr(getattr(self, "model", None), "close", None)
        if close is not None:
            close()


@serve.deployment(name="toolserver", max_ongoing_requests=256)
@serve.ingress()
class Ingress:
    """The FastAPI app of `toolserver serve`, with the models behind handles (those given) or in process."""

    async def __init__(self, smfanet: DeploymentHandle | None = None,  # type: ignore[misc]  # Serve awaits it
                       clip: DeploymentHandle | None = None, text: DeploymentHandle | None = None):
        settings = Settings()
        refuse_process_state(settings, max_replicas())
        self.replica = serve.get_replica_context().replica_tag
        loop = asyncio.get_running_loop()
        given = {"smfanet": smfanet, "clip": clip, "text": text}
        transports: dict[str, Transport] = {name: RayTransport(handle, name, loop) for name, handle in given.items()
                                            if handle is not None}
        for name, model in build_models(settings, tuple(n for n, h in given.items() if h is None)).items():
            transports[name] = LocalTransport(model, batch_rule(settings, name))
        # Off the event loop: the model fronts ask their deployments what they serve, and wait for the answer.
        self.core = await asyncio.to_thread(Core, settings, transports)

    def __serve_build_asgi_app__(self) -> FastAPI:
        app = create_app(core=self.core)
        settle_process(self.core.settings)  # as `toolserver serve` does

        @app.middleware("http")
        async def _name_the_replica(request: Any, call_next: Any) -> Any:
            response = await call_next(request)
            response.headers["X-Toolserver-Replica"] = self.replica  # which replica answered (affinity, tests)
            return response

        return app


def max_replicas() -> int:
    """The most replicas this deployment may have, from its own config (autoscaling's bound, else its count)."""
    config = getattr(serve.get_replica_context(), "_deployment_config", None)
    if config is None:
        return 1
    autoscaling = getattr(config, "autoscaling_config", None)
    if autoscaling is not None:
        return int(autoscaling.max_replicas)
    return int(config.num_replicas or 1)


def refuse_process_state(settings: Settings, replicas: int) -> None:
    """Several replicas must share their sessions, documents and MCP sessions; refuse, saying how, if they can't."""
    if replicas <= 1:
        return
    problems = []
    if settings.session_store == "memory":
        problems.append("sessions are kept in each replica's memory: set TOOLSERVER_SESSION_STORE=redis and "
                        "TOOLSERVER_REDIS_URL")
    if settings.chroma_url is None:
        problems.append("the document vectors would be an embedded chromadb per replica (one process may own it): "
                        "set TOOLSERVER_CHROMA_URL to a Chroma server")
    if settings.mcp_sessions == "process":
        problems.append("MCP sessions would live in one replica: set TOOLSERVER_MCP_SESSIONS=shared")
    if problems:
        raise RuntimeError(f"toolserver is deployed with up to {replicas} replicas, but " + "; and ".join(problems)
                           + ".")
