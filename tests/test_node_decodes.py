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


def test_an_encoded_tool_image_is_neither_decoded_nor_copied_to_the_node(
        tmp_path: Path, redis_server: RedisServer, monkeypatch):
    """Pixel-Reasoner's crop returns the JPEG it sends, decoded only if a later call reads it (as one process keeps
    it). A node's worker used to decode each such result at once to copy its pixels into the node (7.5 MB of tmpfs
    for a 1.8 MP crop, mapped by that worker alone), and again at the session's release to make the archive's
    thumbnails. The crop stays exact, and the archive has the thumbnails one process makes."""
    from toolserver.stores.node_pixels import NodePixels

    crop = {"bbox_2d": [100, 100, 600, 500], "target_image": 1}
    copied = []  # the session's own images written to the node's cache (not its upload's, shared by content)

    def put(self, key, image):
        if not key[0].startswith("content:"):
            copied.append(key[1])
        return real(self, key, image)

    real = NodePixels.put
    monkeypatch.setattr(NodePixels, "put", put)

    async def main():
        a, b = worker(tmp_path, redis_server, 0), worker(tmp_path, redis_server, 1)
        sid = await new_session(a, profile="pixel-reasoner")
        assert (await a.call_tool(sid, "crop_image", crop)).ok
        assert copied == [] and not (tmp_path / "node" / "pixels" / "s" / sid).exists()
        memory = Core(Settings(data_dir=tmp_path / "memory", workers=2))
        mid = await new_session(memory, profile="pixel-reasoner")
        await memory.call_tool(mid, "crop_image", crop)
        assert await b.image_bytes(sid, "observation_1") == await memory.image_bytes(mid, "observation_1")
        await b.release(sid)  # the archive's thumbnails are made from pixels read past the caches: no node copy
        await memory.release(mid)
        assert copied == [] and not (tmp_path / "node" / "pixels" / "s" / sid).exists()
        for core in (a, b, memory):
            await core.stop()  # the archive's writer has finished
        thumbnails = {p.stem: p.read_bytes() for p in b.settings.resolved_archive_dir().glob(f"{sid}/*.jpg")}
        alone = {p.stem: p.read_bytes() for p in memory.settings.resolved_archive_dir().glob(f"{mid}/*.jpg")}
        assert sorted(thumbnails) == ["observation_1", "original_image"]
        assert {k: pixels(v) for k, v in thumbnails.items()} == {k: pixels(v) for k, v in alone.items()}

    asyncio.run(main())


def pixels(jpeg: bytes) -> bytes:
    """A JPEG's decoded pixels (one process's upload keeps the photograph's JPEG comment, which its thumbnail
    carries; the node's copy of the pixels has none)."""
    import io

    from PIL import Image

    return Image.open(io.BytesIO(jpeg)).tobytes()
