"""The code sandbox on a real zygote: what code can do, and the escape corpus at every isolation level this host
allows (as root: `namespaces` and `restricted`; and `namespaces` the way an unprivileged server confines, with a
user namespace). Each escape is contained with a text that says so, and the sandbox stays healthy after it. The
corpus goes on in `tests/test_sandbox_isolation.py`: host processes, IPC between runs, disk, CPU."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from PIL import Image

from toolserver.sandbox.confine import Limits
from toolserver.sandbox.executor import Sandbox, SandboxConfig, SandboxImage, SandboxUnavailable

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-test-secret-that-code-must-not-see"
pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or os.uname().sysname != "Linux", reason="Linux only")


def _sandbox(tmp_path: Path, **config) -> Sandbox:
    limits = Limits(memory_bytes=512 << 20, cpu_s=5, processes=8, file_bytes=8 << 20, tmp_bytes=32 << 20,
                    disk_bytes=16 << 20)
    base = {"runtime_dir": tmp_path / "sandbox", "slots": 4, "limits": limits, "timeout_s": 5.0,
            "max_output_bytes": 2000, "max_images": 4, "max_pixels": 4_000_000}
    return Sandbox(SandboxConfig(**(base | config)))


@pytest.fixture(scope="module")
def sandboxes(tmp_path_factory):
    """One sandbox per way of confining this host allows: (name, sandbox, level)."""
    os.environ["TOOLSERVER_TEST_SECRET"] = SECRET  # in the server's environment, as an API key would be
    plain = _sandbox(tmp_path_factory.mktemp("plain"))
    plain.start()
    found = [(level, plain, level) for level, why in plain.levels.items() if why == "ok"]
    # its own temporary directory: pytest's is private to root, and this zygote serves as another user
    userns = _sandbox(tmp_path_factory.mktemp("userns"), runtime_dir=None, user_namespace=True, uid_base=62000)
    if os.geteuid() == 0:
        userns.start()
        if userns.levels.get("namespaces") == "ok":
            found.append(("namespaces-userns", userns, "namespaces"))
    if os.environ.get("CI"):
        assert {name for name, _, _ in found} >= {"namespaces", "restricted"}, plain.levels
    yield found
    plain.stop()
    userns.stop()


class Confined:
    """Runs code at one level of one sandbox (`sandbox`, `level`: what a test needs to know of them)."""

    def __init__(self, sandbox: Sandbox, level: str):
        self.sandbox, self.level = sandbox, level

    def __call__(self, code: str, **kw):
        return self.sandbox.run(code, level=self.level, **kw)

    @property
    def zygote_pid(self) -> int:
        assert self.sandbox._process is not None
        return self.sandbox._process.pid


@pytest.fixture(params=["namespaces", "restricted", "namespaces-userns"])
def confined(request, sandboxes):
    for name, sandbox, level in sandboxes:
        if name == request.param:
            return Confined(sandbox, level)
    pytest.skip(f"{request.param} is not available on this host")


# -- what code can do ------------------------------------------------------------------------------

def test_images_in_prints_and_images_out(confined):
    red = Image.new("RGB", (64, 48), (255, 0, 0))
    done = confined("print(image_1.size, images[0].getpixel((0, 0)), photo.mode)\n"
                    "display(image_1.crop((0, 0, 32, 24)))\n"
                    "import matplotlib.pyplot as plt\nplt.figure(figsize=(2, 1), dpi=50)\nplt.plot([0, 1])\nplt.show()",
                    images=[SandboxImage(("image_1", "photo"), red, key="red")])
    assert done.ok, done
    assert done.stdout == "(64, 48) (255, 0, 0) RGB\n"
    assert [im.size for im in done.images] == [(32, 24), (100, 50)]
    assert done.images[0].getpixel((5, 5)) == (255, 0, 0)


def test_a_keyed_image_crosses_once_and_is_sent_again_when_the_zygote_let_it_go(sandboxes):
    _, sandbox, level = sandboxes[0]
    blue = Image.new("RGB", (8, 8), (0, 0, 255))
    assert sandbox.run("print(img.getpixel((0, 0)))", [SandboxImage(["img"], blue, key="k-blue")],
                       level=level).stdout == "(0, 0, 255)\n"
    assert sandbox._spec(SandboxImage(["img"], blue, key="k-blue"), resend=False) == {"names": ["img"],
                                                                                    "key": "k-blue"}
    sandbox._sent["k-gone"] = None  # the server believes the zygote holds it; the zygote never had it
    done = sandbox.run("print(img.size)", [SandboxImage(["img"], blue, key="k-gone")], level=level)
    assert done.ok and done.stdout == "(8, 8)\n"


def test_an_exception_comes_back_as_the_code_s_own_traceback(confined):
    done = confined("x = 1\nprint('before')\nraise ValueError('bad value')")
    assert done.status == "error" and done.stdout == "before\n"
    assert done.error.splitlines() == ['Traceback (most recent call last):', '  File "<code>", line 3, in <module>',
                                       "    raise ValueError('bad value')", 'ValueError: bad value']


def test_stdout_is_cut_with_a_count_of_what_was_cut(confined):
    done = confined("import os\nprint('a' * 5000)\nos.write(2, b'from C\\n')")
    assert done.ok and len(done.stdout) == 2000 and done.stdout_dropped == 3001
    assert done.stderr == "from C\n"


def test_nothing_carries_from_one_execution_to_the_next(confined):
    assert confined("open('left.txt', 'w').write('x')\nglobal_left = 1").ok
    done = confined("import os\nprint(os.path.exists('left.txt'), 'global_left' in globals())")
    assert done.stdout == "False False\n"


# -- the escape corpus -----------------------------------------------------------------------------

def _denied(done, *texts: str) -> None:
    assert done.status == "error", done
    assert any(text in done.error for text in texts), done.error


def test_host_files_are_not_readable(confined):
    for path in (ROOT / "pyproject.toml", Path("/etc/shadow"), Path("/root/.bash_history")):
        done = confined(f"print(open({str(path)!r}).read()[:50])")
        _denied(done, "No such file", "Permission denied")


def test_other_processes_and_the_server_s_environment_are_not_readable(confined):
    done = confined("import os\nprint(sorted(os.environ))")
    assert done.ok and SECRET not in done.stdout and "TOOLSERVER_TEST_SECRET" not in done.stdout
    done = confined(f"print(open('/proc/{os.getpid()}/environ', 'rb').read()[:20])")
    _denied(done, "No such file", "Permission denied")
    done = confined("print(open('/proc/1/cmdline', 'rb').read())")
    _denied(done, "No such file", "Permission denied")


def test_writing_outside_the_sandbox_fails(confined, tmp_path):
    for path in (ROOT / "escaped.txt", Path("/etc/escaped"), Path("/usr/escaped")):
        done = confined(f"open({str(path)!r}, 'w').write('x')")
        assert not path.exists()  # the host's files are untouched
        if not str(path).startswith("/tmp/"):  # (a checkout under /tmp lies in the sandbox's own /tmp there)
            _denied(done, "Read-only", "Permission denied", "No such file")


def test_the_network_is_unreachable(confined):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        done = confined(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)")
    _denied(done, "Operation not permitted", "Network is unreachable")


def test_ptrace_setsid_and_killing_the_zygote_are_refused(confined):
    zygote = confined.zygote_pid  # its pid on the host: no such process, as far as the code can tell
    done = confined(f"import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                    f"print(libc.ptrace(16, {zygote}, 0, 0), ctypes.get_errno())\n"
                    f"for call in (os.setsid, lambda: os.kill({zygote}, 9)):\n"
                    "    try:\n        call()\n    except OSError as exc:\n        print(type(exc).__name__)")
    assert done.ok and done.stdout == "-1 1\nPermissionError\nProcessLookupError\n", done
    assert confined("print('still serving')").stdout == "still serving\n"


def test_a_fork_bomb_is_capped_and_ended_with_its_run(confined):
    done = confined("import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
                    "            import time\n            time.sleep(60)\n            os._exit(0)\n        n += 1\n"
                    "except OSError as exc:\n    print(n, type(exc).__name__)")
    assert done.ok and done.stdout.split()[1] == "BlockingIOError", done
    assert int(done.stdout.split()[0]) < 8
    assert confined("print('after the bomb')").ok


def test_a_memory_bomb_raises_memory_error(confined):
    done = confined("blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))")
    _denied(done, "MemoryError")


def test_an_infinite_loop_is_killed_at_the_deadline(confined):
    done = confined("while True:\n    pass", timeout_s=1.0)
    assert done.status == "timeout"  # the loop never ends by itself: only the deadline stops it


def test_what_the_code_leaves_running_ends_with_its_run(confined, tmp_path):
    marker = tmp_path / "late.txt"
    tmp_path.chmod(0o777)
    done = confined(f"import os, time\nif os.fork() == 0:\n    time.sleep(1.5)\n    open({str(marker)!r}, 'w')\n"
                    "    os._exit(0)\nprint('parent done')")
    assert done.ok
    time.sleep(2.5)
    assert not marker.exists()


def test_huge_output_and_countless_or_huge_images_are_bounded(confined):
    done = confined("import sys\nsys.stdout.write('y' * (20 << 20))")  # over the 8 MB file limit
    assert done.stdout_dropped > 0 and len(done.stdout) == 2000
    done = confined("from PIL import Image\nfor i in range(10):\n    display(Image.new('L', (10, 10)))\n"
                    "display(Image.new('L', (4000, 4000)))")
    assert done.ok and len(done.images) == 4 and done.images_dropped == 7


def test_a_garbage_result_is_an_error_not_a_crash_of_the_server(confined):
    done = confined("import os\nfor fd in range(3, 64):  # the result pipe is one of them\n    try:\n"
                    "        os.write(fd, b'not msgpack at all')\n    except OSError:\n        pass\nos._exit(0)")
    assert done.status == "crashed"
    assert confined("print(1)").stdout == "1\n"


def test_a_level_the_host_lacks_is_refused_with_its_reason(tmp_path):
    sandbox = _sandbox(tmp_path, runtime_dir=None, min_level="namespaces", user_namespace=True)
    try:
        sandbox.start()
        with pytest.raises(SandboxUnavailable, match="restricted"):
            sandbox.run("print(1)", level="restricted")
    finally:
        sandbox.stop()


@pytest.mark.slow
def test_a_zygote_killed_outright_takes_its_runs_and_the_next_execution_starts_a_new_one(tmp_path):
    import signal
    import threading

    sandbox = _sandbox(tmp_path, timeout_s=30.0, limits=Limits(cpu_s=60))  # only the zygote's death ends it
    try:
        sandbox.start()
        if sandbox.levels.get("restricted") != "ok":
            pytest.skip("the restricted level (a working directory on the host) is not available")
        outcome: list = []
        runner = threading.Thread(target=lambda: outcome.append(_try(sandbox, "import os\nopen('pid', 'w').write("
                                                                      "str(os.getpid()))\nwhile True:\n    pass")))
        runner.start()
        deadline = time.monotonic() + 10
        while not (found := list((tmp_path / "sandbox" / "work").glob("*/pid"))) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        code_pid = int(found[0].read_text())
        assert sandbox._process is not None
        sandbox._process.send_signal(signal.SIGKILL)
        runner.join(10)
        assert isinstance(outcome[0], SandboxUnavailable)
        deadline = time.monotonic() + 5
        while Path(f"/proc/{code_pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{code_pid}").exists() or "Z" in Path(f"/proc/{code_pid}/stat").read_text().split()[2]
        assert sandbox.run("print('a new zygote')").stdout == "a new zygote\n"
    finally:
        sandbox.stop()


def _try(sandbox: Sandbox, code: str):
    try:
        return sandbox.run(code, level="restricted")
    except SandboxUnavailable as exc:
        return exc


# -- environments' programs run under the same confinement -------------------------------------------------------

def test_an_environment_s_shell_runs_confined_and_keeps_its_state(confined):
    """DeepEyesV2's code server (IPython) in a stateful worker: its shell works at every level, and what the code
    can reach through it is what any code can (IPython's `system` runs a shell that is not there, or is confined)."""
    from toolserver.profiles.deepeyes_v2 import PREAMBLE

    runner = {"program": "deepeyes_v2", "preamble": PREAMBLE, "show_hook": False, "options": {"alarm_s": 4.0}}
    worker = f"ipython-{time.monotonic_ns()}"
    red = Image.new("RGB", (64, 48), (255, 0, 0))
    first = confined("secret = 41\nimage_1.size", images=[SandboxImage(["image_1"], red)], worker=worker,
                     runner=runner)
    assert first.ok and first.stdout == "Out[1]: (64, 48)\n", first
    read = confined(f"print(secret + 1)\nopen({str(ROOT / 'pyproject.toml')!r}).read()", worker=worker, runner=runner)
    assert read.stdout == "42\n" and "Error" in read.details["stderr"], read
    assert "No such file" in read.details["stderr"] or "Permission denied" in read.details["stderr"]
    shell = confined("get_ipython().system('cat /etc/shadow')", worker=worker, runner=runner)
    assert "root:" not in shell.stdout + shell.details.get("stderr", "")


def test_an_environment_s_files_live_in_the_sandbox(confined):
    """Thyme's program: its input image and output directories are files in the sandbox, at every level."""
    from toolserver.profiles.thyme import INPUT_NAME, USER_IMAGES

    worker = f"thyme-{time.monotonic_ns()}"
    runner = {"program": "thyme", "show_hook": False, "error_style": "message",
              "options": {"key": "photo", "inputs": [[f"{INPUT_NAME}0", "photo"]], "user_images": USER_IMAGES,
                          "timeout_s": 4.0, "images_held": 1}}
    code = ("from PIL import Image\nimg = Image.open('/mnt/data/user_images/photo.png')\n"
            "processed_path = '/mnt/data/temp_processed_images/crop.png'\nimg.crop((0, 0, 70, 70)).save(processed_path)"
            "\nprint(processed_path)")
    done = confined(code, images=[SandboxImage([f"{INPUT_NAME}0"], Image.new("RGB", (100, 80), (1, 2, 3)))],
                    worker=worker, runner=runner)
    assert done.ok and done.details["observation"] == "<image>", done
    assert [image.size for image in done.images] == [(70, 70)]
    escaped = confined(f"print(open({str(ROOT / 'pyproject.toml')!r}).read()[:10])", worker=worker, runner=runner)
    assert escaped.details["observation"].startswith("Sandbox for photo: Code execution failed: [Errno"), escaped
