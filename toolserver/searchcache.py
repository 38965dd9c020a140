"""Cached search results a user provides, replayed offline (MMSearch-R1's and DeepEyesV2's searches).

The image-search format is FVQA's, as the MMSearch-R1 authors ship it and DeepEyesV2 reads it
(`fvqa_train_image_search_results_cache.json`): one JSON object, keyed by the row's id, each entry
`{"tool_returned_web_title": [title, ...], "cached_images_path": [path or null, ...]}`, the two lists in the search
engine's order. A path is read as written when absolute, else under the file's directory (FVQA ships the paths
relative to its image folder; DeepEyesV2's `cache_convert.py` makes them absolute). As DeepEyesV2 reads it, a result
whose image is null or missing is skipped with its title.

Text search has no shipped cache; its entries sit beside the image entries, keyed by the query as the model wrote it,
each a list of results `{"title", "link", "snippet", "date"?}` (the fields DeepEyesV2's text search renders;
MMSearch-R1 renders the link and the snippet, its summary).

`search_cache` (a setting) names one such JSON file or a directory of them (every `*.json`, merged in name order,
as DeepEyesV2 merges its list of cache files; a later file's key wins). A session may pick one file of that
directory by name (its text `search_cache`: `<name>.json`); it never names a path. Everything is checked when it
loads, and a malformed entry is refused naming the file, the key and what is wrong.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

IMAGE_FIELDS = ("tool_returned_web_title", "cached_images_path")
TEXT_FIELDS = ("title", "link", "snippet")
CACHE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")  # a session's choice of one file of the directory


class SearchCacheError(ValueError):
    """A cache that does not load or check (the message names the file and the entry)."""


@dataclass(frozen=True)
class TextResult:
    title: str
    link: str
    snippet: str | None = None
    date: str | None = None


@dataclass
class SearchCache:
    """The loaded cache: image-search entries by row id, text-search entries by query."""

    source: Path
    images: dict[str, list[tuple[str, Path | None]]] = field(default_factory=dict)
    texts: dict[str, list[TextResult]] = field(default_factory=dict)

    def image_results(self, key: str) -> list[tuple[str, Path]] | None:
        """(title, image file) of each cached result whose image exists, in order; None when the key is not cached."""
        entry = self.images.get(key)
        if entry is None:
            return None
        return [(title, path) for title, path in entry if path is not None and path.is_file()]

    def text_results(self, query: str) -> list[TextResult] | None:
        """The cached results of the query as written, else of the query stripped; None when neither is cached."""
        found = self.texts.get(query)
        return found if found is not None else self.texts.get(query.strip())

    def describe(self) -> dict[str, Any]:
        return {"source": str(self.source), "image_entries": len(self.images), "text_entries": len(self.texts)}


def _image_entry(where: str, base: Path, value: dict[str, Any]) -> list[tuple[str, Path | None]]:
    titles, paths = value.get(IMAGE_FIELDS[0]), value.get(IMAGE_FIELDS[1])
    if not isinstance(titles, list) or not isinstance(paths, list):
        raise SearchCacheError(f"{where}: {IMAGE_FIELDS[0]!r} and {IMAGE_FIELDS[1]!r} must both be lists")
    if len(titles) != len(paths):
        raise SearchCacheError(f"{where}: {len(titles)} titles but {len(paths)} image paths")
    out: list[tuple[str, Path | None]] = []
    for i, (title, path) in enumerate(zip(titles, paths, strict=True)):
        if not isinstance(title, str):
            raise SearchCacheError(f"{where}: title {i} is {type(title).__name__}, not a string")
        if path is not None and not isinstance(path, str):
            raise SearchCacheError(f"{where}: image path {i} is {type(path).__name__}, not a string or null")
        out.append((title, (base / path) if path else None))
    return out


def _text_entry(where: str, value: list[Any]) -> list[TextResult]:
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise SearchCacheError(f"{where}: result {i} is {type(item).__name__}, not an object")
        for name in (*TEXT_FIELDS, "date"):
            if item.get(name) is not None and not isinstance(item[name], str):
                raise SearchCacheError(f"{where}: result {i}'s {name!r} is not a string")
        if not isinstance(item.get("title"), str) or not isinstance(item.get("link"), str):
            raise SearchCacheError(f"{where}: result {i} needs a 'title' and a 'link'")
        out.append(TextResult(item["title"], item["link"], item.get("snippet"), item.get("date")))
    return out


def _load_file(path: Path, cache: SearchCache) -> None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SearchCacheError(f"search cache {path}: not readable as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SearchCacheError(f"search cache {path}: the top level must be an object keyed by row id or query")
    for key, value in data.items():
        where = f"search cache {path}, entry {key!r}"
        if isinstance(value, dict) and any(name in value for name in IMAGE_FIELDS):
            cache.images[key] = _image_entry(where, path.parent, value)
        elif isinstance(value, list):
            cache.texts[key] = _text_entry(where, value)
        else:
            raise SearchCacheError(f"{where}: neither an image-search entry ({', '.join(IMAGE_FIELDS)}) nor a list "
                                   "of text-search results")


def load_search_cache(path: Path) -> SearchCache:
    """The cache at `path` (a JSON file, or a directory of them), checked whole."""
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise SearchCacheError(f"search cache {path}: the directory holds no *.json file")
    elif path.is_file():
        files = [path]
    else:
        raise SearchCacheError(f"search cache {path}: no such file or directory")
    cache = SearchCache(path)
    for file in files:
        _load_file(file, cache)
    return cache


class SearchCacheHolder:
    """The server's cache, loaded on first use (and again when a file of it changes). `get(name)` is the whole
    cache, or with a name (a session's `search_cache` text) the one file `<name>.json` of the cache directory;
    it raises `SearchCacheError` when none is configured, the name is not one, or the cache does not load."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._loaded: dict[Path, tuple[tuple[tuple[str, int], ...], SearchCache]] = {}

    @staticmethod
    def _stamp(path: Path) -> tuple[tuple[str, int], ...]:
        files = sorted(path.glob("*.json")) if path.is_dir() else [path]
        return tuple((str(f), f.stat().st_mtime_ns if f.exists() else -1) for f in files)

    def _chosen(self, name: str | None) -> Path:
        if self.path is None:
            raise SearchCacheError("no search cache is configured on this server (set SEARCH_CACHE to the cache's "
                                   "JSON file or directory)")
        if name is None:
            return self.path
        if not self.path.is_dir():
            raise SearchCacheError(f"the session names the search cache {name!r}, but SEARCH_CACHE is one file, not "
                                   "a directory of caches")
        if not CACHE_NAME.fullmatch(name):
            raise SearchCacheError(f"search cache name {name!r}: letters, digits, '.', '_' and '-' only, not "
                                   "starting with '.'")
        chosen = self.path / f"{name}.json"
        if not chosen.is_file():
            raise SearchCacheError(f"search cache {name!r}: the cache directory holds no {name}.json")
        return chosen

    def get(self, name: str | None = None) -> SearchCache:
        path = self._chosen(name)
        with self._lock:
            stamp = self._stamp(path)
            loaded = self._loaded.get(path)
            if loaded is None or loaded[0] != stamp:
                loaded = self._loaded[path] = (stamp, load_search_cache(path))
            return loaded[1]
