"""A node's Chroma server starts on the documents' first use, not with the node (node/services.py `NodeChroma`,
documents/chroma.py `NodeChromaLink`). The node's workers are modelled as Cores sharing one node directory, the
supervisor as a thread that ticks the real `NodeChroma` as the supervisor's loop does; the server is a real
`chroma run`."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs_helpers import make_pdf
from tests.test_document_tools import SEARCH, call, doc_settings
from toolserver.core import Core
from toolserver.documents.chroma import NodeChromaLink
from toolserver.documents.sources import DocumentError
from toolserver.node import services
from toolserver.node.services import NodeChroma

pytestmark = pytest.mark.skipif(not NodeChroma.wanted(), reason="the docs extra (chromadb and its `chroma` program)")


class Supervisor:
    """The node supervisor's part: `NodeChroma.tick` every 0.1 s until stopped."""

    def __init__(self, chroma: NodeChroma):
        self.chroma = chroma
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopped.wait(0.1):
            self.chroma.tick()

    def __enter__(self) -> Supervisor:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(10)
        self.chroma.stop()


@pytest.fixture
def node_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "node"
    directory.mkdir()
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.slow
def test_the_server_starts_on_the_first_document_and_both_workers_use_it(tmp_path: Path, node_dir: Path):
    shared = tmp_path / "shared-docs"
    chroma = NodeChroma(shared / "chroma", node_dir / "chroma")
    with Supervisor(chroma):
        first = Core(doc_settings(tmp_path / "a", documents_dir=shared, node_dir=node_dir))
        second = Core(doc_settings(tmp_path / "b", documents_dir=shared, node_dir=node_dir))
        assert chroma.process is None and first.documents.status()["store"].startswith("the node's Chroma server")
        unknown = call(second, "default", SEARCH, {"filename": "manual", "query": "Ctrl-L"})
        assert unknown.error.code == "unknown_document" and chroma.process is None  # no vector read: none started
        first.documents.ingest(make_pdf(tmp_path / "manual.pdf"))  # the first embedding asks for the server
        assert chroma.ready and chroma.alive() and (node_dir / "chroma" / "url").read_text() == chroma.url
        result = call(second, "default", SEARCH, {"filename": "manual", "query": "Ctrl-L keyboard shortcuts"})
        assert result.ok and result.meta["pages"][0] == 6  # ingested by one worker, searched by the other
        assert second.documents.status()["store"] == chroma.url
        assert (shared / "chroma" / "chroma.sqlite3").exists()  # the server keeps the library's own files
    assert not chroma.alive()


def test_a_server_that_cannot_start_fails_the_document_call_and_is_tried_again(node_dir: Path, tmp_path: Path,
                                                                               monkeypatch):
    monkeypatch.setattr(services, "_chroma_program", lambda: shutil.which("false"))  # exits at once
    chroma = NodeChroma(tmp_path / "chroma-data", node_dir / "chroma")
    link = NodeChromaLink(node_dir / "chroma", timeout_s=30)
    with Supervisor(chroma):
        with pytest.raises(DocumentError, match="could not start: it exited at its start") as failed:
            link.url()
        assert failed.value.code == "vector_store_unavailable" and chroma.process is None
        assert not (node_dir / "chroma" / "wanted").exists() and chroma.alive()  # the node goes on serving
        monkeypatch.setattr(services, "_chroma_program", lambda: None)  # not even the program now
        with pytest.raises(DocumentError, match="without its `chroma` program"):
            link.url()


def test_a_link_that_gets_no_answer_says_so_in_its_time(node_dir: Path):
    (node_dir / "chroma").mkdir()
    with pytest.raises(DocumentError, match="did not start within 1 s"):
        NodeChromaLink(node_dir / "chroma", timeout_s=1).url()  # no supervisor ticks
    assert (node_dir / "chroma" / "wanted").exists()
