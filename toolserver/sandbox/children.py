"""How the zygote makes a confined child: the fork, the fixed order of confinement steps, and then either one
execution (the child's result, then its end) or a stateful worker's loop of cells.

The order matters: its own process group (so the wall-clock kill reaches everything it starts; not a session of
its own, see `_own_group`), its standard streams on /dev/null, an empty environment (the server's API keys never
reach code), the level's isolation (namespaces and the read-only view: the PID namespace's first process,
`processes.py`; or the slot's working directory and its Landlock ruleset), every other inherited descriptor
closed, resource limits, the uid switch, death with the zygote, the priority below the server's, and last the
seccomp filters (at `restricted`, a second one made for its pid), which also forbid the calls the steps before
them needed. A step that fails ends the child before any code runs (`confinement_failed`). A one-shot child,
its result sent, waits to be killed: the zygote reads its files' use first (`quota.py`).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import sys
import termios
from pathlib import Path
from typing import Any, NoReturn

from toolserver.sandbox import child as child_side
from toolserver.sandbox import processes, quota
from toolserver.sandbox.confine import (
    DEVICES,
    IPC_DENIED,
    ConfinementError,
    Limits,
    die_with_parent,
    drop_user,
    enter_namespaces,
    landlock_abi,
    landlock_apply,
    landlock_ruleset,
    library_paths,
    load_seccomp,
    lower_priority,
    mapped_bytes,
    seccomp_program,
    set_limits,
)
from toolserver.sandbox.pipes import widen_pipe

CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "MPLBACKEND": "Agg",
             "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class Children:
    def __init__(self, runtime: Path, uid_base: int, *, landlock: bool = True):
        self.runtime = runtime
        self.uid_base = uid_base
        self.as_root = os.geteuid() == 0
        self.landlock = landlock and landlock_abi() >= 1
        self.root = runtime / "root"
        # Made once, applied by each child: the seccomp programs, and the Landlock rulesets (per slot at the
        # `restricted` level, whose working directory is the slot's).
        self.seccomp = {"namespaces": seccomp_program(), "restricted": seccomp_program(IPC_DENIED)}
        processes.prepare()
        self.pid_namespaces = processes.PidNamespaces() if self.as_root else None
        self.zygote_alive = os.pipe()  # the zygote holds the write end for life; a child checks its read end
        self.scope_ruleset = landlock_ruleset([], [], files=False) if self.landlock else None
        self.file_rulesets: dict[int, int] = {}
        self.libraries = library_paths()  # what code may read: found once

    def workdir(self, slot: int) -> Path:
        return self.runtime / "work" / str(slot)

    def prepare(self, slots: list[int]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        readable = self.libraries
        for slot in slots:
            self.reset_workdir(slot)
            if self.landlock:
                self.file_rulesets[slot] = landlock_ruleset(readable, [str(self.workdir(slot)),
                                                                       *(f"/dev/{d}" for d in DEVICES)])

    def reset_workdir(self, slot: int) -> None:
        """Emptied, not replaced: the slot's Landlock ruleset names this very directory. Without Landlock, what the
        slot's user left in the directories every user may write to (/tmp, /dev/shm: files, POSIX shared memory
        and semaphores) goes too."""
        if not self.landlock and self.as_root:
            quota.remove_shared(self.uid_base + slot)
        path = self.workdir(slot)
        path.mkdir(parents=True, mode=0o700, exist_ok=True)
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
        path.chmod(0o700)
        if self.as_root:
            os.chown(path, self.uid_base + slot, self.uid_base + slot)

    def fork(self, message: dict[str, Any], slot: int, *, worker: bool = False) -> tuple[int, int, int | None]:
        """A confined child for `message`: its pid, the read end of its results, and (for a stateful worker)
        the write end of its requests."""
        read_end, write_end = os.pipe()
        widen_pipe(write_end)
        requests = os.pipe() if worker else None
        if requests is not None:
            widen_pipe(requests[1])
        new_pid_namespace = message["level"] == "namespaces" and self.pid_namespaces is not None
        if new_pid_namespace:
            assert self.pid_namespaces is not None
            message["pid_namespace_error"] = self.pid_namespaces.enter()
        pid = -1
        try:
            pid = os.fork()
        finally:
            if pid != 0 and new_pid_namespace and message.get("pid_namespace_error") is None:
                assert self.pid_namespaces is not None
                self.pid_namespaces.leave()
        if pid == 0:  # the child: never returns
            os.close(self.zygote_alive[1])
            os.close(read_end)
            if requests is not None:
                os.close(requests[1])
            self._child(message, write_end, slot, requests[0] if requests else None)
        os.close(write_end)
        if requests is not None:
            os.close(requests[0])
        return pid, read_end, requests[1] if requests else None

    def _child(self, message: dict[str, Any], result_fd: int, slot: int, requests_fd: int | None) -> NoReturn:
        try:
            self._confine(message, slot, keep={result_fd} | ({requests_fd} if requests_fd is not None else set()))
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                child_side.send(result_fd, {"status": "confinement_failed", "error": f"{type(exc).__name__}: {exc}"})
            os._exit(70)
        try:
            sys.argv = [""]
            request = child_side.Request.of(message)
            if requests_fd is None:
                child_side.send(result_fd, child_side.execute(request))
                while True:  # until the zygote, its result in, has read its files' use and kills it
                    signal.pause()
            else:
                child_side.serve_cells(requests_fd, result_fd, request)
        finally:
            os._exit(0)

    def _confine(self, message: dict[str, Any], slot: int, keep: set[int]) -> None:
        _own_group()
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.environ.clear()
        os.environ.update(CHILD_ENV)
        limits, mapped = Limits(**message.get("limits", {})), mapped_bytes()
        level, zygote_alive = message["level"], self.zygote_alive[0]
        if level == "namespaces":
            if message.get("pid_namespace_error"):
                raise ConfinementError(message["pid_namespace_error"])
            enter_namespaces(self.root, limits, self.as_root, self.libraries)
            if not self.as_root:  # its user namespace brought the PID namespace: its first process is a child
                die_with_parent(zygote_alive)
                processes.leave_for_namespace()
            if self.scope_ruleset is not None:  # signals: a user-namespace child shares the zygote's uid
                landlock_apply(self.scope_ruleset)
        else:
            os.chdir(self.workdir(slot))
            if slot in self.file_rulesets:
                landlock_apply(self.file_rulesets[slot])
        _close_all_but(keep | {zygote_alive})  # the rulesets too
        set_limits(limits, mapped)
        drop_user(self.uid_base + slot, self.as_root)
        die_with_parent(zygote_alive)  # after the uid switch, which clears it; a zygote killed outright takes its runs
        os.close(zygote_alive)
        lower_priority(message.get("cpu_policy", "idle"))
        load_seccomp(self.seccomp[level])
        if level == "restricted":
            load_seccomp(processes.pid_filter(os.getpid()))


def _own_group() -> None:
    """A process group of its own, killed whole, in the zygote's session and without its controlling terminal.
    Not a session of its own (`setsid`): where the kernel groups each session's processes for scheduling
    (autogroup), a new session would be weighed as much as the server's whole session, whatever the code's own
    priority, and eight spinning runs took eight ninths of the CPU."""
    os.setpgid(0, 0)
    with contextlib.suppress(OSError):  # ENXIO: no controlling terminal to leave
        tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
        try:
            fcntl.ioctl(tty, termios.TIOCNOTTY)
        finally:
            os.close(tty)


def reap_group(leader: int) -> int | None:
    """Waits for every process of the (killed) group `leader` and returns the signal that ended the leader, if
    one did. The zygote is a child subreaper, so what the code forked comes back to it when the leader dies, and
    none of it lingers as a zombie of the code's uid (whose process limit a zombie would still count against)."""
    signal_number = None
    while True:
        try:
            info = os.waitid(os.P_PGID, leader, os.WEXITED)
        except ChildProcessError:
            return signal_number
        if info is not None and info.si_pid == leader and info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
            signal_number = info.si_status


def become_subreaper() -> None:
    _check_libc(ctypes.CDLL(None).prctl(36, 1, 0, 0, 0), "child subreaper")  # PR_SET_CHILD_SUBREAPER


def _check_libc(result: int, what: str) -> None:
    if result != 0:
        raise OSError(f"{what}: prctl failed")


def _close_all_but(keep: set[int]) -> None:
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)
