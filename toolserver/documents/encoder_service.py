"""A document encoder as a model service: `EncoderModel` (where the network runs) and `EncoderFront` (what the
document library holds).

The front has the `Encoder` interface (`available`, `status`, `encode_texts`, `encode_images`, …) over a transport
(`toolserver.batching`): in this process under uvicorn, or a Ray Serve deployment on a GPU node. The model encodes
the items of every request of a batch of one kind (texts, or images) in one `encode` call, so the queries of many
sessions share a forward pass, and splits the vectors back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from toolserver.batching import ModelFront, Transport
from toolserver.documents.encoders import Encoder

Kind = Literal["texts", "images"]


@dataclass
class EncodeRequest:
    kind: Kind
    items: list[Any]  # strings, or PIL images


@dataclass
class EncodeReply:
    vectors: np.ndarray | None  # one normalised row per item
    batch: int = 1  # calls in the batch this one ran in
    error: str | None = None


class EncoderModel:
    """One encoder behind a transport."""

    def __init__(self, encoder: Encoder):
        self.encoder = encoder

    def batch(self, requests: list[EncodeRequest]) -> list[EncodeReply]:
        replies: list[EncodeReply | None] = [None] * len(requests)
        for kind in ("texts", "images"):
            chosen = [i for i, r in enumerate(requests) if r.kind == kind]
            if not chosen:
                continue
            items = [item for i in chosen for item in requests[i].items]
            try:
                vectors = self.encoder.encode_texts(items) if kind == "texts" else self.encoder.encode_images(items)
            except Exception as exc:  # an unavailable or broken model: every caller learns why
                for i in chosen:
                    replies[i] = EncodeReply(None, len(requests), f"{type(exc).__name__}: {exc}")
                continue
            start = 0
            for i in chosen:
                end = start + len(requests[i].items)
                replies[i] = EncodeReply(vectors[start:end], len(requests))
                start = end
        return [r if r is not None else EncodeReply(None, len(requests), "unknown request kind") for r in replies]

    def describe(self) -> dict[str, Any]:
        e = self.encoder
        return {"role": e.role, "spec": e.spec, "model_name": e.model_name, "where": e.where,
                "available": e.available, "batch_size": e.batch_size, "status": e.status()}

    def warm(self) -> None:
        self.encoder.model()


class EncoderFront(ModelFront):
    """The `Encoder` interface over a transport; thread-safe. What the model serves is read as `ModelFront` says."""

    def __init__(self, role: str, transport: Transport, on_batch: Callable[[int], None] | None = None):
        self.role = role
        self.load_error: str | None = None
        super().__init__(transport, on_batch)

    def _unanswered(self, exc: Exception) -> dict[str, Any]:
        why = f"the {self.role} model ({self.transport.where}) did not answer: {type(exc).__name__}: {exc}"
        return {"role": self.role, "spec": "", "model_name": "", "where": why, "available": False,
                "batch_size": 0, "status": {"available": False, "where": why}}

    @property
    def spec(self) -> str:
        return str(self._info["spec"])

    @property
    def model_name(self) -> str:
        return str(self._info["model_name"])

    @property
    def where(self) -> str:
        return str(self._info["where"])

    @property
    def batch_size(self) -> int:
        return int(self._info["batch_size"])

    @property
    def available(self) -> bool:
        return bool(self._info["available"]) and self.load_error is None

    def model(self) -> None:
        """Load the model now (the library's warm-up)."""
        self.transport.warm()
        self.refresh()

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        return self._encode("texts", texts)

    def encode_images(self, images: list[Any]) -> np.ndarray:
        return self._encode("images", images)

    def _encode(self, kind: Kind, items: list[Any]) -> np.ndarray:
        (reply,) = self.transport.call_many([EncodeRequest(kind, list(items))])
        self._ran_in(reply.batch)
        if reply.error is not None or reply.vectors is None:
            self.refresh()  # a model that failed to load says so in its status from now on
            raise RuntimeError(f"{self.role} model failed: {reply.error}")
        return np.asarray(reply.vectors, dtype=np.float32)
