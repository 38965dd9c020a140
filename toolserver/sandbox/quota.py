"""A run's disk quota: what it keeps in its files (its working directory and its /tmp) may not reach
`Limits.disk_bytes`, nor its files and directories `disk_bytes / ENTRY_BYTES` in number (empty files cost no
bytes, but each one an inode). The zygote looks every `WATCH_S` while the code runs, at every stateful worker
(busy or idle: a cell may leave a thread writing), and once more when a result is in; a run at the quota is
stopped (`disk_quota`).

- `namespaces`: the working directory is the child's /tmp, a tmpfs the child mounts at the quota's size and inode
  count, so the kernel refuses any byte past it (the code sees ENOSPC); the zygote reads how full it is in one
  `statvfs`, through `/proc/<pid>/root` (once the child is in its own root: before that, that path is the
  host's /tmp, on another device).
- `restricted`: the slot's working directory on the host's disk (/tmp is not the code's: Landlock keeps it to its
  working directory), walked: every entry's allocated blocks, and the entries. Between two looks the code may
  write what the disk takes in `WATCH_S`; no file is larger than `SANDBOX_FILE_MB`.
"""

from __future__ import annotations

import os
from pathlib import Path

from toolserver.sandbox.confine import ENTRY_BYTES

__all__ = ["ENTRY_BYTES", "WATCH_S", "over"]

WATCH_S = 0.1


def over(level: str, pid: int, workdir: Path, disk_bytes: int) -> bool:
    """Whether the run `pid` (the process the zygote forked) has reached its quota."""
    most_entries = max(1, disk_bytes // ENTRY_BYTES)
    if level == "namespaces":
        used, entries = _tmpfs_use(pid)
    else:
        used, entries = _walk(workdir, disk_bytes, most_entries)
    return used >= disk_bytes or entries >= most_entries


def _tmpfs_use(pid: int) -> tuple[int, int]:
    tmp = f"/proc/{pid}/root/tmp"
    try:
        if os.stat(tmp).st_dev == os.stat("/tmp").st_dev:
            return 0, 0  # not in its own root yet (or no longer)
        fs = os.statvfs(tmp)
    except OSError:
        return 0, 0  # it has ended
    return (fs.f_blocks - fs.f_bfree) * fs.f_frsize, fs.f_files - fs.f_ffree - 1  # its root directory aside


def _walk(top: Path, most_bytes: int, most_entries: int) -> tuple[int, int]:
    """Allocated bytes and entries under `top`, not following links; it stops once either is reached."""
    used = entries = 0
    pending = [str(top)]
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
