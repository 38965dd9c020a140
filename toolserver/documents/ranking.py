"""How a document's pages are ranked: page texts cut into passages for the dense text model, and the rankings
(BM25, text embeddings, CLIP) fused by averaging their min-max-normalised scores."""

from __future__ import annotations

from dataclasses import dataclass

PASSAGE_WORDS = 160  # about 210 word pieces: inside all-MiniLM-L6-v2's 256-token window
PASSAGE_STRIDE = 120
CANDIDATES = 100  # records fetched from each vector ranking before fusion


@dataclass
class SearchResult:
    pages: list[int]
    scores: dict[str, dict[int, float]]  # each ranking alone: page -> score (for meta and the benchmark)

    @property
    def rankings(self) -> dict[str, list[int]]:
        return {name: ranked(scores) for name, scores in self.scores.items()}


def passages(text: str) -> list[str]:
    words = text.split()
    if not words:
        return []
    out = []
    for start in range(0, len(words), PASSAGE_STRIDE):
        out.append(" ".join(words[start:start + PASSAGE_WORDS]))
        if start + PASSAGE_WORDS >= len(words):
            break
    return out


def fuse(scored: list[dict[int, float]]) -> list[int]:
    """Convex combination of min-max normalised scores, equal weights; ties go to the lower page number.

    Scores rather than ranks, so the size of a lead counts: when BM25 finds an identifier on one page, that
    page's score stands far above the rest and stays first unless the dense ranking strongly disagrees.
    With equal weights (nothing tuned) this beats reciprocal-rank fusion on the benchmark questions
    (BENCHMARKS.md), as Bruch et al. (2023, "An analysis of fusion functions for hybrid retrieval") found.
    """
    total: dict[int, float] = {}
    for scores in scored:
        for page, value in normalise(scores).items():
            total[page] = total.get(page, 0.0) + value / len(scored)
    return ranked(total)


def normalise(scores: dict[int, float]) -> dict[int, float]:
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    return {p: (v - low) / (high - low) if high > low else 1.0 for p, v in scores.items()}


def ranked(scores: dict[int, float]) -> list[int]:
    return sorted(scores, key=lambda p: (-scores[p], p))


def first_occurrences(pages: list[int]) -> list[int]:
    return list(dict.fromkeys(pages))  # dicts keep insertion order: each page where it first occurs
