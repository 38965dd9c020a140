"""What sandboxed code sees of other processes.

- `namespaces`: a PID namespace of its own, in which the code's process is pid 1. As root, the zygote moves its
  next fork into a new PID namespace (`unshare(CLONE_NEWPID)` moves only the caller's later children) and comes
  back to its own at once (`setns`): the child it forks is that namespace's first process, and no process is
  added. A zygote that is not root gets the PID namespace with the child's user namespace, which the child
  itself makes, so the child stays outside: it forks the namespace's first process, waits for it and ends as it
  ended (the zygote reads a run's end from the process it forked, and kills the run by that one's group). As
  pid 1, the code is spared a signal it has no handler for when it comes from inside the namespace (its own
  `kill(getpid(), SIGTERM)`), adopts what its children orphan, and takes every process of the namespace with it
  when it ends.
- `restricted` (no namespace to hide in): a second seccomp filter, made per child with its pid, answers ESRCH ("no
  such process") to every call that names another process (signals, `kill(pid, 0)`, process group and session,
  scheduling and priority, resource limits, robust lists, page migration), whether that process exists or not;
  the code's own process, its own group and 0 (itself) are answered as usual. A process the code forks inherits
  the filter as it is: it may signal the code's main process and the group, not name itself or its siblings.
  libseccomp cannot say "ESRCH for any value but these" of an argument (its rules compare against values, and a
  default action is the whole filter's), so this filter's few instructions are assembled here.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import resource
import signal
import struct
from typing import NoReturn

CLONE_NEWPID = 0x20000000
_libc = ctypes.CDLL(None, use_errno=True)

# Calls naming a process, by the argument that names it, and the values the code may name there.
PROCESS_CALLS = {
    (0, "group"): ("kill",),
    (0, "self"): ("tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "getpgid", "getsid", "sched_getparam",
                  "sched_setparam", "sched_getscheduler", "sched_setscheduler", "sched_getaffinity",
                  "sched_setaffinity", "sched_getattr", "sched_setattr", "sched_rr_get_interval", "prlimit64",
                  "get_robust_list", "migrate_pages", "move_pages"),
    (1, "self"): ("getpriority", "setpriority", "ioprio_get", "ioprio_set"),
}
LD_ABS, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06  # BPF: load a word of seccomp_data; jump if equal / if bits set
ALLOW, NO_SUCH_PROCESS = 0x7FFF0000, 0x00050000 | errno.ESRCH  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | ESRCH
X32_BIT = 0x40000000
INSTRUCTION = struct.Struct("=HBBI")


@functools.cache
def _numbers() -> tuple[int, list[tuple[int, str, list[int]]]]:
    """This architecture's audit token and each group's system call numbers (resolved once, in the zygote)."""
    import pyseccomp as seccomp

    groups = []
    for (argument, allowed), names in PROCESS_CALLS.items():
        numbers = [seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) for name in names]
        groups.append((argument, allowed, [n for n in numbers if n >= 0]))  # negative: not on this architecture
    return seccomp.system_arch(), groups


def prepare() -> None:
    _numbers()


def pid_filter(own: int) -> bytes:
    """The filter for the process `own` (its own process group too, as a session leader)."""
    arch, groups = _numbers()
    values = {"self": (0, own), "group": (0, own, -own & 0xFFFFFFFF)}
    # (code, true target, false target, k): targets are labels ("allow", "deny", a group's index) or None (next)
    program: list[tuple[int, object, object, int]] = [
        (LD_ABS, None, None, 4), (JEQ, None, "deny", arch), (LD_ABS, None, None, 0), (JSET, "deny", None, X32_BIT)]
    for index, (_, _, numbers) in enumerate(groups):
        program += [(JEQ, index, None, number) for number in numbers]
    program.append((RET, None, None, ALLOW))
    starts: dict[object, int] = {}
    for index, (argument, allowed, _) in enumerate(groups):
        starts[index] = len(program)
        program.append((LD_ABS, None, None, 16 + 8 * argument))  # the argument's low 32 bits, as the kernel reads it
        program += [(JEQ, "allow", None, value) for value in values[allowed]]
        program.append((RET, None, None, NO_SUCH_PROCESS))
    starts["deny"], starts["allow"] = len(program), len(program) + 1
    program += [(RET, None, None, NO_SUCH_PROCESS), (RET, None, None, ALLOW)]
    out = bytearray()
    for i, (code, true, false, k) in enumerate(program):
        jt, jf = (0 if target is None else starts[target] - i - 1 for target in (true, false))
        out += INSTRUCTION.pack(code, jt, jf, k)
    return bytes(out)


class PidNamespaces:
    """The root zygote's side: the next fork is the first process of a new PID namespace."""

    def __init__(self) -> None:
        self.own: int | None = None
        self.missing = ""
        try:
            self.own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            self.missing = f"no /proc/self/ns/pid to come back to: {exc.strerror}"

    def enter(self) -> str | None:
        """For the next fork; None, or why not (the child then fails its confinement with it)."""
        if self.own is None:
            return self.missing
        if _libc.unshare(CLONE_NEWPID) != 0:
            return f"unshare(CLONE_NEWPID): {os.strerror(ctypes.get_errno())}"
        return None

    def leave(self) -> None:
        """Back to the zygote's own, so that the next fork gets a namespace of its own again."""
        if _libc.setns(self.own, CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), "setns back to the zygote's PID namespace")


def leave_for_namespace() -> None:
    """In a child that made its own user and PID namespaces: forks the namespace's first process (which returns
    from here) and waits for it, ending as it ended (never returns)."""
    pid = os.fork()
    if pid == 0:
        return
    os.closerange(3, 1 << 16)  # the result pipe's end included: its end is the code's alone
    _end_as(_wait(pid))


def _wait(pid: int) -> int:
    """Reaps every child until `pid` ends; its wait status."""
    while True:
        try:
            ended, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if ended == pid:
            return status


def _end_as(status: int) -> NoReturn:
    if not os.WIFSIGNALED(status):
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    number = os.WTERMSIG(status)
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file of a copy of the zygote
    with contextlib.suppress(OSError, ValueError):
        signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)
    os._exit(128 + number)
