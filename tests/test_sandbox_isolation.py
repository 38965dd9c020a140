"""The escape corpus, continued (`tests/test_sandbox.py` has the rest): what a run can reach of the host's processes,
of other runs through IPC, of the disk and of the CPU, at every isolation level this host allows."""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

import pytest

from tests import test_sandbox
from toolserver.sandbox.confine import landlock_abi

sandboxes, confined = test_sandbox.sandboxes, test_sandbox.confined  # the fixtures: each way of confining

pytestmark = pytest.mark.skipif(os.uname().sysname != "Linux", reason="Linux only")
QUOTA = 16 << 20  # the test sandboxes' disk quota (tests/test_sandbox.py)


# -- processes ----------------------------------------------------------------------------------------------

PROBES = """
import os, resource
def answer(call):
    try:
        call()
        return 'ok'
    except OSError as exc:
        return type(exc).__name__
probes = (lambda pid: os.kill(pid, 0), os.getpgid, os.getsid, lambda pid: os.getpriority(os.PRIO_PROCESS, pid),
          os.sched_getscheduler, os.sched_getaffinity, lambda pid: resource.prlimit(pid, resource.RLIMIT_NOFILE))
me = os.getpid()
print(me, sorted({answer(lambda: probe(pid)) for pid in HOST if pid != me for probe in probes}),
      sorted({answer(lambda: probe(me)) for probe in probes}), answer(lambda: os.kill(0, 0)))
"""


@pytest.mark.slow
def test_the_code_cannot_tell_which_host_processes_exist(confined):
    """Signals, `kill(pid, 0)` and every question about a process answer "no such process" for each of the host's,
    the server's and the zygote's included; its own process and group answer as usual."""
    host = sorted({int(p) for p in os.listdir("/proc") if p.isdigit()} | {os.getpid(), confined.zygote_pid})
    done = confined(f"HOST = {host!r}\n" + PROBES)
    assert done.ok, done
    me, others, own, group = done.stdout.split(" ", 1)[0], *done.stdout.split(" ", 1)[1].rsplit("] ", 2)
    assert others == "['ProcessLookupError'" and own == "['ok'" and group.strip() == "ok", done.stdout
    if confined.level == "namespaces":
        assert me == "1"  # a PID namespace of its own, in which it is the first process


def test_what_remains_visible_at_restricted_is_the_existence_of_proc_entries(confined):
    """At `restricted` (no PID namespace) a path under /proc still tells whether a process id exists (a lookup is
    not a read: Landlock cannot refuse it); nothing in it can be read where Landlock is. At `namespaces` there is no
    /proc at all."""
    zygote = confined.zygote_pid
    done = confined(f"import os\nprint(os.path.exists('/proc/{zygote}'), os.path.exists('/proc/4194304'))\n"
                    f"try:\n    open('/proc/{zygote}/cmdline', 'rb').read()\n    print('read')\n"
                    "except OSError as exc:\n    print(type(exc).__name__)")
    if confined.level == "namespaces":
        assert done.stdout == "False False\nFileNotFoundError\n"
    elif landlock_abi() >= 1:
        assert done.stdout == "True False\nPermissionError\n"


# -- IPC -------------------------------------------------------------------------------------------------

IPC = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, function, *args):
    ok = function(*args) >= 0
    print(name, 'ok' if ok else errno.errorcode[ctypes.get_errno()])
