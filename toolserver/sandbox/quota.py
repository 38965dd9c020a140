"""A run's disk quota: what it keeps in its files (its working directory and its /tmp) may not reach
`Limits.disk_bytes`, nor its files and directories `disk_bytes / ENTRY_BYTES` in number (empty files cost no
bytes, but each one an inode). The zygote looks every `WATCH_S` while the code runs, at every stateful worker
(busy or idle: a cell may leave a thread writing), and once more when a result is in; a run at the quota is
stopped (`disk_quota`).

- `namespaces`: the working directory is the child's /tmp, a tmpfs the child mounts at the quota's size and inode
  count, so the kernel refuses any byte past it (the code sees ENOSPC); the zygote reads how full it is in one
  `statvfs`, through `/proc/<pid>/root` (once the child is in its own root: before that, that path is the
  host's /tmp, on another device).
- `restricted`: the slot's working directory on the host's disk, walked: every entry's allocated blocks, and the
  entries. Between two looks the code may write what the disk takes in `WATCH_S`; no file is larger than
  `SANDBOX_FILE_MB`. Landlock keeps the code to that directory; without it, the code may also write where every
  user may (`SHARED`: /tmp, /var/tmp, /dev/shm), and what the slot's user owns there counts too, and is removed
  when the run ends (`remove_shared`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from toolserver.sandbox.confine import ENTRY_BYTES

__all__ = ["ENTRY_BYTES", "WATCH_S", "over"]

WATCH_S = 0.1
SHARED = ("/tmp", "/var/tmp", "/dev/shm")


def over(level: str, pid: int, workdir: Path, disk_bytes: int, shared_uid: int | None = None) -> bool:
    """Whether the run `pid` (the process the zygote forked) has reached its quota; `shared_uid`: its user's
    entries in `SHARED` count too."""
    most_entries = max(1, disk_bytes // ENTRY_BYTES)
    if level == "namespaces":
        used, entries = _tmpfs_use(pid)
    else:
        used, entries = _walk([str(workdir)], disk_bytes, most_entries)
    if shared_uid is not None and used < disk_bytes and entries < most_entries:
        owned = _owned(shared_uid)
        directories = [path for path, _ in owned if os.path.isdir(path) and not os.path.islink(path)]
        more, found = _walk(directories, disk_bytes, most_entries)
        used += more + sum(blocks for _, blocks in owned)
        entries += found + len(owned)
    return used >= disk_bytes or entries >= most_entries


def remove_shared(uid: int) -> None:
    """What `uid` owns at the top of each `SHARED` directory, removed."""
    for path, _ in _owned(uid):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _owned(uid: int) -> list[tuple[str, int]]:
    """The entries `uid` owns at the top of each `SHARED` directory, with their allocated bytes."""
    owned = []
    for top in SHARED:
        with contextlib.suppress(OSError), os.scandir(top) as listing:
            for entry in listing:
                with contextlib.suppress(OSError):
                    found = entry.stat(follow_symlinks=False)
                    if found.st_uid == uid:
                        owned.append((entry.path, found.st_blocks * 512))
    return owned


def _tmpfs_use(pid: int) -> tuple[int, int]:
    tmp = f"/proc/{pid}/root/tmp"
    try:
        if os.stat(tmp).st_dev == os.stat("/tmp").st_dev:
            return 0, 0  # not in its own root yet (or no longer)
        fs = os.statvfs(tmp)
    except OSError:
        return 0, 0  # it has ended
    return (fs.f_blocks - fs.f_bfree) * fs.f_frsize, fs.f_files - fs.f_ffree - 1  # its root directory aside


def _walk(tops: list[str], most_bytes: int, most_entries: int) -> tuple[int, int]:
    """Allocated bytes and entries under `tops`, not following links; it stops once either is reached."""
    used = entries = 0
    pending = list(tops)
    while pending and used < most_bytes and entries < most_entries:
        try:
            with os.scandir(pending.pop()) as listing:
                for entry in listing:
                    entries += 1
                    try:
                        used += entry.stat(follow_symlinks=False).st_blocks * 512
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(entry.path)
                    except OSError:
                        continue  # gone meanwhile
        except OSError:
            continue
    return used, entries
