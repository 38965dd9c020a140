"""A verl tool that forwards to a toolserver: `class_name: toolserver.integrations.verl.ToolServerTool`.

verl builds one tool object per entry of its tool-config YAML and drives it through `BaseTool`'s lifecycle:
`create` → `execute` → `release` (and `calc_reward`). Its agent loop (`ToolAgentLoop`) creates and releases an
instance around *every* call, so a per-instance session would upload the images again on every call. Here a
session belongs to the trajectory instead (`agent_data.request_id`), is shared by every toolserver tool of
the same URL and profile (so `lookback_reuse` sees what `zoom_in` produced), and is created on the first call
with the trajectory's images. verl has no end-of-trajectory hook, so such sessions end by the server's idle
expiry (`session_ttl_s`) or by `release_trajectory`. Without `agent_data` (a caller that keeps one instance
for a whole trajectory), the session belongs to the instance and `release` frees it.

verl is imported when this module is; it is not a toolserver dependency. Without verl, the same class is
built on a stand-in with BaseTool's documented signatures, so it can be used and tested anywhere.

Config keys (`config:` in the YAML; verl's own `type`, `num_workers`, `rate_limit` and `timeout` are kept):
`url` (or env `TOOLSERVER_URL`), `profile` (default `default`), `tool` (default: the schema's name),
`api_key` (or env `TOOLSERVER_API_KEY`), `timeout` (s, default 60), `retries` (default 4), `session_ttl_s`
(default 900), `invalid_call_reward` (step reward for a failed call, default 0.0; verl's recipes use -0.05).
"""

from __future__ import annotations

import asyncio
import io
import os
from collections import OrderedDict
from typing import Any
from uuid import uuid4

import httpx
from pydantic import BaseModel, ConfigDict, Field

from toolserver.client import AsyncClient, AsyncSession, SessionNotFound
from toolserver.models import ToolResult

try:  # the real thing when verl is installed
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

    USING_VERL = True
except ImportError:  # BaseTool's documented lifecycle, for use and tests without verl
    USING_VERL = False

    class OpenAIFunctionToolSchema(BaseModel):  # type: ignore[no-redef]
        type: str
        function: dict[str, Any]

    class ToolResponse(BaseModel):  # type: ignore[no-redef]
        text: str | None = None
        image: list[Any] | None = None
        video: list[Any] | None = None

    class BaseTool:  # type: ignore[no-redef]
        def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None):
            self.config = config
            self.tool_schema = tool_schema or self.get_openai_tool_schema()
            self.name = _schema_name(self.tool_schema)

        def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
            return self.tool_schema

        async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
            return instance_id or str(uuid4()), ToolResponse()

        async def execute(self, instance_id: str, parameters: dict[str, Any],
                          **kwargs: Any) -> tuple[ToolResponse, float, dict]:
            return ToolResponse(text="Updated the tool state."), 0.0, {}

        async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
            return 0.0

        async def release(self, instance_id: str, **kwargs: Any) -> None:
            return None


class AdapterConfig(BaseModel):
    model_config = ConfigDict(extra="allow")  # verl's own keys (type, num_workers, rate_limit, ...) pass through

    url: str = Field(default_factory=lambda: os.environ.get("TOOLSERVER_URL", "http://127.0.0.1:8000"))
    profile: str = "default"
    tool: str | None = None
    api_key: str | None = Field(default_factory=lambda: os.environ.get("TOOLSERVER_API_KEY"))
    timeout: float = Field(default=60.0, gt=0)
    retries: int = Field(default=4, ge=0)
    session_ttl_s: float = Field(default=900.0, gt=0)
    invalid_call_reward: float = 0.0


def _schema_name(schema: Any) -> str:
    function = schema.function
    return function["name"] if isinstance(function, dict) else function.name


def _describe_dropped(prop: dict[str, Any]) -> str:
    """verl's property schema keeps only type, description and enum; say the rest in words."""
    notes = []
    items = prop.get("items")
    if isinstance(items, dict):
        kind = items.get("type", "value")
        count = (f"exactly {prop['minItems']} " if prop.get("minItems") is not None
                 and prop.get("minItems") == prop.get("maxItems") else "")
        notes.append(f"a list of {count}{kind}s")
    for key, word in (("minimum", ">="), ("maximum", "<=")):
        if key in prop:
            notes.append(f"{word} {prop[key]}")
    return f" ({', '.join(notes)})" if notes else ""


