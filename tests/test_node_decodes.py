"""A node's uploads decoded once for the whole node: by the first worker that gets a photograph's bytes, while the
others that got the same bytes wait for its pixels (the workers modelled as Cores on one real `redis-server` sharing
one node directory, as in tests/test_node_store.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.conftest import RedisServer, photo
from tests.test_node_store import ZOOM, new_session, pixels_of, worker
from toolserver.config import Settings
from toolserver.core import Core


def test_a_group_s_photograph_is_decoded_once_per_node(tmp_path: Path, redis_server: RedisServer, monkeypatch):
    """A GRPO group's rollouts upload one photograph to whichever worker: the first decodes it, the others (and later
    sessions of the first) take the node's pixels instead of decoding the bytes again."""
    from toolserver.core import intake

    decodes = []
    real = intake._decode
    monkeypatch.setattr(intake, "_decode", lambda *args: decodes.append(1) or real(*args))

    async def main():
        a, b = worker(tmp_path, redis_server, 0), worker(tmp_path, redis_server, 1)
        sids = [await new_session(core) for core in (a, b, b, a)]
        assert len(decodes) == 1
        memory = Core(Settings(data_dir=tmp_path / "memory", workers=2))
        mid = await new_session(memory)
        for sid, core in zip(sids, (a, b, b, a), strict=True):
            info, alone = await core.session_info(sid), await memory.session_info(mid)
            assert info.images[0].model_dump() == alone.images[0].model_dump()
            assert await core.image_bytes(sid, "original_image") == (photo("LadyBird.jpg").read_bytes(), "image/jpeg")
            node, one = await core.call_tool(sid, "zoom_in", ZOOM), await memory.call_tool(mid, "zoom_in", ZOOM)
            assert pixels_of(node) == pixels_of(one)
        for core in (a, b, memory):
            await core.stop()

    asyncio.run(main())


def test_a_group_s_uploads_at_once_on_every_worker_are_decoded_once(tmp_path: Path, redis_server: RedisServer,
                                                                     monkeypatch):
    """A GRPO step starts with every rollout's upload at once, on every worker: one worker decodes the photograph
    while the others wait for its pixels in the node (each worker decoded it: 61 decodes of 8 photographs by 16
    workers on the race workload, each 53 MB of pixels and as much again inside the JPEG decoder)."""
    import time

    from toolserver.core import intake

    decodes = []
    real = intake._decode

    def slow(*args):  # long enough for every upload to arrive while the first is decoded
        decodes.append(1)
        time.sleep(0.3)
        return real(*args)

    monkeypatch.setattr(intake, "_decode", slow)

    async def main():
        a, b = worker(tmp_path, redis_server, 0), worker(tmp_path, redis_server, 1)
        sids = await asyncio.gather(*(new_session(core) for core in (a, b, a, b)))
        assert len(decodes) == 1
        crops = {pixels_of(await core.call_tool(sid, "zoom_in", ZOOM)) for sid, core in zip(sids, (a, b, a, b),
                                                                                             strict=True)}
        memory = Core(Settings(data_dir=tmp_path / "memory", workers=2))
        assert crops == {pixels_of(await memory.call_tool(await new_session(memory), "zoom_in", ZOOM))}
        for core in (a, b, memory):
            await core.stop()

    asyncio.run(main())
