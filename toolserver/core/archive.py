"""The trajectory archive: what a finished session's model saw, kept after the session is gone, for the inspector.

When a session ends (released, expired, evicted), the store hands it over before it forgets it: its call log
becomes a trajectory (as `GET /v1/sessions/{id}/trajectory` showed it), written with a JPEG thumbnail of each image
(at most `THUMBNAIL_SIDE` px a side, the first `MAX_IMAGES`) to `<archive_dir>/<session id>/`, in one background
thread at a lower CPU priority (a few ms of resizing and JPEG per image, off the event loop and behind the serving
threads; past `MAX_PENDING` sessions waiting, a session is kept without thumbnails rather than its pixels held).
The newest `archive_max_sessions` are kept (older ones are deleted as new ones arrive; 0: no archive).
A finished session keeps its owner: with API keys, only its key (or an operator) lists and reads it.

Only a store that holds a session's pixels and calls in this process hands it over: the in-memory store (one
replica, the default). A Redis-backed session that Redis expires is not seen ending (see docs/user-facing.md).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from toolserver.errors import NotFound
from toolserver.imaging import ARCHIVE_THUMBNAIL_SIDE, archive_preview
from toolserver.memorymap import ImageEntry, SessionMap
from toolserver.models import CallRecord, Trajectory, TrajectoryImage
from toolserver.ownership import may_see

log = logging.getLogger("toolserver.archive")
THUMBNAIL_SIDE = ARCHIVE_THUMBNAIL_SIDE
MAX_IMAGES = 200
MAX_PENDING = 32
FILE_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")  # an image key as the API takes one: a safe file name
Outcome = Literal["released", "expired", "evicted", "stopped"]


class FinishedSession(BaseModel):
    session_id: str
    profile: str
    outcome: Outcome = Field(description="How it ended: released (DELETE), expired (idle past its ttl), evicted "
                                         "(memory pressure), stopped (the server stopped while it was live)")
    images: int
    calls: int
    failed_calls: int = Field(description="Calls that answered ok:false")
    created_at: float = Field(description="Unix time the session was created")
    ended_at: float = Field(description="Unix time it ended")
    owner: str | None = Field(default=None, exclude=True)


class FinishedSessionList(BaseModel):
    sessions: list[FinishedSession] = Field(description="Newest first (by the time each ended)")
    total: int = Field(description="How many match the filters")
    offset: int
    limit: int


class FinishedTrajectory(Trajectory):
    """A finished session's trajectory; its images are thumbnails (`/v1/trajectories/{id}/images/{key}`)."""

    outcome: Outcome
    created_at: float
    ended_at: float


def _outcome(reason: str | None) -> Outcome:
    if reason is None:
        return "released"
    return "evicted" if "evicted" in reason else "stopped" if "stopped" in reason else "expired"


def _thumbnail(entry: ImageEntry) -> bytes:
    """Its preview where the store made one at the release (`ImageEntry.preview`), else made from its pixels now."""
    image = entry.preview if entry.preview is not None else archive_preview(entry.pixels, THUMBNAIL_SIDE)
    out = io.BytesIO()
    image.convert("RGB").save(out, format="JPEG", quality=85)
    return out.getvalue()


