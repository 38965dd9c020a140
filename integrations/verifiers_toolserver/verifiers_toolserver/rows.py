"""A user's dataset as toolserver's ORS endpoint reads it (toolserver/core/ors_tasks.py, docs/ors.md): either a
directory of `<profile>.<split>.jsonl` files, or one JSONL file whose rows carry their `split` (default `train`)
and optionally a `profile`. A row: `{"question": str, "images": [path | base64 | data URI, ...], "ground_truth":
any, "id": str?, "extra": {...}?}`; a path is read relative to the row's file. Every image becomes a data URI, the
form a chat prompt and toolserver's `POST /v1/sessions` both take."""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

MIME = {b"\x89PNG": "image/png", b"\xff\xd8\xff": "image/jpeg", b"GIF8": "image/gif", b"RIFF": "image/webp"}


def read_rows(source: str | Path, profile: str, split: str) -> list[dict[str, Any]]:
    """The rows of `split` for `profile`, in file order, each with its images as data URIs."""
    root = Path(source).expanduser()
    found: list[tuple[dict[str, Any], Path]] = []
    if root.is_dir():
        for path in sorted(root.glob("*.jsonl")):
            owner, _, part = path.stem.rpartition(".")
            if not owner:
                raise ValueError(f"{path.name} is not named <profile>.<split>.jsonl")
            if owner == profile and part == split:
                found += [(row, path) for row in _read(path)]
    elif root.is_file():
        found = [(row, root) for row in _read(root)
                 if str(row.get("split", "train")) == split and row.get("profile") in (None, profile)]
    else:
        raise ValueError(f"dataset {root} is neither a directory nor a JSONL file")
    return [_row(row, path.parent, f"{path.name} row {number}") for number, (row, path) in enumerate(found, 1)]


def _read(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path.name} line {number} is not JSON: {exc}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path.name} line {number} is not a JSON object")
        rows.append(row)
    return rows


def _row(row: dict[str, Any], base: Path, where: str) -> dict[str, Any]:
    question, images, extra = row.get("question", ""), row.get("images", []), row.get("extra", {})
    if isinstance(images, str):
        images = [images]
    if not isinstance(question, str):
        raise ValueError(f"{where}: `question` must be a string")
    if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
        raise ValueError(f"{where}: `images` must be a list of paths, base64 strings or data URIs")
    if not isinstance(extra, dict):
        raise ValueError(f"{where}: `extra` must be an object")
    return {"question": question, "images": [_data_uri(i, base, where) for i in images],
            "ground_truth": row.get("ground_truth"), "extra": extra,
            "id": None if row.get("id") is None else str(row["id"])}


def _data_uri(value: str, base: Path, where: str) -> str:
    if value.startswith("data:"):
        return value
    path = Path(value) if Path(value).is_absolute() else base / value
    if len(value) < 4096 and path.is_file():
        data = path.read_bytes()
    else:
        try:
            data = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{where}: image {value[:80]!r} is neither a readable file nor base64") from None
    mime = next((m for magic, m in MIME.items() if data.startswith(magic)), "application/octet-stream")
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"