call('shm', libc.shmget, KEY, 1 << 20, FLAGS)
call('msg', libc.msgget, KEY, FLAGS)
call('sem', libc.semget, KEY, 1, FLAGS)
call('mq', libc.mq_open, NAME, os.O_RDWR | (os.O_CREAT if FLAGS else 0), 0o666, None)
"""


def _host_has(key: int, name: bytes) -> list[str]:
    """The host's IPC objects (in the server's IPC namespace) with this key or name."""
    found = [kind for kind in ("shm", "msg", "sem")
             if any(line.split()[0] == str(key) for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:])]
    libc = ctypes.CDLL(None, use_errno=True)
    queue = libc.mq_open(name, os.O_RDONLY)
    if queue >= 0:
        libc.mq_close(queue)
        libc.mq_unlink(name)
        found.append("mq")
    return found


def test_an_ipc_object_stays_in_its_run_and_goes_with_it(confined):
    """One session's worker makes System V and POSIX objects by a key and a name; another session's run, at the same
    time, finds none of them, nor does the host; after the worker ends, neither does anyone."""
    key, name = 0x5A0000 + os.getpid() % 0xFFFF, f"/toolserver-test-{os.getpid()}".encode()
    made = confined(f"KEY, NAME, FLAGS = {key}, {name!r}, 0o1666\n" + IPC, worker=f"ipc-{confined.level}")
    looked = confined(f"KEY, NAME, FLAGS = {key}, {name!r}, 0\n" + IPC)
    try:
        if confined.level == "namespaces":  # an IPC namespace of its own
            assert made.stdout == "shm ok\nmsg ok\nsem ok\nmq ok\n", made
            assert looked.stdout == "shm ENOENT\nmsg ENOENT\nsem ENOENT\nmq ENOENT\n", looked
        else:  # no IPC namespace: the calls are refused
            assert made.stdout == looked.stdout == "shm EPERM\nmsg EPERM\nsem EPERM\nmq EPERM\n", made
        assert _host_has(key, name) == []
    finally:
        confined.sandbox.close_worker(f"ipc-{confined.level}")
    time.sleep(0.2)
    assert _host_has(key, name) == []


# -- disk ------------------------------------------------------------------------------------------------

def test_a_run_writing_without_end_is_stopped_at_its_disk_quota(confined):
    done = confined("import os\ni = 0\nwhile True:\n    try:\n        with open(f'f{i}', 'wb') as f:\n"
                    "            f.write(os.urandom(1 << 20))\n    except OSError:\n        pass\n    i += 1",
                    timeout_s=20)
    assert done.status == "disk_quota" and "disk quota of 16 MiB" in done.error, done
    left = ['.stderr', '.stdout', *(_checkout_in_tmp() if confined.level == "namespaces" else [])]
    assert confined("import os\nprint(sorted(os.listdir('.')))").stdout == f"{sorted(left)}\n"


def _checkout_in_tmp() -> list[str]:
    """A checkout under the host's /tmp (a `mktemp -d` clone) is bound read-only at its own path inside the run's
    /tmp, the run's working directory at `namespaces` (confine.enter_namespaces): its top directory shows there."""
    parts = Path(__file__).resolve().parents[1].parts
    return [parts[2]] if parts[1:2] == ("tmp",) and len(parts) > 2 else []


@pytest.mark.slow
def test_a_flood_of_empty_files_is_stopped_at_the_quota_too(confined):
    done = confined("i = 0\nwhile True:\n    try:\n        open(f'e{i}', 'w').close()\n    except OSError:\n"
                    "        pass\n    i += 1", timeout_s=20)
    assert done.status == "disk_quota", done


def test_a_run_that_ends_at_its_quota_says_so(confined):
    """The last look at its files is taken when its result is in: a run that filled its quota and ended (at
    `namespaces`, the kernel refused its last bytes) reads as stopped at the quota, not as its own error."""
    done = confined("for i in range(4):\n    with open(f'big{i}', 'wb') as f:\n        f.write(b'x' * (6 << 20))")
    assert done.status == "disk_quota", done


