"""A node's crop delivered by reference (`ToolContext.pixels_on_demand`): kept as its recipe and cut by whatever reads
it first, never in its own call; charged as one cut in its call; cut in the call where the source's mode cannot be
known unread. The node's workers as Cores on one real `redis-server`, as in tests/test_node_store.py.
"""

from __future__ import annotations

import asyncio
import io

from PIL import Image

from tests.conftest import RedisServer
from tests.test_node_store import INNER, ZOOM, new_session, worker
from toolserver.config import Settings
from toolserver.core import Core
from toolserver.memorymap import Derivation


def test_a_crop_delivered_by_reference_is_cut_only_when_read(tmp_path, redis_server: RedisServer, monkeypatch):
    cuts, cut = [], Derivation.cut
    monkeypatch.setattr(Derivation, "cut", lambda self: cuts.append(self.box) or cut(self))

    async def main():
        a, b = worker(tmp_path, redis_server, 0), worker(tmp_path, redis_server, 1)
        memory = Core(Settings(data_dir=tmp_path / "memory", workers=2))
        ref = {"format": "png", "delivery": "ref"}
        sid, mid = await new_session(a, output=ref), await new_session(memory, output=ref)
        before = (await a.session_info(sid)).bytes_held
        node, alone = await a.call_tool(sid, "zoom_in", ZOOM), await memory.call_tool(mid, "zoom_in", ZOOM)
        assert cuts == [(256, 160, 1536, 800)]  # one process's only: the node's crop is not read in its call
        assert node.text == alone.text and node.images[0].width == 1280 and node.images[0].url
        # Charged as a crop cut in its call is (then kept as its recipe too); remade exactly by another worker.
        eager = await new_session(a, output=ref)
        cut_before = (await a.session_info(eager)).bytes_held
        a.store.keeps_recipes = lambda: False  # this worker cuts it in the call, as before
        assert (await a.call_tool(eager, "zoom_in", ZOOM)).ok and len(cuts) == 2
        del a.store.keeps_recipes
        charged = (await a.session_info(eager)).bytes_held - cut_before
        lazy = (await a.session_info(sid)).bytes_held - before
        assert abs(lazy - charged) < 64 and charged >= 1280 * 640 * 3  # the call records' timings differ a little
        assert (await b.call_tool(sid, "zoom_in", INNER)).ok and len(cuts) == 2
        assert (await memory.call_tool(mid, "zoom_in", INNER)).ok
        for key in ("observation_1", "observation_2"):
            made = [(await core.image_bytes(s, key, "png"))[0] for core, s in ((b, sid), (memory, mid))]
            assert Image.open(io.BytesIO(made[0])).tobytes() == Image.open(io.BytesIO(made[1])).tobytes()
        # Where the source's mode is not known unread (not in the node's memory), the crop is cut in its call.
        for kept in (tmp_path / "node" / "pixels" / "c").iterdir():
            kept.unlink()  # as the node's trim does
        c = worker(tmp_path, redis_server, 2)  # nothing in its own cache either
        cuts.clear()
        assert (await c.call_tool(sid, "zoom_in", ZOOM)).ok and cuts == [(256, 160, 1536, 800)]
        for core in (a, b, c, memory):
            await core.stop()

    asyncio.run(main())
