"""The in-memory per-document vectors: exact cosine ranking, best record per page, bounded cache."""

from __future__ import annotations

import numpy as np

from toolserver.documents.vectors import DocumentVectors, VectorCache


def test_best_pages_is_the_exact_cosine_top_k_with_each_pages_best_record():
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(500, 24)).astype(np.float32) * rng.uniform(0.5, 3, size=(500, 1))
    pages = rng.integers(1, 80, size=500)
    query = rng.normal(size=24).astype(np.float32)
    got = DocumentVectors.of(embeddings, pages).best_pages(query, 100)

    cos = embeddings @ query / (np.linalg.norm(embeddings, axis=1) * np.linalg.norm(query))
    top = np.argsort(-cos)[:100]
    expected: dict[int, float] = {}
    for i in top:
        expected.setdefault(int(pages[i]), float(cos[i]))
    assert list(got) == list(expected)  # same pages in the same order, best first
    assert np.allclose([got[p] for p in got], [expected[p] for p in expected], atol=1e-5)


def test_fewer_records_than_candidates_and_an_empty_document():
    vectors = DocumentVectors.of(np.eye(3, dtype=np.float32), np.array([1, 2, 2]))
    assert vectors.best_pages(np.array([0, 1, 0.1], np.float32), 100) == {2: vectors.best_pages(
        np.array([0, 1, 0.1], np.float32), 1)[2], 1: 0.0}
    empty = DocumentVectors.of(np.zeros((0, 4), np.float32), np.zeros(0, np.int64))
    assert empty.best_pages(np.ones(4, np.float32), 5) == {}


def test_the_cache_loads_once_is_bounded_and_forgets_a_document():
    loads = []

    def loader(name: str, records: int):
        def load():
            loads.append(name)
            return DocumentVectors.of(np.ones((records, 8), np.float32), np.arange(1, records + 1))
        return load

    one_doc = DocumentVectors.of(np.ones((10, 8), np.float32), np.arange(1, 11)).nbytes
    cache = VectorCache(max_bytes=2 * one_doc)
    for _ in range(3):
        cache.get(("text", "a", "sha", 10), loader("a", 10))
    assert loads == ["a"]
    cache.get(("text", "b", "sha", 10), loader("b", 10))
    cache.get(("text", "c", "sha", 10), loader("c", 10))  # over the bound: "a" (least recent) goes
    cache.get(("text", "a", "sha", 10), loader("a", 10))
    assert loads == ["a", "b", "c", "a"]
    cache.forget("a")
    cache.get(("text", "a", "sha", 10), loader("a", 10))
    assert loads[-1] == "a" and len(loads) == 5
    huge = cache.get(("text", "h", "sha", 100), loader("h", 100))  # larger than the cache: served, not kept
    assert len(huge.pages) == 100