def test_a_worker_whose_thread_writes_on_is_ended_at_its_quota(confined):
    worker = f"disk-{confined.level}"
    first = confined("import os, threading, time\ndef fill():\n    for i in range(10**6):\n        try:\n"
                     "            open(f'w{i}', 'wb').write(os.urandom(256 << 10))\n        except OSError:\n"
                     "            pass\n        time.sleep(0.01)\nthreading.Thread(target=fill, daemon=True).start()\n"
                     "kept = 1", worker=worker)
    assert first.ok and first.worker_started, first
    time.sleep(2.0)  # 16 MiB at 25 MiB/s: the worker, idle, is past its quota
    later = confined("print(globals().get('kept'))", worker=worker)
    assert later.worker_started and later.stdout == "None\n", later  # it was ended; this cell started afresh
    confined.sandbox.close_worker(worker)


# -- CPU ---------------------------------------------------------------------------------------------------

def test_the_code_runs_below_the_server_and_cannot_climb_back(confined):
    done = confined("import os\nprint(os.sched_getscheduler(0) == os.SCHED_IDLE,"
                    " os.getpriority(os.PRIO_PROCESS, 0))\nfor climb in (lambda: os.setpriority(os.PRIO_PROCESS, 0, 0), lambda: os.nice(-1),\n"
                    "              lambda: os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))):\n"
                    "    try:\n        climb()\n        print('climbed')\n    except OSError as exc:\n"
                    "        print(type(exc).__name__)")
    assert done.stdout == "True 19\nPermissionError\nPermissionError\nPermissionError\n", done


# -- restricted without Landlock (kernels before 5.13): what stands is the filters, the user and the sweep ----------

@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the restricted level needs root")
    sandbox = test_sandbox._sandbox(tmp_path_factory.mktemp("bare"), landlock=False, uid_base=63000)
    sandbox.start()
    if sandbox.levels.get("restricted") != "ok":
        pytest.skip(f"restricted: {sandbox.levels.get('restricted')}")
    yield test_sandbox.Confined(sandbox, "restricted")
    sandbox.stop()


def test_without_landlock_what_a_run_leaves_in_tmp_and_dev_shm_goes_with_it(bare):
    name = f"toolserver-test-{os.getpid()}"
    done = bare(f"import ctypes, os\nlibc = ctypes.CDLL(None)\n"  # POSIX shared memory: a file in /dev/shm
                f"os.close(libc.shm_open(b'/{name}', os.O_CREAT | os.O_RDWR, 0o666))\n"
                f"open('/tmp/{name}', 'w').write('left for the next session')\nprint(os.listdir('/dev/shm'))")
    assert done.ok and name in done.stdout, done  # made, where any user could find it
    bare("pass")  # the zygote answers, then cleans up: its next answer comes after that
    assert not Path(f"/dev/shm/{name}").exists() and not Path(f"/tmp/{name}").exists()


def test_without_landlock_what_it_writes_to_tmp_counts_against_its_quota(bare):
    done = bare("import os\ni = 0\nwhile True:\n    try:\n        open(f'/tmp/toolserver-q-{os.getpid()}-{i}', 'wb')"
                ".write(os.urandom(1 << 20))\n    except OSError:\n        pass\n    i += 1", timeout_s=20)
    assert done.status == "disk_quota", done
    bare("pass")
    assert not list(Path("/tmp").glob("toolserver-q-*"))


def test_without_landlock_the_host_s_processes_still_cannot_be_told_apart(bare):
    test_the_code_cannot_tell_which_host_processes_exist(bare)


def test_the_nice_policy_keeps_the_code_at_niceness_19_under_the_normal_scheduler(tmp_path):
    sandbox = test_sandbox._sandbox(tmp_path, cpu_policy="nice")
    try:
        sandbox.start()
        level = sandbox.level
        assert level is not None, sandbox.levels
        done = sandbox.run("import os\nprint(os.sched_getscheduler(0) == os.SCHED_OTHER, os.getpriority(os.PRIO_PROCESS, 0))"
                           "\ntry:\n    os.nice(-1)\nexcept OSError as exc:\n    print(type(exc).__name__)", level=level)
        assert done.stdout == "True 19\nPermissionError\n", done
    finally:
        sandbox.stop()
