"""Confinement of one sandbox child, applied after it is forked and before model-written code runs.

Two levels, highest first; the zygote's self-test finds which ones this host allows:
- `namespaces`: everything below, plus new mount, network, IPC, UTS and PID namespaces (a user namespace too when
  the zygote is not root): the child sees a tmpfs root holding read-only binds of the interpreter and its
  libraries, an empty `/tmp` (the run's disk, `disk_bytes`), and `/dev/null`, `/dev/zero`, `/dev/urandom`; no
  other host file, no `/proc`, a network with only a loopback that is down, no IPC object but its own, and no
  process but its own (`processes.py`).
- `restricted`: resource limits (address space, CPU time, processes, open files, file size, no core dumps), a
  user of its own (uid `SANDBOX_UID_BASE + slot`, never the server's), no capabilities, `no_new_privs`, and a
  seccomp deny-list: no sockets, no ptrace or other processes' memory, no mounts or namespaces, no leaving the
  process group (so the wall-clock kill of the group reaches every process the code started), no kernel
  modules, keys, BPF or perf; at this level also no System V or POSIX message-queue IPC, and no answer about
  another process (`processes.py`). Where the kernel has Landlock (5.13+), file access is limited to the same
  libraries (read-only) and the execution's own working directory, and signals cannot leave the sandbox;
  without it, host files are visible as to any other unprivileged user.
At both levels the code runs below the server's priority (`lower_priority`).
Python 3.11 has no `os.unshare` or `mount`: libc is called through ctypes.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import select
import signal
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

LEVELS = ("restricted", "namespaces")  # lowest first

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
ST_FLAGS = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC}
DEVICES = ("null", "zero", "urandom", "random")
ENTRY_BYTES = 4096  # what a file or directory counts against the disk quota at least (`quota.py`)

_libc = ctypes.CDLL(None, use_errno=True)


class ConfinementError(RuntimeError):
    pass


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 1 << 30  # address space on top of what the zygote already maps
    cpu_s: int = 30
    processes: int = 16
    open_files: int = 64
    file_bytes: int = 64 << 20  # any one file the code writes (stdout and stderr are files too)
    tmp_bytes: int = 128 << 20  # the writable /tmp (namespaces level), at most `disk_bytes`
    disk_bytes: int = 128 << 20  # what a run may keep in its files (working directory and /tmp): `quota.py`


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise ConfinementError(f"{what}: {os.strerror(err)} (errno {err})")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def library_paths() -> list[str]:
    """What code needs to read: the interpreter's prefixes and package directories, and the system's libraries."""
    paths = {sys.base_prefix, sys.prefix, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    paths |= {p for p in sys.path if p.startswith(sys.prefix) or p.startswith(sys.base_prefix)}
    paths |= {"/usr", "/lib", "/lib64", "/bin", "/etc/alternatives", "/etc/ld.so.cache", "/etc/fonts"}
    return sorted(p for p in paths if p and os.path.exists(p) and os.path.realpath(p) != "/")


def enter_namespaces(root: Path, limits: Limits, as_root: bool, libraries: list[str]) -> None:
    """New namespaces and a read-only view of `libraries` under `root` (an empty directory), then chroot. The
    writable /tmp is mounted first, so that a library living under the host's /tmp (a virtual environment made
    by `mktemp`, say) is bound inside it rather than hidden by it."""
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS  # as root, the fork made the PID namespace
    flags |= 0 if as_root else CLONE_NEWUSER | CLONE_NEWPID
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(flags), "unshare")
    if not as_root:  # map ourselves to root inside, the only mapping an unprivileged process may write
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
        Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
        _check(_libc.prctl(4, 1, 0, 0, 0), "dumpable")  # PR_SET_DUMPABLE: the zygote reads its /tmp's use
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks back to the host
    _mount("tmpfs", str(root), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    tmp = root / "tmp"
    tmp.mkdir()
    size, entries = min(limits.tmp_bytes, limits.disk_bytes), limits.disk_bytes // ENTRY_BYTES + 1  # + its root
    _mount("tmpfs", str(tmp), "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},nr_inodes={entries},mode=1777")
    for path in libraries:
        _bind_read_only(path, root)
    (root / "dev").mkdir(exist_ok=True)
    for name in DEVICES:
        target = root / "dev" / name
        target.touch()
        _mount(f"/dev/{name}", str(target), None, MS_BIND)
    _mount(None, str(root), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)  # the view itself: read-only
    os.chroot(root)
    os.chdir("/tmp")


def _bind_read_only(path: str, root: Path) -> None:
    target = root / path.lstrip("/")
    if os.path.islink(path):  # /lib -> usr/lib on merged-/usr systems: the link, not a second copy
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() and not target.is_symlink():
            target.symlink_to(os.readlink(path))
        return
    if target.exists() and os.path.ismount(target):
        return  # already inside a bind made for a parent directory
    if os.path.isdir(path):
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    _mount(path, str(target), None, MS_BIND | MS_REC)
    # A remount keeps the flags the kernel locked on the original (nosuid, nodev, noexec): it refuses to drop them.
    kept = sum(flag for st, flag in ST_FLAGS.items() if os.statvfs(path).f_flag & st)
    _mount(None, str(target), None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | kept)


def set_limits(limits: Limits, mapped: int) -> None:
    """`mapped`: the address space the process had before (the zygote's libraries), measured before any chroot.
    No niceness may be taken back (`RLIMIT_NICE` 0: see `lower_priority`)."""
    for which, value in ((resource.RLIMIT_AS, mapped + limits.memory_bytes), (resource.RLIMIT_CPU, limits.cpu_s),
                         (resource.RLIMIT_NPROC, limits.processes),
                         (resource.RLIMIT_NOFILE, limits.open_files), (resource.RLIMIT_FSIZE, limits.file_bytes),
                         (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NICE, 0)):
        resource.setrlimit(which, (value, value))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file over its limit fails the write instead of killing


CPU_POLICIES = ("idle", "nice")


def lower_priority(policy: str = "idle") -> None:
    """Below every thread of the server. `nice`: niceness 19, a scheduling weight of 15 against a server thread's
    1024 (and the heavy lane's 110); `idle`: that and `SCHED_IDLE`, so the code runs only on what the server
    leaves, a waking server thread preempting it at once. (A cgroup CPU weight would need a delegated cgroup v2
    subtree, which many hosts and containers lack; these need no privilege and hold everywhere.) With
    `RLIMIT_NICE` at 0 the code cannot return to `SCHED_OTHER` or a lower niceness."""
    if policy not in CPU_POLICIES:
        raise ConfinementError(f"no CPU policy {policy!r}")
    os.setpriority(os.PRIO_PROCESS, 0, 19)
    if policy == "idle":
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def mapped_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def drop_user(uid: int, as_root: bool) -> None:
    """Root switches to the sandbox's own uid (the kernel then clears every capability); a user-namespace child
    stays uid 0 inside, mapped to the server's unprivileged uid outside, and drops its capabilities itself."""
    if as_root:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    else:
        _drop_capabilities()
    if os.geteuid() == 0 and as_root:
        raise ConfinementError("still root after dropping the user")


def die_with_parent(zygote_alive: int) -> None:
    """`zygote_alive`: the read end of a pipe whose write end only the zygote holds: at its end the zygote is
    gone (a PID namespace's first process cannot ask for its parent, whose pid reads as 0)."""
    _check(_libc.prctl(1, signal.SIGKILL, 0, 0, 0), "parent-death signal")  # PR_SET_PDEATHSIG
    if select.select([zygote_alive], [], [], 0)[0]:  # it died before the signal was set: nothing would send it
        os._exit(70)


def _drop_capabilities() -> None:
    PR_CAPBSET_DROP = 24
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    data = (Data * 2)()
    sys_capset = {"x86_64": 126, "aarch64": 91}[platform.machine()]
    _check(_libc.syscall(sys_capset, ctypes.byref(Header(0x20080522, 0)), data), "capset")


# Denied with EPERM: what could reach outside the sandbox or past its limits. `clone3` answers ENOSYS so that
# libc falls back to `clone`, whose namespace flags are checked. Everything else is allowed.
DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "pidfd_open",
          "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "move_mount", "open_tree", "fsopen",
          "fsmount", "fsconfig", "fspick", "mount_setattr", "setsid", "setpgid", "socket", "socketcall",
          "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
          "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module", "kexec_load",
          "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "sethostname", "setdomainname",
          "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "quotactl", "lookup_dcookie",
          "name_to_handle_at", "open_by_handle_at", "personality", "syslog", "vhangup", "iopl", "ioperm",
          "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "capset")
# Denied at the `restricted` level, which has no IPC namespace of its own: System V IPC and POSIX message queues
# (their objects outlive a run and are found by key or name from another session's), and `capget`, whose
# answer about another process tells that it exists.
IPC_DENIED = ("shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
              "semtimedop", "semctl", "ipc", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
              "mq_notify", "mq_getsetattr", "capget")
NAMESPACE_FLAGS = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWNET | 0x20000000 | 0x02000000


def seccomp_program(extra: tuple[str, ...] = ()) -> bytes:
    """The deny-list (and `extra`) compiled to BPF once (by libseccomp, in the zygote): a child only loads it
    (≈ 3 ms saved)."""
    import pyseccomp as seccomp  # libseccomp through ctypes

    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENIED + extra:
        try:
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except (RuntimeError, ValueError, OSError):
            continue  # not a system call on this architecture
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for flag in (CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUTS, 0x20000000, 0x02000000):
        rules.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    with tempfile.TemporaryFile() as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_seccomp(program: bytes) -> None:
    """`no_new_privs`, then the filter (each BPF instruction is 8 bytes)."""
    _check(_libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(_libc.prctl(22, 2, ctypes.byref(fprog), 0, 0), "seccomp")  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


# Landlock (Linux >= 5.13): an unprivileged process limits its own file access to a list of directories; the
# `restricted` level uses it, where the kernel has it, so that host files stay hidden without namespaces.
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_TRUNCATE, FS_IOCTL_DEV = 1 << 14, 1 << 15
READ_ONLY = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The Landlock ABI version the kernel offers (0: none)."""
    version = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, version)


def landlock_ruleset(read_only: list[str], writable: list[str], *, files: bool = True) -> int:
    """A ruleset (a file descriptor, made once in the zygote and applied by each child with `landlock_apply`):
    files beneath `read_only` readable, beneath `writable` anything, nothing else; no TCP; and (ABI 6) no
    signals or abstract sockets out of the sandbox. `files=False`: only the last two (behind namespaces, where
    the files are already a view of their own)."""
    abi = landlock_abi()
    if abi < 1:
        raise ConfinementError("Landlock is not available")
    handled = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0)
    handled |= FS_IOCTL_DEV if abi >= 5 else 0
    handled = handled if files else 0
    attr = _RulesetAttr(handled, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        _check(-1, "landlock_create_ruleset")
    os.set_inheritable(ruleset, True)
    for paths, rights in ((read_only, READ_ONLY), (writable, handled)):
        for path in paths:
            _allow(ruleset, path, rights & handled)
    return ruleset


def landlock_apply(ruleset: int) -> None:
    _check(_libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS, required first
    _check(_libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not on this host
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS  # a file takes only file rights
        rule = _PathBeneath(rights, fd)
        _check(_libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0), f"landlock rule {path}")
    finally:
        os.close(fd)
