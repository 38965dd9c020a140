"""The vector store: chromadb (an embedded PersistentClient owned by this process, or a Chroma server) with our
collections, and an existing ARM-Thinker index mounted read-only. Embeddings are always passed in."""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from toolserver.documents.encoders import TextImageEncoder
from toolserver.documents.ranking import first_occurrences
from toolserver.documents.sources import (
    PAGE_IMAGE_EXTS,
    DocumentError,
)

# The embedding rankings need the vector store (the `docs` extra); BM25 works without it.
CHROMADB_INSTALLED = importlib.util.find_spec("chromadb") is not None


class NodeChromaLink:
    """A worker's way to the Chroma server of its node (`toolserver serve --workers N`), which the supervisor starts
    on the documents' first use rather than with the node (89 MB that a node whose calls never touch a document does
    not spend): the worker leaves `wanted` in the node's `chroma/` folder, the supervisor starts the server and writes
    its URL to `url` once it answers, or the reason it could not to `error`."""

    def __init__(self, folder: Path, timeout_s: float = 60.0):
        self.folder = folder
        self.timeout_s = timeout_s

    def url(self) -> str:
        url_file, error_file = self.folder / "url", self.folder / "error"
        if url_file.exists():
            return url_file.read_text()
        asked = time.time()
        (self.folder / "wanted").touch()
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if url_file.exists():
                return url_file.read_text()
            try:
                if error_file.stat().st_mtime >= asked:  # not an earlier attempt's
                    raise DocumentError(f"the node's Chroma server could not start: {error_file.read_text()}",
                                        "vector_store_unavailable")
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        raise DocumentError(f"the node's Chroma server did not start within {self.timeout_s:.0f} s",
                            "vector_store_unavailable")


class ChromaStore:
    """The chromadb client (embedded PersistentClient or a server) and our collections, opened lazily. `node`: a
    node's Chroma server, started on first use (its URL is asked for when the client is first needed)."""

    def __init__(self, path: Path, url: str | None, node: NodeChromaLink | None = None):
        self.path = path
        self.url = url
        self.node = node
        self._client: Any = None
        self._lock = threading.Lock()
        self._collections: dict[str, Any] = {}

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import chromadb
                from chromadb.config import Settings as ChromaSettings

                settings = ChromaSettings(anonymized_telemetry=False)
                if self.url is None and self.node is not None:
                    self.url = self.node.url()
                if self.url:
                    parsed = urlparse(self.url)
                    self._client = chromadb.HttpClient(host=parsed.hostname or "localhost",
                                                       port=parsed.port or (443 if parsed.scheme == "https" else 8000),
                                                       ssl=parsed.scheme == "https", settings=settings)
                else:
                    self.path.mkdir(parents=True, exist_ok=True)
                    self._client = chromadb.PersistentClient(path=str(self.path), settings=settings)
            return self._client

    def collection(self, role: str, encoder: TextImageEncoder) -> Any:
        name = f"toolserver-{role}"
        if name not in self._collections:
            col = self.client().get_or_create_collection(
                name=name, metadata={"hnsw:space": "cosine", "model": encoder.spec})
            stored = (col.metadata or {}).get("model")
            if stored and stored != encoder.spec:
                raise DocumentError(f"the {role} collection was built with model {stored!r}, but {encoder.spec!r} is "
                                    "configured; delete the documents or configure the original model",
                                    "model_mismatch")
            self._collections[name] = col
        return self._collections[name]

    def delete_source(self, filename: str, roles: list[str], encoders: dict[str, TextImageEncoder]) -> None:
        for role in roles:
            self.collection(role, encoders[role]).delete(where={"source": filename})


class ArmMount:
    """An existing ARM-Thinker index, read only: chroma path + collection + page-image root, CLIP queries."""

    def __init__(self, path: Path, collection: str, image_root: Path, clip: TextImageEncoder):
        self.path, self.collection_name, self.image_root, self.clip = path, collection, image_root, clip
        self._collection: Any = None
        self._lock = threading.Lock()

    def collection(self) -> Any:
        with self._lock:
            if self._collection is None:
                import chromadb
                from chromadb.config import Settings as ChromaSettings

                client = chromadb.PersistentClient(path=str(self.path),
                                                   settings=ChromaSettings(anonymized_telemetry=False))
                self._collection = client.get_collection(self.collection_name)
            return self._collection

    def has(self, filename: str) -> bool:
        found = self.collection().get(where={"source": filename}, limit=1, include=[])
        return bool(found["ids"])

    def sources(self) -> list[str]:
        metadatas = self.collection().get(include=["metadatas"])["metadatas"] or []
        return sorted({str(m.get("source")) for m in metadatas if m and m.get("source") is not None})

    def search(self, filename: str, query: str, k: int) -> list[int]:
        embedding = self.clip.encode_texts([query])
        found = self.collection().query(query_embeddings=embedding.tolist(), n_results=k,
                                        where={"source": filename}, include=["metadatas"])
        metadatas = (found.get("metadatas") or [[]])[0]
        return first_occurrences([int(m["page"]) for m in metadatas if m and "page" in m])[:k]

    def page_candidates(self, filename: str, page: int) -> list[Path]:
        return [self.image_root / f"{filename}_{int(page)}{ext}" for ext in PAGE_IMAGE_EXTS]
