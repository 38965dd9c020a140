"""The ORS endpoint's tasks: a user's JSONL rows (a question, its images, the ground truth), by profile and split.

`ors_tasks` names either a directory of `<profile>.<split>.jsonl` files, or one JSONL file whose rows carry their
`split` (default `train`) and optionally a `profile` (default: every profile serves the row). A row:
`{"question": str, "images": [path | base64 | data URI, ...], "ground_truth": any, "id": str?, "extra": {...}?}`;
a path is read relative to the row's file. A task spec (what `list_tasks` hands out and `/create` takes back) is
`{"split", "index"}` into these rows, or a whole row given inline."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolserver.errors import BadRequest, NotFound

SPLIT_TYPES = ("train", "validation", "test")


@dataclass(frozen=True)
class Task:
    """One row: the prompt's question and images (base64 or data URIs), and what the reward reads."""

    question: str
    images: tuple[str, ...] = ()
    ground_truth: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


def task_of_row(row: Any, base: Path | None, where: str) -> Task:
    """A row as a task, its image paths read (relative to `base`); a clear error naming `where` otherwise."""
    if not isinstance(row, dict):
        raise BadRequest(f"{where}: a task is a JSON object, not {type(row).__name__}")
    question, images = row.get("question", ""), row.get("images", [])
    if not isinstance(question, str):
        raise BadRequest(f"{where}: `question` must be a string")
    if isinstance(images, str):
        images = [images]
    if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
        raise BadRequest(f"{where}: `images` must be a list of paths, base64 strings or data URIs")
    extra = row.get("extra", {})
    if not isinstance(extra, dict):
        raise BadRequest(f"{where}: `extra` must be an object")
    return Task(question=question, images=tuple(_image(i, base, where) for i in images),
                ground_truth=row.get("ground_truth"), extra=extra,
                id=None if row.get("id") is None else str(row["id"]))


def _image(value: str, base: Path | None, where: str) -> str:
    if value.startswith("data:"):
        return value
    if base is not None:
        path = Path(value) if Path(value).is_absolute() else base / value
        if path.is_file():
            return base64.b64encode(path.read_bytes()).decode()
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: image {value[:80]!r} is neither a readable file nor base64") from None
    return value


class TaskSets:
    """The rows of `ors_tasks`, read once: `splits(profile)`, `tasks(profile, split)`, `task(profile, spec)`."""

    def __init__(self, source: str | None):
        self.source = source
        self._rows: dict[tuple[str | None, str], list[tuple[dict[str, Any], Path]]] | None = None

    def _load(self) -> dict[tuple[str | None, str], list[tuple[dict[str, Any], Path]]]:
        if self._rows is not None:
            return self._rows
        rows: dict[tuple[str | None, str], list[tuple[dict[str, Any], Path]]] = {}
        if self.source:
            root = Path(self.source).expanduser()
            if root.is_dir():
                for path in sorted(root.glob("*.jsonl")):
                    profile, _, split = path.stem.rpartition(".")
                    if not profile:
                        raise BadRequest(f"ORS tasks: {path.name} is not named <profile>.<split>.jsonl")
                    rows.setdefault((profile, split), []).extend((r, path.parent) for r in _read(path))
            elif root.is_file():
                for row in _read(root):
                    owner = None if row.get("profile") is None else str(row["profile"])
                    rows.setdefault((owner, str(row.get("split", "train"))), []).append((row, root.parent))
            else:
                raise BadRequest(f"ORS tasks: {root} is neither a directory nor a file (setting ors_tasks)")
        self._rows = rows
        return rows

    def splits(self, profile: str) -> list[str]:
        return sorted({split for (owner, split) in self._load() if owner in (None, profile)})

    def _split_rows(self, profile: str, split: str) -> list[tuple[dict[str, Any], Path]]:
        loaded = self._load()
        if split not in self.splits(profile):
            raise BadRequest(f"no split {split!r} for {profile!r}; splits: {self.splits(profile)}",
                             code="invalid_split")
        return loaded.get((profile, split), []) + loaded.get((None, split), [])

    def tasks(self, profile: str, split: str) -> list[dict[str, Any]]:
        """The task specs of a split, in order: `{"split", "index", "id"}`."""
        return [{"split": split, "index": i, **({"id": str(r["id"])} if r.get("id") is not None else {})}
                for i, (r, _) in enumerate(self._split_rows(profile, split))]

    def task(self, profile: str, spec: dict[str, Any]) -> Task:
        """The task a spec names (`{"split", "index"}`), or the inline row a spec is (`{"question", ...}`)."""
        if "split" in spec and "index" in spec and "question" not in spec:
            rows, index = self._split_rows(profile, str(spec["split"])), spec["index"]
            if not isinstance(index, int) or not 0 <= index < len(rows):
                raise NotFound(f"no task {index!r} in split {spec['split']!r} ({len(rows)} tasks)",
                               code="invalid_index")
            row, base = rows[index]
            return task_of_row(row, base, f"task {spec['split']}[{index}]")
        return task_of_row(spec, None, "task_spec")


def _read(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"ORS tasks: {path.name} line {number} is not JSON: {exc}") from None
        if not isinstance(row, dict):
            raise BadRequest(f"ORS tasks: {path.name} line {number} is not a JSON object")
        rows.append(row)
    return rows


def split_type(name: str) -> str:
    """The standard's split type: the name where it is one, `validation` otherwise (as `openreward`'s server)."""
    return name if name in SPLIT_TYPES else "validation"
