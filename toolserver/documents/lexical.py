"""The lexical ranking: BM25 (bm25s) over page texts, with a tokenizer made for technical documents.

Manuals are full of identifiers (`read.table`, `set_font`, `setLineWidth`, `--enable-R-shlib`) that a
plain whitespace tokenizer either glues to punctuation or a subword model splits beyond recognition.
Each identifier is kept whole *and* split into its parts, so `read.table` matches a question about
"read table" as well as one quoting the identifier. Words are Porter-stemmed ("plotting" finds "plots").
The tokenizer is written here because no library splits code identifiers this way; BM25 itself is bm25s.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

# Imported with this module (at start-up, on the main thread), not on a search's first call: there it could meet the
# start-up check of the validators' punkt importing nltk in another thread, and the two imports deadlocked.
from nltk.stem.porter import PorterStemmer

_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[._:\-/][A-Za-z0-9]+)*")
_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "does", "for", "from", "has", "have",
    "how", "i", "if", "in", "into", "is", "it", "its", "of", "on", "or", "that", "the", "their", "then", "there",
    "these", "they", "this", "to", "was", "what", "when", "where", "which", "while", "who", "why", "will", "with",
    "you", "your",
})


@lru_cache(maxsize=1)
def _stemmer() -> PorterStemmer:
    return PorterStemmer()


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    return _stemmer().stem(word) if word.isalpha() else word


def tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    for match in _TOKEN.finditer(text):
        whole = match.group()
        parts = [p.lower() for p in _PART.findall(whole)]
        lowered = whole.lower()
        if len(parts) > 1:
            tokens.append(lowered)  # the identifier as written
        for part in parts:
            if part not in _STOPWORDS and (len(part) > 1 or part.isdigit()):
                tokens.append(_stem(part))
    return tokens


class LexicalIndex:
    """BM25 over one document's pages, numbered from 1."""

    def __init__(self, page_texts: list[str]):
        import bm25s

        self.pages = len(page_texts)
        corpus = [tokenize(t) or ["\0empty"] for t in page_texts]
        self.has_text = any(t.strip() for t in page_texts)
        self._bm25 = bm25s.BM25()
        self._bm25.index(corpus, show_progress=False)

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every page that matches at least one query term, by 1-based page number."""
        tokens = [t for t in tokenize(query) if t in self._bm25.vocab_dict]
        if not tokens or not self.has_text:
            return {}
        scores = np.asarray(self._bm25.get_scores(tokens))
        return {int(i) + 1: float(scores[i]) for i in np.flatnonzero(scores > 0)}

    def rank(self, query: str) -> list[int]:
        scores = self.scores(query)
        return sorted(scores, key=lambda p: (-scores[p], p))