def verl_schema(entry: dict[str, Any]) -> OpenAIFunctionToolSchema:
    """A toolserver `/v1/tools` entry as verl's `OpenAIFunctionToolSchema`."""
    function = entry["function"]
    properties = {}
    for name, prop in function.get("parameters", {}).get("properties", {}).items():
        types = prop.get("type") or [o.get("type") for o in prop.get("anyOf", []) if o.get("type")] or "string"
        converted: dict[str, Any] = {
            "type": types,
            "description": (prop.get("description") or "") + _describe_dropped(prop),
        }
        if "enum" in prop:
            converted["enum"] = prop["enum"]
        properties[name] = converted
    return OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {
        "name": function["name"], "description": function.get("description", ""),
        "parameters": {"type": "object", "properties": properties,
                       "required": function.get("parameters", {}).get("required", [])},
    }})


def _pil_images(result: ToolResult) -> list[Any]:
    from PIL import Image

    images = []
    for image in result.images:
        if image.data is not None:
            images.append(Image.open(io.BytesIO(image.content())).convert("RGB"))
        elif image.path is not None:
            images.append(Image.open(image.path).convert("RGB"))
    return images


def _inputs(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


class _Instance:
    def __init__(self, images: list[Any], texts: Any):
        self.images, self.texts = images, texts
        self.session: AsyncSession | None = None
        self.reward = 0.0
        self.calls = 0


class _Shared:
    """Per (url, profile): one async client, and the trajectory sessions every tool of that server shares."""

    max_trajectories = 100_000

    def __init__(self, config: AdapterConfig):
        self.config = config
        self.client: AsyncClient | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.trajectories: OrderedDict[str, asyncio.Future[AsyncSession]] = OrderedDict()

    def get_client(self) -> AsyncClient:
        loop = asyncio.get_running_loop()
        if self.client is None or self.loop is not loop:  # an httpx client belongs to one event loop
            self.client = AsyncClient(self.config.url, api_key=self.config.api_key, timeout=self.config.timeout,
                                      retries=self.config.retries)
            self.loop = loop
            self.trajectories.clear()
        return self.client

    async def new_session(self, images: list[Any], texts: Any) -> AsyncSession:
        return await self.get_client().create_session(images, texts, profile=self.config.profile,
                                                      ttl_s=self.config.session_ttl_s)

    async def for_trajectory(self, request_id: str, images: list[Any], texts: Any) -> AsyncSession:
        self.get_client()  # first, so that a new event loop's reset cannot drop the future stored below
        future = self.trajectories.get(request_id)
        if future is None or (future.done() and future.exception() is not None):
            # Parallel calls of one trajectory wait on the same creation.
            future = asyncio.ensure_future(self.new_session(images, texts))
            self.trajectories[request_id] = future
            while len(self.trajectories) > self.max_trajectories:
                self.trajectories.popitem(last=False)
        self.trajectories.move_to_end(request_id)
        return await future

    def forget(self, request_id: str) -> asyncio.Future[AsyncSession] | None:
        return self.trajectories.pop(request_id, None)


_SHARED: dict[tuple[str, str], _Shared] = {}


class ToolServerTool(BaseTool):
    """One toolserver tool as a verl `BaseTool`. See the module docstring for configuration."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        self.settings = AdapterConfig.model_validate(config or {})
        if self.settings.tool is None and tool_schema is None:
            raise ValueError("ToolServerTool needs `tool` in its config or a `tool_schema`")
        self.tool_name = self.settings.tool or _schema_name(tool_schema)
        key = (self.settings.url.rstrip("/"), self.settings.profile)
        self._shared = _SHARED.setdefault(key, _Shared(self.settings))
        self._instances: dict[str, _Instance] = {}
        super().__init__(config, tool_schema)

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        """The schema the server publishes for this tool (fetched once, when the YAML gives none)."""
        if getattr(self, "tool_schema", None) is not None:
            return self.tool_schema
        headers = {"Authorization": f"Bearer {self.settings.api_key}"} if self.settings.api_key else {}
        base = self.settings.url.rstrip("/")
        response = httpx.get(f"{base}/v1/tools", params={"profile": self.settings.profile}, headers=headers,
                             timeout=self.settings.timeout)
        response.raise_for_status()
        entries = {entry["function"]["name"]: entry for entry in response.json()}
        if self.tool_name not in entries:  # another name the profile answers to (Pixel-Reasoner's `zoom_in`)
            profiles = httpx.get(f"{base}/v1/profiles", headers=headers, timeout=self.settings.timeout).json()
            aliases: dict[str, str] = next(
                (p.get("aliases", {}) for p in profiles if p["name"] == self.settings.profile), {})
            target = entries.get(aliases.get(self.tool_name, ""))
            if target is None:
                raise ValueError(f"toolserver profile {self.settings.profile!r} has no tool {self.tool_name!r}")
            entries[self.tool_name] = {**target, "function": {**target["function"], "name": self.tool_name}}
        return verl_schema(entries[self.tool_name])

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Remember the images and texts to start a session with: `create_kwargs={"image": …}` (verl's
        agent loop) or the same keys directly. `image`/`images`: PIL images, paths, bytes or data URIs."""
        create_kwargs = kwargs.get("create_kwargs") or kwargs
        instance_id = instance_id or str(uuid4())
        images = _inputs(create_kwargs.get("image")) + _inputs(create_kwargs.get("images"))
        self._instances[instance_id] = _Instance(images, create_kwargs.get("texts"))
        return instance_id, ToolResponse()

    async def _session(self, instance: _Instance, agent_data: Any) -> AsyncSession:
        request_id = getattr(agent_data, "request_id", None)
        if request_id is None:
            if instance.session is None:
                instance.session = await self._shared.new_session(instance.images, instance.texts)
            return instance.session
        images = instance.images or list(getattr(agent_data, "image_data", None) or [])
        return await self._shared.for_trajectory(str(request_id), images, instance.texts)

    async def execute(self, instance_id: str, parameters: dict[str, Any],
                      **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        instance = self._instances.get(instance_id)
        if instance is None:
            await self.create(instance_id)
            instance = self._instances[instance_id]
        agent_data = kwargs.get("agent_data")
        session = await self._session(instance, agent_data)
        # The call's idempotency key is its tool instance (verl makes one per call) and its number there: the
        # client's retries reuse it, so a call the server committed is never run twice.
        instance.calls += 1
        key = f"verl:{instance_id}:{instance.calls}"
        try:
            result = await session.call(self.tool_name, parameters or {}, idempotency_key=key)
        except SessionNotFound:
            # Expired between calls: start again with the same inputs (earlier tool outputs are gone).
            request_id = getattr(agent_data, "request_id", None)
            if request_id is not None:
                self._shared.forget(str(request_id))
            instance.session = None
            session = await self._session(instance, agent_data)
            result = await session.call(self.tool_name, parameters or {}, idempotency_key=key)
        reward = 0.0 if result.ok else self.settings.invalid_call_reward
        instance.reward += reward
        metrics: dict[str, Any] = {"ok": result.ok, "session_id": session.id}
        if result.error is not None:
            metrics["error_code"] = result.error.code
        metrics.update({k: v for k, v in result.meta.items() if isinstance(v, int | float | str | bool)})
        images = _pil_images(result)
        response = ToolResponse(text=result.text, image=images) if images else ToolResponse(text=result.text)
        return response, reward, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The sum of this instance's step rewards (`invalid_call_reward` per failed call)."""
        instance = self._instances.get(instance_id)
        return instance.reward if instance else 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Forget the instance; free its session if it owned one (trajectory sessions outlive instances)."""
        instance = self._instances.pop(instance_id, None)
        if instance is not None and instance.session is not None:
            await instance.session.release()

    async def release_trajectory(self, request_id: str) -> None:
        """Free a trajectory's session now instead of waiting for the idle expiry."""
        future = self._shared.forget(str(request_id))
        if future is not None and future.done() and future.exception() is None:
            await future.result().release()
