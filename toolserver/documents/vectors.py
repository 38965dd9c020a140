"""Exact nearest neighbours within one document, from its embeddings held in memory.

A query always searches one document (ARM-Thinker's `where={"source": filename}`). chromadb answers that
filtered query in ~13 ms at 10,000 pages (a metadata scan, then the search), every time. A document has at
most a few thousand records, so once its embeddings are in memory an exact dot product over all of them
takes well under a millisecond and ranks at least as well as the approximate index. chromadb stays the
store of record (ingestion, deletion, replicas through a Chroma server); this is a read cache over it,
keyed by the document's identity (name, content hash, pages ingested), so a re-ingested or extended
document is read again. Bounded by bytes, least recently used dropped first (cachetools).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from cachetools import LRUCache


@dataclass(frozen=True)
class DocumentVectors:
    unit: np.ndarray  # (records, dim) float32, rows scaled to unit length
    pages: np.ndarray  # (records,) the 1-based page of each record

    @property
    def nbytes(self) -> int:
        return int(self.unit.nbytes + self.pages.nbytes)

    @classmethod
    def of(cls, embeddings: np.ndarray, pages: np.ndarray) -> DocumentVectors:
        matrix = np.asarray(embeddings, dtype=np.float32)
        matrix = matrix.reshape(len(pages), -1) if matrix.size else np.zeros((len(pages), 1), np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return cls(matrix / np.where(norms == 0, 1, norms), np.asarray(pages, dtype=np.int64))

    def best_pages(self, query: np.ndarray, candidates: int) -> dict[int, float]:
        """Cosine similarity of the top `candidates` records, as page -> its best record's similarity,
        best first (what chromadb's cosine query with `n_results=candidates` returns, computed exactly)."""
        if len(self.pages) == 0:
            return {}
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        q = q / (np.linalg.norm(q) or 1.0)
        sims = self.unit @ q
        n = min(candidates, len(sims))
        top = np.argpartition(-sims, n - 1)[:n] if n < len(sims) else np.arange(len(sims))
        top = top[np.argsort(-sims[top], kind="stable")]
        out: dict[int, float] = {}
        for i in top:
            out.setdefault(int(self.pages[i]), float(sims[i]))
        return out


class VectorCache:
    def __init__(self, max_bytes: int):
        self._cache: LRUCache = LRUCache(maxsize=max(1, max_bytes), getsizeof=lambda v: max(1, v.nbytes))
        self._lock = threading.Lock()

    def get(self, key: tuple, load: Callable[[], DocumentVectors]) -> DocumentVectors:
        with self._lock:
            found = self._cache.get(key)
        if found is not None:
            return found
        vectors = load()  # outside the lock: two threads may both load a document once
        with self._lock, contextlib.suppress(ValueError):  # larger than the whole cache: used once, not kept
            self._cache[key] = vectors
        return vectors

    def forget(self, filename: str) -> None:
        with self._lock:
            for key in [k for k in self._cache if k[1] == filename]:
                del self._cache[key]
