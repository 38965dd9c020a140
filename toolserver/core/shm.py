"""`shm` delivery: a tool image's raw pixels written once to shared memory, handed over by name.

For a trainer on the same host: the server writes the result's pixels (RGB, row after row: what
`Image.tobytes()` gives) to a file under `shm_dir` (tmpfs, /dev/shm by default) and answers with a handle
(`ShmHandle`: path, width, height, mode, bytes, expiry); the client maps the file and has the pixels with no
encoding, no base64 and no decoding (`toolserver.client.read_shm`).

Lifetime: a file goes with its session (release, expiry, eviction: the sweep), and at `shm_ttl_s` at the latest
(the sweep removes files past their expiry, whether or not the session lives); a process-local store's files go
when the server stops. Space: the files held at once are bounded by `shm_max_bytes` (507 `shm_full` past it),
counted by this process between sweeps and measured from the directory at each sweep, so several worker processes
of one server sharing the directory see each other's files there.

Security: off unless `shm_delivery` is set; the directory is made private (0700, this user's) and refused if it is
anyone else's or open to others; each file is 0600. Only a process of the same user on the same host can read a
handle; a handle's path names nothing on another host. Nothing in a handle depends on the process that wrote it:
every worker of a server computes the same path for a session's image, and any of them removes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import threading
import time
from collections.abc import Collection
from pathlib import Path

from PIL import Image

from toolserver.errors import BadRequest, InsufficientStorage, ServiceError
from toolserver.models import ShmHandle

_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{32}$")  # the stores' session ids (secrets.token_urlsafe(24))
SUFFIX = ".pixels"


class ShmUnsafe(ServiceError):
    """The configured directory is not private to this user."""

    status = 503
    code = "shm_unavailable"


class ShmFiles:
    """The files of `shm` delivery under one directory, with their byte bound and lifetime."""

    def __init__(self, root: Path, max_bytes: int, ttl_s: float, enabled: bool = True):
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self.enabled = enabled
        self._bytes: int | None = None  # measured at the first write and at each sweep, counted in between
        self._lock = threading.Lock()
        self._written: set[str] = set()  # sessions this process wrote for (removed at stop with a local store)

    def check_enabled(self) -> None:
        if not self.enabled:
            raise BadRequest("`shm` delivery is off on this server (setting `shm_delivery`); use inline, ref or "
                             "path delivery", code="shm_disabled")

    def write(self, session_id: str, key: str, image: Image.Image) -> ShmHandle:
        """The image's pixels in a new file (0600), written once; runs in a worker thread."""
        self.check_enabled()
        if not _SESSION_ID.match(session_id):
            raise BadRequest(f"not a session id: {session_id!r}")
        if image.mode not in ("RGB", "RGBA", "L"):
            image = image.convert("RGB")
        raw = image.tobytes()
        self._reserve(len(raw))
        try:
            directory = self._private_root() / session_id
            with contextlib.suppress(FileExistsError):
                directory.mkdir(mode=0o700)
            path = directory / f"{key}{SUFFIX}"
            tmp = directory / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                view = memoryview(raw)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            self._release(len(raw))
            raise
        self._written.add(session_id)
        return ShmHandle(path=str(path), width=image.width, height=image.height, mode=image.mode,
                         nbytes=len(raw), expires_at=round(time.time() + self.ttl_s, 3))

    def remove(self, session_id: str) -> None:
        """A session's files, gone with it."""
        directory = self.root / session_id
        if _SESSION_ID.match(session_id) and directory.is_dir():
            self._remove_folder(directory)
        self._written.discard(session_id)

    def sessions(self) -> list[str]:
        """The sessions that have a folder here (written by any worker process)."""
        if not self.root.is_dir():
            return []
        return [d.name for d in self.root.iterdir() if d.is_dir() and _SESSION_ID.match(d.name)]

    def sweep(self, gone: Collection[str] = ()) -> int:
        """The folders of the sessions in `gone` and every file past its expiry removed; then the directory
        measured again. Returns the files removed."""
        if not self.root.is_dir():
            return 0
        removed, now, total = 0, time.time(), 0
        for directory in [d for d in self.root.iterdir() if d.is_dir() and _SESSION_ID.match(d.name)]:
            if directory.name in gone:
                removed += self._remove_folder(directory)
                continue
            for file in list(directory.iterdir()):
                with contextlib.suppress(FileNotFoundError):
                    info = file.stat()
                    if now - info.st_mtime >= self.ttl_s:
                        file.unlink()
                        removed += 1
                    else:
                        total += info.st_size
            with contextlib.suppress(OSError):  # empty and old: its session wrote nothing for a while
                if not any(directory.iterdir()) and now - directory.stat().st_mtime >= self.ttl_s:
                    directory.rmdir()
        with self._lock:
            self._bytes = total
        return removed

    def stop(self) -> None:
        """At server stop, with a store that ends with this process: every file it wrote."""
        for session_id in list(self._written):
            self.remove(session_id)

    # -- internals ----------------------------------------------------------------------------
    def _private_root(self) -> Path:
        """The directory, made 0700 if missing; refused if it is another user's or others may enter it."""
        root = self.root
        with contextlib.suppress(FileExistsError):
            root.mkdir(mode=0o700, parents=True)
        info = os.lstat(root)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise ShmUnsafe(f"the shm directory {root} must be a directory of this user with mode 0700 (it is "
                            f"{stat.filemode(info.st_mode)}, uid {info.st_uid}); remove it or set `shm_dir`")
        return root

    def _reserve(self, nbytes: int) -> None:
        with self._lock:
            if self._bytes is None:
                self._bytes = _measure(self.root)
            if self._bytes + nbytes > self.max_bytes:
                raise InsufficientStorage(
                    f"shared memory holds {self._bytes} bytes of delivered images, at its bound of {self.max_bytes} "
                    "(`shm_max_bytes`); release sessions, or use another delivery", code="shm_full")
            self._bytes += nbytes

    def _release(self, nbytes: int) -> None:
        with self._lock:
            if self._bytes is not None:
                self._bytes = max(0, self._bytes - nbytes)

    def _remove_folder(self, directory: Path) -> int:
        files = freed = 0
        with contextlib.suppress(FileNotFoundError):
            for file in directory.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    freed += file.stat().st_size
                    files += 1
        shutil.rmtree(directory, True)
        self._release(freed)
        return files


def _measure(root: Path) -> int:
    if not root.is_dir():
        return 0
    total = 0
    for directory in root.iterdir():
        if directory.is_dir() and _SESSION_ID.match(directory.name):
            for file in directory.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    total += file.stat().st_size
    return total
