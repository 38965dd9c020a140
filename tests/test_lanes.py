"""Cheap calls never queue behind SMFANet or document jobs: two lanes, the heavy one at a lower OS priority."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest

from toolserver.core import Core
from toolserver.errors import Overloaded
from toolserver.models import ValidateItem
from toolserver.pool import WorkPool
from toolserver.profiles import PROFILES


def test_network_and_index_tools_run_in_the_heavy_lane_and_the_rest_in_the_fast_one():
    heavy = {(p.name, name) for p in PROFILES.values() for name, tool in p.tools.items() if tool.lane == "heavy"}
    names = {name for _, name in heavy}
    assert names == {"super_resolution", "magnify", "zoom", "doc_page_retrieval_by_query", "search",
                     "OCR", "SegmentRegionAroundPoint", "Point"}  # OpenThinkIMG's model workers: a network each
    assert ("vrag-rl", "search") in heavy  # VRAG-RL's search ranks the whole library
    assert ("mags-rl", "zoom") in heavy and ("groundlight", "zoom") not in heavy  # same name, other work
    fast = PROFILES["default"].tools
    # A page by its number is a file read and a resize: pixel work, not an index query.
    assert all(fast[n].lane == "fast" for n in ("zoom_in", "keypoint_zoom", "lookback_reuse",
                                                 "doc_page_retrieval_by_index"))
    assert all(t.lane == "fast" for n, t in fast.items() if n.startswith("check_") or n.startswith("validate"))


def test_a_validator_finishes_while_every_heavy_worker_is_busy(settings):
    settings = settings.model_copy(update={"workers": 1, "heavy_workers": 1})
    release = threading.Event()

    async def main():
        core = Core(settings)
        try:
            blocked = asyncio.ensure_future(core.pool.run(release.wait, 30, lane="heavy"))
            queued = asyncio.ensure_future(core.pool.run(release.wait, 30, lane="heavy"))
            await asyncio.sleep(0.05)
            item = ValidateItem(tool="check_whether_response_word_count_in_range",
                                params={"lower_bound": 1, "upper_bound": 5}, text="three short words")
            result = await asyncio.wait_for(core.validate([item]), 5)  # would wait 30 s in one FIFO pool
            still_blocked = not blocked.done() and not queued.done()
            release.set()
            await asyncio.gather(blocked, queued)
            return result, still_blocked
        finally:
            release.set()
            await core.stop()

    result, still_blocked = asyncio.run(main())
    assert still_blocked and result.results[0].ok and result.results[0].result is True


def test_each_lane_has_its_own_admission_limit():
    release = threading.Event()

    async def main():
        pool = WorkPool(1, queue_limit=2, heavy_workers=1)
        try:
            jobs = [asyncio.ensure_future(pool.run(release.wait, 10, lane="heavy")) for _ in range(2)]
            await asyncio.sleep(0.05)
            with pytest.raises(Overloaded, match="heavy jobs admitted"):
                await pool.run(release.wait, 10, lane="heavy")
            fast = await pool.run(lambda: "fast still admitted")
            release.set()
            await asyncio.gather(*jobs)
            return fast, pool.in_flight, pool.rejected
        finally:
            release.set()
            pool.shutdown()

    assert asyncio.run(main()) == ("fast still admitted", 0, 1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is a Linux feature")
def test_heavy_threads_yield_the_cpu_and_fast_ones_do_not():
    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    async def main():
        pool = WorkPool(1, queue_limit=4, heavy_workers=1, heavy_nice=7)
        try:
            base = os.getpriority(os.PRIO_PROCESS, 0)
            return base, await pool.run(niceness), await pool.run(niceness, lane="heavy")
        finally:
            pool.shutdown()

    base, fast, heavy = asyncio.run(main())
    assert fast == base and heavy == min(19, base + 7)
