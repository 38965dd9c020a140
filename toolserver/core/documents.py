"""The document library behind the core (global, not per session): ingest, list, look up, delete, with the
library's own errors turned into protocol errors whose status says what kind of problem it is."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from toolserver.config import Settings
from toolserver.documents.corpus import CorpusHit, search_corpus
from toolserver.documents.library import DocumentLibrary
from toolserver.documents.sources import DocumentError, check_filename, filename_from_path
from toolserver.errors import BadRequest, Conflict, NotFound, ServiceError, TooLarge, Unavailable
from toolserver.inputs import resolve_allowed_path
from toolserver.models import DocumentInfo


class Documents:
    def __init__(self, library: DocumentLibrary, settings: Settings):
        self.library = library
        self.settings = settings

    async def ingest(self, *, data: bytes | None = None, upload_name: str = "document.pdf", path: str | None = None,
                     filename: str | None = None, wait: bool = False) -> DocumentInfo:
        """Check the document now and ingest it in the background (or wait for the end with `wait`)."""
        library = self.library
        with document_errors():
            if data is not None:
                if len(data) > self.settings.doc_max_upload_bytes:
                    raise TooLarge(f"a document upload is limited to {self.settings.doc_max_upload_bytes} bytes")
                filename = check_filename(filename) if filename else filename_from_upload(upload_name)
                source = await asyncio.to_thread(library.save_upload, data, f"{filename}.pdf")
                remove_after = True
            else:
                source = resolve_allowed_path(path or "", self.settings.allowed_roots)
                remove_after = False
            info, future = await asyncio.to_thread(library.submit, source, filename, remove_after=remove_after)
            if not wait:
                return info
            return await asyncio.wrap_future(future)

    def list(self) -> list[DocumentInfo]:
        return self.library.list()

    async def get(self, filename: str) -> DocumentInfo:
        with document_errors():
            return await asyncio.to_thread(self.library.get, filename)

    async def search_pages(self, queries: Sequence[str], top_k: int,
                           only: str | None = None) -> builtins.list[builtins.list[CorpusHit]]:
        """Each query's `top_k` best pages of the whole library (or of the document `only`), off the event loop."""
        with document_errors():
            return await asyncio.to_thread(
                lambda: [search_corpus(self.library, query, top_k, only=only) for query in queries])

    async def delete(self, filename: str) -> None:
        with document_errors():
            await asyncio.to_thread(self.library.delete, filename)


@contextlib.contextmanager
def document_errors() -> Iterator[None]:
    """Library errors as protocol errors: the HTTP status says what kind of problem it is."""
    try:
        yield
    except DocumentError as exc:
        kinds: dict[str, type[ServiceError]] = {"unknown_document": NotFound, "not_found": NotFound,
                                                "ingest_in_progress": Conflict, "too_many_pages": TooLarge,
                                                "vector_store_unavailable": Unavailable}
        raise kinds.get(exc.code, BadRequest)(exc.message, code=exc.code) from None


def filename_from_upload(name: str) -> str:
    try:
        return filename_from_path(Path(Path(name).name or "document.pdf"))
    except DocumentError:
        return "document"
