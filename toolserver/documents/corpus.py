"""Search across the whole library, for retrievers that rank every page of a corpus (VRAG-RL's search engine).

Each document is ranked as `DocumentLibrary.search` ranks it (BM25 over its text layer, dense text, CLIP; what is
installed), keeping each ranking's raw scores; the scores of one ranking over all documents are then fused as one
document's are (`ranking.fuse`: min-max normalised over the corpus, averaged over the rankings). A document that
cannot be searched on this server (no text layer and no embeddings here) is left out, as are documents still
queued. Pages come back best first, each with its fused score and where its image is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toolserver.documents.ranking import normalise
from toolserver.documents.sources import DocumentError

if TYPE_CHECKING:
    from toolserver.documents.library import DocumentLibrary

CORPUS_CANDIDATES = 50  # pages taken from each document before the corpus-wide fusion


@dataclass(frozen=True)
class CorpusHit:
    filename: str
    page: int  # 1-based
    score: float  # the fused score, in [0, 1]
    path: Path  # the page image as stored


def search_corpus(library: DocumentLibrary, query: str, k: int, *, only: str | None = None) -> list[CorpusHit]:
    """The `k` best pages of the library (or of the document `only`) for `query`."""
    names = [only] if only is not None else [d.filename for d in library.list() if d.pages_done > 0]
    by_ranking: dict[str, dict[int, float]] = {}
    where: list[tuple[str, int]] = []
    for name in names:
        try:
            result = library.search(name, query, CORPUS_CANDIDATES)
        except DocumentError:
            if only is not None:
                raise
            continue
        ids: dict[int, int] = {}
        for ranking, scores in result.scores.items():
            merged = by_ranking.setdefault(ranking, {})
            for page, score in scores.items():
                if page not in ids:
                    ids[page] = len(where)
                    where.append((name, page))
                merged[ids[page]] = score
    total: dict[int, float] = {}
    for scores in by_ranking.values():
        for key, value in normalise(scores).items():
            total[key] = total.get(key, 0.0) + value / len(by_ranking)
    best = sorted(total, key=lambda key: (-total[key], where[key]))
    hits = []
    for key in best:
        filename, page = where[key]
        path = next((p for p in library.page_candidates(filename, page) if p.exists()), None)
        if path is not None:
            hits.append(CorpusHit(filename, page, total[key], path))
        if len(hits) == k:
            break
    return hits
