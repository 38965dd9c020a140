"""A perception model as a model service: `PerceptionModel` (where the network runs) and `PerceptionFront` (what
tools hold, `ctx.perception[name]`).

Each model is a `Runner`: it loads a transformers architecture from a directory found offline (`locate`), says
which requests may share a forward pass (`group_key`: the same input shape, so that no request is padded and a
batched call answers exactly what the call alone would), and runs a group of requests in one forward pass. The
model loads on first use, so a server whose profiles never call it pays nothing; `describe` says where it was
found (or why not) without loading it. Requests and replies are plain data (images as uint8 arrays), so they travel
to the node's model hosts as SMFANet's do.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from toolserver.batching import ModelFront, Transport

# Loads are serialised across models: transformers' lazy module, imported from several threads at once, can be seen
# half-initialised (an AttributeError for a class it has).
_LOADING = threading.Lock()


class ModelUnavailable(RuntimeError):
    """The model is not configured, its weights are not on this host, or they failed to load."""


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def locate(spec: str) -> tuple[str | None, str]:
    """(the local directory `from_pretrained` should load, or None; where it was found, or why not). A spec is a
    local directory or an HF id already in the HF cache: nothing is downloaded."""
    if not spec or spec.lower() == "none":
        return None, "no model configured"
    if importlib.util.find_spec("transformers") is None:
        return None, "transformers is not installed (the `perception` extra: pip install 'vlm-toolserver[perception]')"
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            return None, f"{path} is not a transformers model directory (no config.json)"
        return str(path), f"local directory {path}"
    if spec.startswith(("/", ".", "~")):
        return None, f"{spec} does not exist"
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(spec, local_files_only=True), f"HF cache ({spec})"
    except Exception:  # not in the cache (or not an id at all)
        return None, f"{spec!r} is neither a local model directory nor in the HF cache (models are never downloaded)"


@dataclass
class PerceptionRequest:
    pixels: np.ndarray  # H x W x 3, uint8
    params: dict[str, Any] = field(default_factory=dict)  # the model's own (a caption, points, thresholds)


@dataclass
class PerceptionReply:
    result: dict[str, Any] | None  # the model's raw answer for this request (arrays, lists)
    batch: int = 1  # calls in the batch this one ran in
    group: int = 1  # requests that shared this one's forward pass
    seconds: float = 0.0
    error: str | None = None  # "unavailable" or "failed"
    message: str = ""


class Runner(Protocol):
    """One architecture: how to load it and run a group of same-shaped requests."""

    label: str  # a human name ("GroundingDINO")

    def load(self, path: str, device: str) -> None: ...

    def group_key(self, request: PerceptionRequest) -> Hashable: ...

    def run(self, requests: list[PerceptionRequest]) -> list[dict[str, Any]]: ...


class PerceptionModel:
    """A runner behind a transport: `batch` splits the callers' requests into groups that can share a forward
    pass and runs each group once. Loading is lazy and serialised; a failed load is remembered and reported."""

    def __init__(self, name: str, runner: Runner, spec: str, device: str = "auto", setting: str = ""):
        self.name, self.runner, self.spec, self.setting = name, runner, spec, setting
        self._device = device
        self.target, self.where = locate(spec)
        self.load_error: str | None = None
        self.loaded = False
        self._lock = threading.Lock()

    def _ensure_loaded(self) -> None:
        if self.loaded:
            return
        with self._lock, _LOADING:
            if self.loaded:
                return
            if self.target is None:
                raise ModelUnavailable(self.unavailable_reason())
            if self.load_error is not None:
                raise ModelUnavailable(self.load_error)
            try:
                self.runner.load(self.target, resolve_device(self._device))
            except Exception as exc:  # a broken directory must not take the server down
                self.load_error = f"{self.runner.label} from {self.target} failed to load: {type(exc).__name__}: {exc}"
                raise ModelUnavailable(self.load_error) from exc
            self.loaded = True

    def unavailable_reason(self) -> str:
        if self.load_error is not None:
            return self.load_error
        hint = f" (set {self.setting})" if self.setting else ""
        return f"{self.runner.label} is not available on this server: {self.where}{hint}"

    def batch(self, requests: list[PerceptionRequest]) -> list[PerceptionReply]:
        try:
            self._ensure_loaded()
        except ModelUnavailable as exc:
            return [PerceptionReply(None, len(requests), error="unavailable", message=str(exc)) for _ in requests]
        groups: dict[Hashable, list[int]] = {}
        for i, request in enumerate(requests):
            groups.setdefault(self.runner.group_key(request), []).append(i)
        replies: list[PerceptionReply | None] = [None] * len(requests)
        for chosen in groups.values():
            started = time.perf_counter()
            try:
                results = self.runner.run([requests[i] for i in chosen])
            except Exception as exc:  # every caller of the group learns why; the others go on
                for i in chosen:
                    replies[i] = PerceptionReply(None, len(requests), len(chosen), error="failed",
                                                 message=f"{type(exc).__name__}: {exc}")
                continue
            seconds = time.perf_counter() - started
            for i, result in zip(chosen, results, strict=True):
                replies[i] = PerceptionReply(result, len(requests), len(chosen), seconds)
        return [r for r in replies if r is not None]

    def describe(self) -> dict[str, Any]:
        available = self.target is not None and self.load_error is None
        return {"status": {"available": available, "model": self.spec, "where": self.where, "loaded": self.loaded,
                           "error": self.load_error},
                "unavailable_reason": "" if available else self.unavailable_reason()}

    def warm(self) -> None:
        self._ensure_loaded()


class PerceptionFront(ModelFront):
    """A perception model over a transport; thread-safe. `run` raises `ModelUnavailable` (with the reason) or
    RuntimeError (the model failed on this input)."""

    def __init__(self, name: str, transport: Transport, on_batch: Callable[[int], None] | None = None):
        self.name = name
        super().__init__(transport, on_batch)

    def _unanswered(self, exc: Exception) -> dict[str, Any]:
        why = f"the {self.name} model ({self.transport.where}) did not answer: {type(exc).__name__}: {exc}"
        return {"status": {"available": False, "where": why}, "unavailable_reason": why}

    @property
    def available(self) -> bool:
        return bool(self._info["status"].get("available"))

    def unavailable_reason(self) -> str:
        return str(self._info.get("unavailable_reason", ""))

    def run(self, pixels: np.ndarray, params: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        try:
            (reply,) = self.transport.call_many([PerceptionRequest(pixels, params)], timeout_s)
        except ConnectionError as exc:  # the model host went away, or none answers
            raise ModelUnavailable(str(exc)) from exc
        self._ran_in(reply.batch)
        if reply.error == "unavailable":
            self.refresh()
            raise ModelUnavailable(reply.message)
        if reply.error is not None or reply.result is None:
            raise RuntimeError(reply.message)
        return reply.result
