"""Stateful sandbox workers: one confined process per session whose namespace lives from cell to cell, killed on a
timeout, a crash or `close_worker`, and bounded in number (the least recently used idle one goes first)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from toolserver.sandbox.confine import Limits
from toolserver.sandbox.executor import Sandbox, SandboxConfig, SandboxImage

pytestmark = pytest.mark.skipif(os.uname().sysname != "Linux", reason="Linux only")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    limits = Limits(memory_bytes=512 << 20, cpu_s=5, processes=8, file_bytes=8 << 20, tmp_bytes=32 << 20)
    sandbox = Sandbox(SandboxConfig(runtime_dir=Path(tmp_path_factory.mktemp("workers")), slots=2, worker_slots=2,
                                    limits=limits, timeout_s=5.0, max_output_bytes=2000))
    sandbox.start()
    yield sandbox
    sandbox.stop()


@pytest.fixture(params=["namespaces", "restricted"])
def level(request, sandbox):
    if sandbox.levels.get(request.param) != "ok":
        pytest.skip(f"{request.param} is not available on this host")
    return request.param


def test_a_worker_keeps_its_namespace_and_images_from_cell_to_cell(sandbox, level):
    photo = Image.new("RGB", (30, 20), (9, 8, 7))
    first = sandbox.run("x = 41\nsmall = image_1.resize((3, 2))", [SandboxImage(["image_1"], photo)], level=level,
                        worker=f"a-{level}")
    assert first.ok and first.worker_started
    second = sandbox.run("print(x + 1, small.size, image_1.getpixel((0, 0)))\ndisplay(small)", level=level,
                         worker=f"a-{level}")
    assert second.ok and not second.worker_started and second.stdout == "42 (3, 2) (9, 8, 7)\n"
    assert [image.size for image in second.images] == [(3, 2)]
    other = sandbox.run("print('x' in globals())", level=level, worker=f"b-{level}")
    assert other.worker_started and other.stdout == "False\n"  # another session's worker sees nothing of it
    sandbox.close_worker(f"a-{level}")
    sandbox.close_worker(f"b-{level}")


def test_a_timeout_or_a_crash_ends_the_worker_and_the_next_cell_starts_afresh(sandbox, level):
    worker = f"t-{level}"
    assert sandbox.run("x = 1", level=level, worker=worker).ok
    late = sandbox.run("while True:\n    pass", level=level, worker=worker, timeout_s=1.0)
    assert late.status == "timeout" and late.worker_lost
    fresh = sandbox.run("print(x)", level=level, worker=worker)
    assert fresh.worker_started and fresh.status == "error" and "NameError" in fresh.error
    crashed = sandbox.run("import os\nos._exit(3)", level=level, worker=worker)
    assert crashed.status == "crashed" and crashed.worker_lost
    assert sandbox.run("print('again')", level=level, worker=worker).stdout == "again\n"
    sandbox.close_worker(worker)


def test_closing_a_worker_ends_its_state(sandbox, level):
    worker = f"c-{level}"
    sandbox.run("kept = 'yes'", level=level, worker=worker)
    sandbox.close_worker(worker)
    after = sandbox.run("print(globals().get('kept'))", level=level, worker=worker)
    assert after.worker_started and after.stdout == "None\n"
    sandbox.close_worker(worker)


def test_workers_are_bounded_and_the_least_recently_used_idle_one_goes_first(sandbox, level):
    for name in ("w1", "w2"):
        assert sandbox.run(f"name = {name!r}", level=level, worker=f"{name}-{level}").worker_started
    assert sandbox.run("print(name)", level=level, worker=f"w1-{level}").stdout == "w1\n"  # w2 is now the oldest
    assert sandbox.run("name = 'w3'", level=level, worker=f"w3-{level}").worker_started
    assert sandbox.run("print(name)", level=level, worker=f"w1-{level}").stdout == "w1\n"
    evicted = sandbox.run("print(globals().get('name'))", level=level, worker=f"w2-{level}")
    assert evicted.worker_started and evicted.stdout == "None\n"
    for name in ("w1", "w2", "w3"):
        sandbox.close_worker(f"{name}-{level}")


def test_a_session_s_worker_ends_with_the_session_released_or_expired(tmp_path):
    import asyncio

    from tests.conftest import gradient, png_bytes
    from toolserver.config import Settings
    from toolserver.core import Core, RawImage
    from toolserver.models import CreateSessionRequest

    async def main():
        core = Core(Settings(data_dir=tmp_path / "data", sweep_interval_s=0.2, sr_model_dir=tmp_path / "none"))
        await core.start()
        sandbox = core.services.sandbox
        made = [await core.create_session(CreateSessionRequest(ttl_s=ttl), [RawImage(png_bytes(gradient(8, 8)))])
                for ttl in (600, 1)]
        for created in made:
            await asyncio.to_thread(sandbox.run, "state = 1", worker=created.session_id)
        assert sandbox.workers == {created.session_id for created in made}
        await core.release(made[0].session_id)
        assert sandbox.workers == {made[1].session_id}
        again = await asyncio.to_thread(sandbox.run, "print(globals().get('state'))", worker=made[0].session_id)
        assert again.worker_started and again.stdout == "None\n"  # the zygote ended it
        sandbox.close_worker(made[0].session_id)
        await asyncio.sleep(1.6)  # the second session expires; the next sweep ends its worker
        assert sandbox.workers == set()
        fresh = await asyncio.to_thread(sandbox.run, "print(globals().get('state'))", worker=made[1].session_id)
        assert fresh.worker_started and fresh.stdout == "None\n"
        await core.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


# An environment's runner as data, here PyVision-RL's: its header defines the figure list and the capture function
# that `plt.show()` is rewritten to; an error reads as `str(e)`, and what was printed before it is not shown.
PYVISION_LIKE = {
    "preamble": ("import base64, io\nimport matplotlib.pyplot as plt\n_captured_figures = []\n"
                 "def _capture():\n    buf = io.BytesIO()\n    plt.savefig(buf, format='png')\n"
                 "    _captured_figures.append(base64.b64encode(buf.getvalue()).decode())\n    plt.close()\n"),
    "rewrites": [["plt.show()", "_capture()"]], "error_style": "message", "collect": "_captured_figures",
    "show_hook": False,
}


def test_an_environment_s_runner_given_as_data(sandbox, level):
    worker = f"env-{level}"
    first = sandbox.run("plt.figure(figsize=(3, 2), dpi=50)\nplt.plot([1, 2])\nplt.show()\nprint('shown')",
                        level=level, worker=worker, runner=PYVISION_LIKE)
    assert first.ok and first.stdout == "shown\n" and [image.size for image in first.images] == [(150, 100)]
    assert first.images[0].mode == "RGB"  # composited on white, as the server takes every figure in
    failed = sandbox.run("print('lost')\n{}['k']", level=level, worker=worker, runner=PYVISION_LIKE)
    assert failed.status == "error" and failed.error == "'k'"
    later = sandbox.run("print(len(_captured_figures))", level=level, worker=worker, runner=PYVISION_LIKE)
    assert later.stdout == "1\n" and later.images == []
    sandbox.close_worker(worker)
