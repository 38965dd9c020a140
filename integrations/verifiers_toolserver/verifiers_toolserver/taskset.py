"""The taskset: a user's dataset rows as tasks, each rollout a toolserver session, scored by toolserver's reward.

Per rollout: `setup` opens a toolserver session holding the row's images (`POST /v1/sessions`) and keeps its id in
the rollout's state; the model gets the profile's tools through `ToolserverToolset`, bound to that session; the
`toolserver` reward is the profile's reward over the session's call log and the final reply
(`POST /v1/sessions/{id}/reward`), after which the session is released. Nothing here runs a tool or scores."""

from __future__ import annotations

import os
from typing import Any

import httpx
import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.types import ImageUrlContentPart, ImageUrlSource, TextContentPart, UserMessage

from verifiers_toolserver.rows import read_rows
from verifiers_toolserver.toolset import ToolserverState, ToolserverToolset, ToolserverToolsetConfig, headers


class ToolserverData(vf.TaskData):
    question: str = ""
    images: list[str] = Field(default_factory=list)
    """The row's images, as data URIs (they are also in the prompt)."""
    ground_truth: Any = None
    extra: dict[str, Any] = Field(default_factory=dict)


class ToolserverTaskConfig(vf.TaskConfig):
    toolserver: str = "http://127.0.0.1:8000"
    """toolserver's base URL."""
    profile: str = "default"
    """The profile: its tools, its system prompt's rules and its reward."""
    api_key_var: str = "TOOLSERVER_API_KEY"
    """The environment variable holding toolserver's API key, where the server has keys configured."""
    tools: vf.ToolsetConfig = vf.ToolsetConfig()
    """Where verifiers runs the forwarding tool server (its runtime); `url` must stay unset."""


class ToolserverTask(vf.Task[ToolserverData, ToolserverState, ToolserverTaskConfig]):
    @classmethod
    def toolsets(cls, config: ToolserverTaskConfig) -> list[vf.Toolset]:
        if config.tools.url:  # verifiers would hand that URL to the harness bare: no session, no images
            raise ValueError("set `toolserver` (its base URL), not `tools.url`: each rollout's tools are bound "
                             "to its own toolserver session by the forwarding tool server")
        return [ToolserverToolset(ToolserverToolsetConfig(
            **config.tools.model_dump(), toolserver=config.toolserver, profile=config.profile))]

    def _http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.config.toolserver, timeout=120,
                                 headers=headers(os.environ.get(self.config.api_key_var)))

    async def setup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        async with self._http() as http:
            response = await http.post("/v1/sessions", json={
                "profile": self.config.profile, "images": [{"data": image} for image in self.data.images]})
        if response.is_error:
            raise vf.TaskError(f"toolserver refused the rollout's session: {response.status_code} {response.text}")
        trace.state.session = response.json()["session_id"]
        trace.state.key = os.environ.get(self.config.api_key_var)

    @vf.reward(weight=1.0)
    async def toolserver(self, trace: vf.Trace) -> float:
        """The profile's reward, as toolserver computes it (docs/rewards.md), over the final reply and the calls."""
        session = trace.state.session
        if not session:
            raise vf.TaskError("the rollout has no toolserver session to score")
        async with self._http() as http:
            try:
                response = await http.post(f"/v1/sessions/{session}/reward", json={
                    "turns": [trace.last_reply], "ground_truth": self.data.ground_truth,
                    "question": self.data.question, "extra": self.data.extra})
            finally:
                await http.delete(f"/v1/sessions/{session}")
        if response.is_error:
            raise vf.TaskError(f"toolserver could not score the rollout: {response.status_code} {response.text}")
        return float(response.json()["total"])


class ToolserverConfig(vf.TasksetConfig):
    dataset: str = ""
    """A JSONL file, or a directory of `<profile>.<split>.jsonl` files (the ORS endpoint's format, docs/ors.md)."""
    split: str = "train"
    task: ToolserverTaskConfig = ToolserverTaskConfig()


class ToolserverTaskset(vf.Taskset[ToolserverTask, ToolserverConfig]):
    def load(self) -> list[ToolserverTask]:
        if not self.config.dataset:
            raise ValueError("set the taskset's `dataset` (--env.taskset.dataset PATH): a JSONL file or directory")
        rows = read_rows(self.config.dataset, self.config.task.profile, self.config.split)
        return [ToolserverTask(ToolserverData(
            idx=index, id=row["id"], prompt=[UserMessage(content=[
                *(ImageUrlContentPart(image_url=ImageUrlSource(url=image)) for image in row["images"]),
                TextContentPart(text=row["question"])])],
            question=row["question"], images=row["images"], ground_truth=row["ground_truth"], extra=row["extra"]),
            self.config.task) for index, row in enumerate(rows)]
