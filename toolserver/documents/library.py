"""The document library: ingestion, the page store, the rankings and their fusion.

On disk, under the documents directory:
- `pages/{filename}_{page}.{ext}` — the page images, in ARM-Thinker's layout (usable as its RAG_IMAGE_ROOT);
- `meta/{filename}.json` — the manifest: source hash, page counts, status;
- `texts/{filename}.jsonl` — each page's text layer, one line per page (the lexical ranking's corpus);
- `chroma/` — the embedded chromadb store, unless a Chroma server URL is configured.

In chromadb, the CLIP collection holds one record per page (metadata `source`, `page` 1-based: ARM-Thinker's
layout); the dense-text collection holds one record per passage of a page's text (same metadata), because a
whole page is longer than a text model's input. Embeddings are always passed in, never computed by chromadb.

Ingestion is resumable: pages are committed in batches and the manifest advances only after a batch is
stored, so an interrupted run leaves a `partial` document whose pages stay searchable, and ingesting the
same file again continues where it stopped. An unchanged, complete document is not touched again; a
changed one (new hash) is replaced.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from toolserver.documents.chroma import CHROMADB_INSTALLED, ArmMount, ChromaStore, NodeChromaLink
from toolserver.documents.encoders import TextImageEncoder
from toolserver.documents.files import LibraryFiles, atomic_write
from toolserver.documents.lexical import LexicalIndex
from toolserver.documents.ranking import CANDIDATES, SearchResult, fuse, passages
from toolserver.documents.sources import (
    PAGE_IMAGE_EXTS,
    DocumentError,
    ImageFolderSource,
    PdfSource,
    check_filename,
    filename_from_path,
    open_source,
)
from toolserver.documents.vectors import DocumentVectors, VectorCache
from toolserver.models import DocumentInfo

log = logging.getLogger("toolserver.documents")

Progress = Callable[[DocumentInfo], None]


class DocumentLibrary:
    def __init__(self, root: Path, *, clip: TextImageEncoder, text: TextImageEncoder, chroma_url: str | None = None,
                 page_long_side: int = 1600, page_format: str = "jpeg", jpeg_quality: int = 90,
                 batch_pages: int = 16, max_pages: int = 10_000, arm: ArmMount | None = None,
                 vector_cache_bytes: int = 256 * 1024 * 1024, node_chroma: NodeChromaLink | None = None):
        self.root = root
        self.pages_dir = root / "pages"
        self.files = LibraryFiles(root)
        self.texts_dir = self.files.texts_dir
        self.encoders = {"clip": clip, "text": text}
        self.chroma = ChromaStore(root / "chroma", chroma_url, node_chroma)
        self.page_long_side = page_long_side
        self.page_format = page_format
        self.jpeg_quality = jpeg_quality
        self.batch_pages = batch_pages
        self.max_pages = max_pages
        self.arm = arm
        self._doc_locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._active: dict[str, DocumentInfo] = {}  # ingestions running or queued in this process
        self._lexical: OrderedDict[tuple[str, str, int], LexicalIndex] = OrderedDict()
        self._lexical_lock = threading.Lock()
        self._vectors = VectorCache(vector_cache_bytes)
        self._jobs = ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolserver-ingest")

    # -- what this server ranks with ----------------------------------------------------------------
    def embedding_roles(self) -> list[str]:
        if not CHROMADB_INSTALLED:
            return []
        return [role for role in ("text", "clip") if self.encoders[role].available]

    def rankings(self) -> list[str]:
        return ["lexical", *self.embedding_roles()]

    def status(self) -> dict[str, Any]:
        return {"rankings": self.rankings(), "documents": len(self.files.meta_files()), "chromadb": CHROMADB_INSTALLED,
                "store": self.chroma.url or ("the node's Chroma server, started on first use" if self.chroma.node
                                             else str(self.chroma.path)),
                "clip": self.encoders["clip"].status(), "text": self.encoders["text"].status(),
                "arm_index": None if self.arm is None else {"path": str(self.arm.path),
                                                           "collection": self.arm.collection_name}}

    def describe_rankings(self) -> str:
        names = {"lexical": "exact terms in the page text (BM25)",
                 "text": f"meaning of the page text ({self.encoders['text'].model_name})",
                 "clip": f"the page image (CLIP, {self.encoders['clip'].model_name})"}
        used = [names[r] for r in self.rankings()]
        if len(used) == 1:
            return f"This server ranks pages by {used[0]}."
        return f"This server ranks pages by {', '.join(used[:-1])} and {used[-1]}, fused."

    def warm_up(self) -> None:
        """Load the available models now rather than on the first query (called in the background at start)."""
        for role in self.embedding_roles():
            with contextlib.suppress(Exception):
                self.encoders[role].model()

    def close(self) -> None:
        self._jobs.shutdown(wait=False, cancel_futures=True)

    def save_upload(self, data: bytes, name: str) -> Path:
        return self.files.save_upload(data, name)

    # -- manifests ----------------------------------------------------------------------------------
    def _read_meta(self, filename: str) -> DocumentInfo | None:
        """What callers see: an ingestion queued or running here, else the manifest."""
        active = self._active.get(filename)
        if active is not None:
            return active.model_copy()
        return self.files.read_manifest(filename)

    def _lock_for(self, filename: str) -> threading.Lock:
        with self._locks_guard:
            return self._doc_locks.setdefault(filename, threading.Lock())

    def has_documents(self) -> bool:
        return bool(self._active) or bool(self.files.meta_files())

    def _is_ours(self, filename: str) -> bool:
        """In this library (rather than a mounted index): a stat, not a manifest parse, on the tool path."""
        return filename in self._active or self.files.meta_path(filename).exists()

    def list(self) -> list[DocumentInfo]:
        docs = {p.stem: self._read_meta(p.stem) for p in self.files.meta_files()}
        docs.update({name: info.model_copy() for name, info in self._active.items()})
        return [d for _, d in sorted(docs.items()) if d is not None]

    def mounted(self) -> builtins.list[str]:
        return self.arm.sources() if self.arm is not None else []

    def get(self, filename: str) -> DocumentInfo:
        info = self._read_meta(filename)
        if info is not None:
            return info
        if self.arm is not None and self.arm.has(filename):
            return DocumentInfo(filename=filename, kind="mounted", status="ready", pages=0, pages_done=0,
                                embedded=["clip"])
        raise DocumentError(f"no document {filename!r}", "unknown_document")

    # -- ingestion ----------------------------------------------------------------------------------
    def open(self, path: Path, filename: str | None = None) -> tuple[str, PdfSource | ImageFolderSource]:
        """Check a source before anything is written: a bad one is refused and changes nothing."""
        filename = check_filename(filename) if filename else filename_from_path(path)
        source = open_source(path, filename, self.page_long_side)
        if source.pages > self.max_pages:
            source.close()
            raise DocumentError(f"{filename} has {source.pages} pages; this server ingests at most "
                                f"{self.max_pages} per document", "too_many_pages")
        return filename, source

    def ingest(self, path: Path, filename: str | None = None, progress: Progress | None = None) -> DocumentInfo:
        filename, source = self.open(path, filename)
        return self.ingest_source(filename, source, progress)

    def submit(self, path: Path, filename: str | None = None, *,
               remove_after: bool = False) -> tuple[DocumentInfo, Future]:
        """Validate now, ingest in the background (one document at a time); the status is readable meanwhile."""
        try:
            filename, source = self.open(path, filename)
        except DocumentError:
            if remove_after:
                path.unlink(missing_ok=True)
            raise
        running = self._active.get(filename)
        if running is not None:
            source.close()
            raise DocumentError(f"document {filename!r} is already being ingested", "ingest_in_progress")
        queued = DocumentInfo(filename=filename, kind=source.kind, status="queued", pages=source.pages,
                              pages_done=0, sha256=source.sha256)
        self._active[filename] = queued

        def job() -> DocumentInfo:
            try:
                return self.ingest_source(filename, source)
            finally:
                self._active.pop(filename, None)
                if remove_after:
                    path.unlink(missing_ok=True)

        return queued.model_copy(), self._jobs.submit(job)

    def ingest_source(self, filename: str, source: PdfSource | ImageFolderSource,
                      progress: Progress | None = None) -> DocumentInfo:
        try:
            with self._lock_for(filename):
                return self._ingest_locked(filename, source, progress)
        finally:
            source.close()

    def _ingest_locked(self, filename: str, source: PdfSource | ImageFolderSource,
                       progress: Progress | None) -> DocumentInfo:
        roles = self.embedding_roles()
        # The manifest, not the queued entry; that entry stays visible until this ingestion's own replaces it
        # (dropping it here left a moment in which the document was unknown: 404 after a 202).
        old = self.files.read_manifest(filename)
        same = (old is not None and old.sha256 == source.sha256 and old.pages == source.pages
                and old.kind == source.kind and old.embedded == roles)
        if same and old is not None and old.status == "ready":
            old.unchanged = True
            return old
        start = old.pages_done + 1 if same and old is not None else 1
        if old is not None and not same:
            self._remove(old)
        texts = self.files.read_texts(filename)[:start - 1] if start > 1 else []
        self.files.write_texts(filename, texts)
        info = DocumentInfo(filename=filename, kind=source.kind, status="ingesting", pages=source.pages,
                            pages_done=start - 1, sha256=source.sha256, embedded=roles,
                            has_text=any(t.strip() for t in texts))
        self._active[filename] = info
        self.files.write_manifest(info)
        try:
            for first in range(start, source.pages + 1, self.batch_pages):
                last = min(first + self.batch_pages, source.pages + 1)
                pages = list(source.read(first, last))
                self._store_batch(filename, source, pages, roles)
                info.pages_done = last - 1
                info.has_text = info.has_text or any(p.text.strip() for p in pages)
                self.files.write_manifest(info)
                if progress is not None:
                    progress(info.model_copy())
            info.status = "ready"
        except BaseException as exc:
            info.status = "partial" if info.pages_done else "failed"
            info.error = exc.message if isinstance(exc, DocumentError) else f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._active.pop(filename, None)
            self.files.write_manifest(info)
        return info.model_copy()

    def _store_batch(self, filename: str, source: PdfSource | ImageFolderSource, pages: builtins.list,
                     roles: builtins.list[str]) -> None:
        self.pages_dir.mkdir(parents=True, exist_ok=True)
        for page in pages:
            self._save_page(filename, source, page)
        if "clip" in roles:
            vectors = self.encoders["clip"].encode_images([p.image for p in pages])
            self.chroma.collection("clip", self.encoders["clip"]).upsert(
                ids=[f"{filename}:{p.number}" for p in pages], embeddings=vectors.tolist(),
                metadatas=[{"source": filename, "page": p.number} for p in pages])
        if "text" in roles:
            ids, docs, metas = [], [], []
            for page in pages:
                for i, passage in enumerate(passages(page.text)):
                    ids.append(f"{filename}:{page.number}:{i}")
                    docs.append(passage)
                    metas.append({"source": filename, "page": page.number, "passage": i})
            if ids:
                vectors = self.encoders["text"].encode_texts(docs)
                self.chroma.collection("text", self.encoders["text"]).upsert(
                    ids=ids, embeddings=vectors.tolist(), documents=docs, metadatas=metas)
        self.texts_dir.mkdir(parents=True, exist_ok=True)
        with (self.texts_dir / f"{filename}.jsonl").open("a", encoding="utf-8") as out:
            for page in pages:
                out.write(json.dumps({"page": page.number, "text": page.text}) + "\n")

    def _save_page(self, filename: str, source: PdfSource | ImageFolderSource, page: Any) -> None:
        if isinstance(source, ImageFolderSource):
            original = source.files[page.number - 1]  # page images are kept byte for byte
            atomic_write(self.pages_dir / f"{filename}_{page.number}{original.suffix.lower()}",
                          original.read_bytes())
            return
        ext = ".jpg" if self.page_format == "jpeg" else ".png"
        target = self.pages_dir / f"{filename}_{page.number}{ext}"
        tmp = target.with_name(target.name + ".tmp")
        if self.page_format == "jpeg":
            page.image.save(tmp, format="JPEG", quality=self.jpeg_quality)
        else:
            page.image.save(tmp, format="PNG", compress_level=6)
        tmp.replace(target)

    # -- deletion -----------------------------------------------------------------------------------
    def delete(self, filename: str) -> None:
        if filename in self._active:
            raise DocumentError(f"document {filename!r} is being ingested; delete it when that ends",
                                "ingest_in_progress")
        with self._lock_for(filename):
            info = self._read_meta(filename)
            if info is None:
                raise DocumentError(f"no document {filename!r}", "unknown_document")
            self._remove(info)

    def _remove(self, info: DocumentInfo) -> None:
        roles = [r for r in info.embedded if r in self.encoders]
        if roles:
            self.chroma.delete_source(info.filename, roles, self.encoders)
        for page in range(1, info.pages + 1):
            for ext in PAGE_IMAGE_EXTS:
                (self.pages_dir / f"{info.filename}_{page}{ext}").unlink(missing_ok=True)
        (self.texts_dir / f"{info.filename}.jsonl").unlink(missing_ok=True)
        self.files.meta_path(info.filename).unlink(missing_ok=True)
        with self._lexical_lock:
            for key in [k for k in self._lexical if k[0] == info.filename]:
                del self._lexical[key]
        self._vectors.forget(info.filename)

    # -- retrieval ----------------------------------------------------------------------------------
    def page_count(self, filename: str) -> int | None:
        info = self._read_meta(filename)
        return info.pages_done if info is not None else None

    def page_candidates(self, filename: str, page: int) -> builtins.list[Path]:
        """Where a page image may be, in ARM-Thinker's extension order."""
        if self.arm is not None and not self._is_ours(filename):
            return self.arm.page_candidates(filename, page)
        return [self.pages_dir / f"{filename}_{int(page)}{ext}" for ext in PAGE_IMAGE_EXTS]

    def search(self, filename: str, query: str, k: int = 5) -> SearchResult:
        info = self._read_meta(filename)
        if info is None or info.pages_done == 0:
            if self.arm is not None and self.arm.has(filename):
                if not self.encoders["clip"].available:
                    raise DocumentError("the mounted ARM-Thinker index needs the CLIP model, which is not "
                                        f"available: {self.encoders['clip'].where}", "no_ranking")
                pages = self.arm.search(filename, query, k)
                return SearchResult(pages, {"clip": {p: float(k - i) for i, p in enumerate(pages)}})
            raise DocumentError(f"no document {filename!r}", "unknown_document")
        scores: dict[str, dict[int, float]] = {}
        if info.has_text:
            scores["lexical"] = self._lexical_index(info).scores(query)
        for role in info.embedded:
            if self.encoders[role].available and (role != "text" or info.has_text):
                scores[role] = self._vector_scores(role, info, query)
        if not scores:
            raise DocumentError(f"document {filename!r} has no text layer and no image embeddings on this server, "
                                "so it cannot be searched; fetch its pages by index", "no_ranking")
        fused = fuse(list(scores.values()))
        return SearchResult([p for p in fused if p <= info.pages_done][:k], scores)

    def _vector_scores(self, role: str, info: DocumentInfo, query: str) -> dict[int, float]:
        """Cosine similarity of each candidate page (its best passage, for text), exact, within the document."""
        encoder = self.encoders[role]
        vectors = self._vectors.get((role, info.filename, info.sha256, info.pages_done),
                                    lambda: self._load_vectors(role, info.filename))
        embedding = encoder.encode_texts([query])
        candidates = min(CANDIDATES, info.pages_done) if role == "clip" else CANDIDATES
        return vectors.best_pages(embedding[0], max(1, candidates))

    def _load_vectors(self, role: str, filename: str) -> DocumentVectors:
        collection = self.chroma.collection(role, self.encoders[role])
        found = collection.get(where={"source": filename}, include=["embeddings", "metadatas"])
        rows = [(e, int(m["page"])) for e, m in zip(found["embeddings"], found["metadatas"], strict=True)
                if m and "page" in m]
        if not rows:
            return DocumentVectors.of(np.zeros((0, 1), np.float32), np.zeros(0, np.int64))
        return DocumentVectors.of(np.stack([np.asarray(e, np.float32) for e, _ in rows]),
                                  np.array([p for _, p in rows]))

    def _lexical_index(self, info: DocumentInfo) -> LexicalIndex:
        key = (info.filename, info.sha256, info.pages_done)
        with self._lexical_lock:
            if key in self._lexical:
                self._lexical.move_to_end(key)
                return self._lexical[key]
        index = LexicalIndex(self.files.read_texts(info.filename)[:info.pages_done])
        with self._lexical_lock:
            self._lexical[key] = index
            while len(self._lexical) > 64:
                self._lexical.popitem(last=False)
        return index