def _lower_priority() -> None:
    """The writer thread yields the CPU to the serving threads (Linux niceness is per thread)."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


class TrajectoryArchive:
    """Finished sessions on disk, with an index in memory (read from disk on first use)."""

    def __init__(self, root: Path, max_sessions: int):
        self.root = root
        self.max_sessions = max_sessions
        self._index: dict[str, FinishedSession] | None = None
        self._index_changed: int | None = None  # the folder's mtime when the index was read
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolserver-archive",
                                          initializer=_lower_priority)
        self._pending = 0  # sessions handed over and not yet written (touched on the event loop and the writer)

    @property
    def enabled(self) -> bool:
        return self.max_sessions > 0

    # -- writing ------------------------------------------------------------------------------------
    def session_ended(self, session: SessionMap, reason: str | None, records: Sequence[str], dropped: int) -> None:
        """Called by the store as it forgets a session (before its images and calls are dropped): what is needed
        is taken now, the files are written in the background."""
        if not self.enabled:
            return
        try:
            calls = [CallRecord(seq=dropped + i + 1, **json.loads(line)) for i, line in enumerate(records)]
        except (ValueError, TypeError):
            log.exception("session %s: its call log could not be read; not archived", session.id)
            return
        entries = list(session.images)
        summary = FinishedSession(
            session_id=session.id, profile=session.settings.profile, outcome=_outcome(reason), images=len(entries),
            calls=dropped + len(calls), failed_calls=sum(not c.ok for c in calls), created_at=session.created,
            ended_at=time.time(), owner=session.owner)
        trajectory = FinishedTrajectory(
            session_id=session.id, profile=summary.profile, calls=calls, dropped_calls=dropped,
            images=[TrajectoryImage(key=e.key, index=e.index, width=e.size[0], height=e.size[1], origin=e.origin)
                    for e in entries], outcome=summary.outcome, created_at=summary.created_at,
            ended_at=summary.ended_at)
        with self._lock:
            self._pending += 1
            backlog = self._pending > MAX_PENDING
        self._writer.submit(self._write, summary, trajectory, [] if backlog else entries[:MAX_IMAGES])

    def _write(self, summary: FinishedSession, trajectory: FinishedTrajectory, entries: list[ImageEntry]) -> None:
        try:
            self._write_files(summary, trajectory, entries)
        finally:
            with self._lock:
                self._pending -= 1

    def _write_files(self, summary: FinishedSession, trajectory: FinishedTrajectory,
                     entries: list[ImageEntry]) -> None:
        folder = self.root / summary.session_id
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for entry in (e for e in entries if FILE_KEY.match(e.key) and e.key not in (".", "..")):
                try:
                    (folder / f"{entry.key}.jpg").write_bytes(_thumbnail(entry))
                except Exception:  # a pixel loader that fails (a gone blob): the image shows as gone
                    log.warning("session %s: no thumbnail of %s", summary.session_id, entry.key)
            (folder / "trajectory.json").write_text(trajectory.model_dump_json())
            (folder / "summary.json").write_text(json.dumps({**summary.model_dump(), "owner": summary.owner}))
        except OSError as exc:
            log.warning("session %s: the archive could not be written: %s", summary.session_id, exc)
            shutil.rmtree(folder, ignore_errors=True)
            return
        with self._lock:
            index = self._loaded()
            index[summary.session_id] = summary
            oldest = sorted(index.values(), key=lambda s: s.ended_at)[:max(0, len(index) - self.max_sessions)]
            for old in oldest:
                index.pop(old.session_id, None)
        for old in oldest:  # out of the index first, so that nobody reads what is being deleted
            shutil.rmtree(self.root / old.session_id, ignore_errors=True)

    def flush(self) -> None:
        """Wait for the writes handed over so far (tests, and the server's stop)."""
        self._writer.submit(lambda: None).result()

    # -- reading ------------------------------------------------------------------------------------
    def _loaded(self) -> dict[str, FinishedSession]:
        """The index (the lock held): read from the summaries on disk the first time, and again when the folder
        changed (another process of the node archived or removed a session)."""
        try:
            changed = self.root.stat().st_mtime_ns
        except OSError:
            changed = None
        if self._index is None or changed != self._index_changed:
            # Only the folders it has not read yet are parsed, and those gone are dropped: in a node every release
            # by any worker changes the folder, and reading all the summaries again each time cost each release
            # as much as the archive holds (up to ARCHIVE_MAX_SESSIONS files).
            self._index_changed = changed
            try:
                names = {entry.name for entry in os.scandir(self.root) if entry.is_dir()}
            except OSError:
                names = set()
            index = {sid: summary for sid, summary in (self._index or {}).items() if sid in names}
            for name in names - index.keys():
                try:
                    summary = FinishedSession.model_validate_json((self.root / name / "summary.json").read_text())
                except (OSError, ValueError):  # being written by another process: read when the folder next changes
                    continue
                index[summary.session_id] = summary
            self._index = index
        return self._index

    def list(self, offset: int = 0, limit: int = 50, *, profile: str | None = None, outcome: str | None = None,
             query: str | None = None, failed: bool | None = None) -> FinishedSessionList:
        """Finished sessions the caller may see, newest first; `query` matches within the session id."""
        with self._lock:
            rows = list(self._loaded().values())
        rows = [s for s in rows if may_see(s.owner) and (profile is None or s.profile == profile)
                and (outcome is None or s.outcome == outcome) and (query is None or query in s.session_id)
                and (failed is None or (s.failed_calls > 0) == failed)]
        rows.sort(key=lambda s: s.ended_at, reverse=True)
        return FinishedSessionList(sessions=rows[offset:offset + limit], total=len(rows), offset=offset, limit=limit)

    def _summary(self, session_id: str) -> FinishedSession:
        with self._lock:
            found = self._loaded().get(session_id)
        if found is None or not may_see(found.owner):
            raise NotFound(f"no finished session {session_id} in the archive", code="unknown_trajectory")
        return found

    def trajectory(self, session_id: str) -> FinishedTrajectory:
        self._summary(session_id)
        try:
            return FinishedTrajectory.model_validate_json((self.root / session_id / "trajectory.json").read_text())
        except (OSError, ValueError):
            raise NotFound(f"the archive lost session {session_id}'s trajectory", code="unknown_trajectory") from None

    def thumbnail(self, session_id: str, key: str) -> bytes:
        self._summary(session_id)
        path = self.root / session_id / f"{key}.jpg"
        if not FILE_KEY.match(key) or key in (".", "..") or not path.is_file():
            raise NotFound(f"no image {key!r} kept for finished session {session_id}", code="unknown_image")
        return path.read_bytes()
