"""The zygote's self-test: each isolation level tried on a real child before any code is run, so that the level in
force is one this host was seen to enforce (not one it was assumed to)."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import time
from pathlib import Path
from typing import Any, Protocol

from toolserver.sandbox import child as child_side
from toolserver.sandbox.confine import LEVELS


class Zygote(Protocol):
    """What the self-test uses of the zygote."""

    runtime: Path
    as_root: bool
    landlock: bool
    free_slots: list[int]

    def fork(self, message: dict[str, Any], slot: int) -> tuple[int, int]: ...

    def reset_workdir(self, slot: int) -> None: ...

# Reads a host file the code should not see (world-readable, in the zygote's directory), and a file of the
# interpreter's packages it must see (matplotlib reads its fonts when it first draws text); asks whether the
# zygote's process exists (it must look as if it did not), and the code's niceness (19: below the server).
PROBE_CODE = ("import os\n"
              "def readable(path):\n    try:\n        open(path, 'rb').read(1)\n        return True\n"
              "    except OSError:\n        return False\n"
              "def exists(pid):\n    try:\n        os.kill(pid, 0)\n        return True\n"
              "    except ProcessLookupError:\n        return False\n    except OSError:\n        return True\n"
              "print(os.getuid(), readable({path!r}), readable({library!r}), exists({zygote}),"
              " os.getpriority(os.PRIO_PROCESS, 0) == 19)")
PROBE_TIMEOUT_S = 20


def self_test(zygote: Zygote) -> dict[str, str]:
    """Each level: "ok", or why it does not hold here."""
    found: dict[str, str] = {}
    for level in LEVELS[::-1]:
        if level == "restricted" and not zygote.as_root:
            found[level] = "needs root (or CAP_SETUID) to run code as a user of its own"
            continue
        result = probe(zygote, level)
        expected_hidden = level == "namespaces" or zygote.landlock
        if result.get("status") != "ok":
            found[level] = str(result.get("error") or result.get("status"))[:300]
            continue
        uid, sees_host, sees_libraries, sees_zygote, below = result["stdout"].split()
        if sees_libraries != "True":
            found[level] = (f"the sandbox's user cannot read the interpreter's packages ({library_file()}): make "
                            "them readable by all users (a virtual environment under a private directory is not)")
        elif sees_host == "True" and expected_hidden:
            found[level] = "the host's files were still visible"
        elif zygote.as_root and int(uid) == 0:
            found[level] = "the code still ran as root"
        elif sees_zygote == "True":
            found[level] = "the code could tell that the zygote's process exists"
        elif below != "True":
            found[level] = "the code did not run below the server's priority (niceness 19)"
        else:
            found[level] = "ok"
    return found


def library_file() -> str:
    from matplotlib import font_manager

    return str(font_manager.findfont("DejaVu Sans"))


def probe(zygote: Zygote, level: str) -> dict[str, Any]:
    slot = zygote.free_slots[-1]
    host_file = zygote.runtime / "probe.txt"
    host_file.write_text("a host file")
    host_file.chmod(0o644)
    code = PROBE_CODE.format(path=str(host_file), library=library_file(), zygote=os.getpid())
    pid, read_end = zygote.fork({"level": level, "code": code, "images": []}, slot)
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    data = bytearray()
    with selectors.DefaultSelector() as ready:
        ready.register(read_end, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if ready.select(max(0.0, deadline - time.monotonic())):
                chunk = os.read(read_end, 1 << 16)
                data += chunk
                if not chunk or child_side.frame_length(data) == len(data):
                    break
    os.close(read_end)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    zygote.reset_workdir(slot)
    try:
        return child_side.parse(data)
    except Exception:
        return {"status": "crashed", "error": "the probe child sent nothing readable"}
