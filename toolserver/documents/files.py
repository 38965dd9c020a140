"""The library's files under the documents directory: manifests (`meta/{filename}.json`), page texts
(`texts/{filename}.jsonl`) and uploads, each written atomically (a temporary file, then a rename)."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from toolserver.models import DocumentInfo


class LibraryFiles:
    def __init__(self, root: Path):
        self.meta_dir, self.texts_dir, self.uploads_dir = root / "meta", root / "texts", root / "uploads"

    def meta_path(self, filename: str) -> Path:
        return self.meta_dir / f"{filename}.json"

    def meta_files(self) -> list[Path]:
        return sorted(self.meta_dir.glob("*.json")) if self.meta_dir.is_dir() else []

    def read_manifest(self, filename: str) -> DocumentInfo | None:
        path = self.meta_path(filename)
        try:
            info = DocumentInfo.model_validate_json(path.read_text())
        except FileNotFoundError:
            return None
        if info.status in ("ingesting", "queued"):  # the process that was ingesting it is gone
            info.status = "partial"
        return info

    def write_manifest(self, info: DocumentInfo) -> None:
        info.updated_at = time.time()
        self.meta_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.meta_path(info.filename), info.model_dump_json(indent=1).encode())

    def read_texts(self, filename: str) -> list[str]:
        """The page texts in page order, up to the first page missing (a line cut short by a crash is skipped)."""
        path = self.texts_dir / f"{filename}.jsonl"
        if not path.exists():
            return []
        by_page: dict[int, str] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(json.JSONDecodeError, KeyError):
                row = json.loads(line)
                by_page[int(row["page"])] = row["text"]
        out = []
        for number in range(1, len(by_page) + 1):
            if number not in by_page:
                break
            out.append(by_page[number])
        return out

    def write_texts(self, filename: str, texts: list[str]) -> None:
        self.texts_dir.mkdir(parents=True, exist_ok=True)
        lines = "".join(json.dumps({"page": i + 1, "text": t}) + "\n" for i, t in enumerate(texts))
        atomic_write(self.texts_dir / f"{filename}.jsonl", lines.encode())

    def save_upload(self, data: bytes, name: str) -> Path:
        self.uploads_dir.mkdir(parents=True, exist_ok=True)
        path = self.uploads_dir / f"{time.time_ns()}-{name}"
        atomic_write(path, data)
        return path


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
