"""The node's own store (`toolserver serve --workers N` with its private Redis): a tool image is held once, as raw
pixels in the node's shared memory, and Redis keeps only its record; a crop is kept as its recipe and remade by
whichever worker reads it. The workers are modelled here as Cores on one real `redis-server` sharing one node
directory; tests/test_node.py runs a real node.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
from pathlib import Path

import pytest
import redis
from PIL import Image

from tests.conftest import PHOTOS, RedisServer, photo
from toolserver.config import Settings
from toolserver.core import Core, RawImage
from toolserver.errors import NotFound
from toolserver.models import CreateSessionRequest
from toolserver.stores.redis import RedisStore

ZOOM = {"image": "original_image", "bbox_2d": [100, 100, 600, 500]}
INNER = {"image": "observation_1", "bbox_2d": [0, 0, 500, 500]}
ROTATE = {"image": "original_image", "angle": 30}  # new pixels that no recipe makes: held


def worker(tmp_path: Path, redis_server: RedisServer, index: int, *, holds: bool = True) -> Core:
    """One of the node's server processes: the node's Redis and directory, as the supervisor sets them."""
    return Core(Settings(data_dir=tmp_path / f"worker{index}", allowed_roots=[PHOTOS], workers=2, queue_limit=64,
                         session_store="redis", redis_url=redis_server.url, node_dir=tmp_path / "node",
                         node_holds_images=holds, worker_index=index))


def held_dir(tmp_path: Path, sid: str) -> Path:
    return tmp_path / "node" / "pixels" / "h" / sid


async def new_session(core: Core, **settings) -> str:
    settings.setdefault("output", {"format": "jpeg"})  # a PNG delivered inline is kept as those bytes instead
    created = await core.create_session(CreateSessionRequest(**settings), [RawImage(photo("LadyBird.jpg").read_bytes())])
    return created.session_id


def pixels_of(result) -> bytes:
    return Image.open(io.BytesIO(base64.b64decode(result.images[0].data))).convert("RGB").tobytes()


def test_a_tool_image_held_by_one_worker_is_read_by_another(tmp_path: Path, redis_server: RedisServer):
    async def main():
        a, b = worker(tmp_path, redis_server, 0), worker(tmp_path, redis_server, 1)
        sid = await new_session(a)
        first = await a.call_tool(sid, "rotate", ROTATE)
        second = await b.call_tool(sid, "zoom_in", INNER)  # a crop of an image whose pixels only `a` made
        assert first.ok and second.ok
        # What one process makes, exactly.
        memory = Core(Settings(data_dir=tmp_path / "memory", workers=2))
        mid = await new_session(memory)
        await memory.call_tool(mid, "rotate", ROTATE)
        assert pixels_of(second) == pixels_of(await memory.call_tool(mid, "zoom_in", INNER))
        # Redis holds the upload and the records, no tool image's bytes; the node's directory holds the rotated
        # image once, and the crop of it as nothing but its record's recipe.
        blobs = redis.Redis.from_url(redis_server.url).hgetall(f"ts:{{{sid}}}:blobs")
        assert sorted(blobs) == [b"original_image"]
        files = sorted(p.name for p in held_dir(tmp_path, sid).iterdir())
        assert [f.split(".")[0] for f in files] == ["observation_1"]
        assert not list((tmp_path / "node" / "pixels" / "s").glob(f"{sid}/observation_*"))  # no second copy
        store = b.store
        assert isinstance(store, RedisStore) and store.holds_images
        # The budget counts the held pixels; a fetch in any format encodes them on demand.
        info = await b.session_info(sid)
        assert info.bytes_held >= sum((held_dir(tmp_path, sid) / f).stat().st_size for f in files)
        jpeg, mime = await a.image_bytes(sid, "observation_2")
        assert mime == "image/jpeg" and Image.open(io.BytesIO(jpeg)).convert("RGB").tobytes() == pixels_of(second)
        lossless = [(await core.image_bytes(s, "observation_2", "png"))[0] for core, s in ((b, sid), (memory, mid))]
        assert Image.open(io.BytesIO(lossless[0])).tobytes() == Image.open(io.BytesIO(lossless[1])).tobytes()
        for core in (a, b, memory):
            await core.stop()

    asyncio.run(main())


def test_a_crop_is_kept_as_its_recipe_and_remade_exactly_by_any_worker(tmp_path: Path, redis_server: RedisServer):
    calls = [("zoom_in", ZOOM), ("zoom_in", INNER), ("lookback_reuse", {"image": "observation_2"}),
             ("zoom_in", {"image": "observation_3", "bbox_2d": [50, 40, 400, 300]}),
             ("zoom_in", {"image": "observation_4", "bbox_2d": [10, 20, 200, 180]})]

    async def main():
        a, b = worker(tmp_path, redis_server, 0), worker(tmp_path, redis_server, 1)
        memory = Core(Settings(data_dir=tmp_path / "memory", workers=2))
        sid, mid = await new_session(a), await new_session(memory)
        for i, (tool, args) in enumerate(calls):  # the workers take turns: each reads what the other made
            node, alone = await (a, b)[i % 2].call_tool(sid, tool, args), await memory.call_tool(mid, tool, args)
            assert node.ok and pixels_of(node) == pixels_of(alone), tool
        # Redis holds the upload and each image's record: the crops as recipes (their source, box and depth), the
        # lookback as an alias of one; the fourth crop in a chain is held as pixels instead.
        client = redis.Redis.from_url(redis_server.url)
        records = [json.loads(r) for r in client.lrange(f"ts:{{{sid}}}:images", 0, -1)]
        assert [(r["k"], r["s"], r.get("p"), r.get("n")) for r in records] == [
            ("original_image", "source", None, None), ("observation_1", "derived", "original_image", 1),
            ("observation_2", "derived", "observation_1", 2), ("observation_3", "derived", None, 2),
            ("observation_4", "derived", "observation_3", 3), ("observation_5", "held", None, None)]
        assert records[1]["x"] == [256, 160, 1536, 800] and records[1]["z"] is None  # rel1000 on 2560x1600
        assert sorted(client.hgetall(f"ts:{{{sid}}}:blobs")) == [b"original_image"]
        assert [p.name.split(".")[0] for p in held_dir(tmp_path, sid).iterdir()] == ["observation_5"]
        # The budget charges a recipe's pixels as it does held ones; any format is encoded from the remade pixels.
        info = await b.session_info(sid)
        assert info.bytes_held >= sum(r["w"] * r["h"] * 3 for r in records[1:3] + records[4:])
        for key in ("observation_2", "observation_4"):
            made = [(await core.image_bytes(s, key, "png"))[0] for core, s in ((b, sid), (memory, mid))]
            assert Image.open(io.BytesIO(made[0])).tobytes() == Image.open(io.BytesIO(made[1])).tobytes()
        for core in (a, b, memory):
            await core.stop()

    asyncio.run(main())


def test_a_recipe_with_a_resize_is_remade_by_another_worker(tmp_path: Path, redis_server: RedisServer):
    from toolserver.memorymap import CallCommit, Derivation, DerivedPixels, ImageEntry
    from toolserver.resample import resize_bicubic

    async def main():
        a, b = worker(tmp_path, redis_server, 0), worker(tmp_path, redis_server, 1)
        sid = await new_session(a)
        async with a.store.exclusive(sid) as session:
            source = session.by_key["original_image"]
            derivation = Derivation(source, (30, 40, 130, 90), (250, 125))
            made = derivation.make(source.pixels)
            assert made.tobytes() == resize_bicubic(source.pixels.crop((30, 40, 130, 90)), (250, 125)).tobytes()
            kept = a.store.derive_pixels(sid, derivation, made)
            assert kept == DerivedPixels("original_image", (30, 40, 130, 90), (250, 125), 1, 250 * 125 * 3)
            entry = ImageEntry(key="observation_1", index=1, origin="tool:zoom_in", pixels=made, view_size=None)
            await a.store.commit_call(session, CallCommit(entries=[entry], blobs=[kept], record="{}"))
        again = await b.store.get(sid)
        assert again.by_key["observation_1"].pixels.tobytes() == made.tobytes()
        for core in (a, b):
            await core.stop()

    asyncio.run(main())


def test_a_worker_reads_only_the_image_records_it_has_not_read_yet(tmp_path: Path, redis_server: RedisServer):
    async def main():
        a, b = worker(tmp_path, redis_server, 0), worker(tmp_path, redis_server, 1)
        sid = await new_session(a)
        for _ in range(3):
            assert (await a.call_tool(sid, "zoom_in", ZOOM)).ok
        store = b.store
        assert isinstance(store, RedisStore)
        touch, sent = store._touch, []

        async def counted(keys, args):
            reply = await touch(keys=keys, args=args)
            if reply[0] == 1:
                sent.append((args[2], len(reply[2])))  # (records it had, records sent)
            return reply

        store._touch = counted
        assert len((await b.session_info(sid)).images) == 4
        assert len((await b.session_info(sid)).images) == 4
        assert (await a.call_tool(sid, "zoom_in", INNER)).ok  # another worker adds one
        after = await b.session_info(sid)
        assert [i.key for i in after.images] == ["original_image", *(f"observation_{n}" for n in range(1, 5))]
        assert sent == [(0, 4), (4, 0), (4, 1)]
        await a.release(sid)
        with pytest.raises(NotFound):  # released elsewhere: what it had read is forgotten with it
            await b.session_info(sid)
        assert sid not in store._records
        for core in (a, b):
            await core.stop()

    asyncio.run(main())


def test_held_images_go_with_a_released_session_and_with_an_expired_one(tmp_path: Path, redis_server: RedisServer):
    async def main():
        a, b = worker(tmp_path, redis_server, 0), worker(tmp_path, redis_server, 1)
        released = await new_session(a)
        await a.call_tool(released, "rotate", ROTATE)
        assert held_dir(tmp_path, released).is_dir()
        await b.release(released)  # by the other worker
        assert not held_dir(tmp_path, released).exists()
        expiring, live = await new_session(a, ttl_s=1.5), await new_session(a)
        await a.call_tool(expiring, "rotate", ROTATE)
        await a.call_tool(live, "rotate", ROTATE)
        assert await b.store.sweep_ended() == 0  # both live: nothing touched
        await asyncio.sleep(1.8)  # Redis expires the first by itself: no release runs
        assert held_dir(tmp_path, expiring).is_dir()
        assert await b.store.sweep_ended() == 1  # what every worker's periodic sweep runs
        assert not held_dir(tmp_path, expiring).exists() and held_dir(tmp_path, live).is_dir()
        assert (await a.call_tool(live, "zoom_in", INNER)).ok
        for core in (a, b):
            await core.stop()

    asyncio.run(main())


def test_a_keyed_call_runs_once_across_workers_and_a_lapsed_call_never_overwrites(tmp_path: Path,
                                                                                redis_server: RedisServer):
    async def main():
        a, b = worker(tmp_path, redis_server, 0), worker(tmp_path, redis_server, 1)
        sid = await new_session(a)
        key = "call-1"
        results = await asyncio.gather(*(core.call_tool(sid, "rotate", ROTATE, idempotency_key=key)
                                         for core in (a, b, a, b)))
        assert {r.images[0].key for r in results} == {"observation_1"}
        assert len({pixels_of(r) for r in results}) == 1
        assert (await b.session_info(sid)).tool_calls == 1
        assert len(list(held_dir(tmp_path, sid).iterdir())) == 1  # the replays wrote nothing
        # A call whose lock lapsed holds its pixels under a name of its own: the committed image is untouched.
        store = a.store
        assert isinstance(store, RedisStore)
        late = await asyncio.to_thread(store.hold_pixels, sid, "observation_1", Image.new("RGB", (8, 8), "red"))
        assert late is not None and late.name.startswith("observation_1.")
        again = await b.call_tool(sid, "rotate", ROTATE, idempotency_key=key)
        assert pixels_of(again) == pixels_of(results[0])
        with pytest.raises(NotFound):
            await b.image_bytes(sid, "observation_9")
        for core in (a, b):
            await core.stop()

    asyncio.run(main())


def test_a_redis_several_nodes_share_keeps_tool_images_in_redis(tmp_path: Path, redis_server: RedisServer):
    async def main():
        core = worker(tmp_path, redis_server, 0, holds=False)  # `SESSION_STORE=redis` named by the operator
        sid = await new_session(core)
        assert (await core.call_tool(sid, "zoom_in", ZOOM)).ok
        blobs = redis.Redis.from_url(redis_server.url).hgetall(f"ts:{{{sid}}}:blobs")
        assert blobs[b"observation_1"].startswith(b"\x89PNG")
        assert not held_dir(tmp_path, sid).exists()
        await core.stop()

    asyncio.run(main())


def test_held_pixels_come_back_exact_are_never_trimmed_and_go_with_their_session(tmp_path: Path):
    from toolserver.stores.node_pixels import NodePixels

    node = NodePixels(tmp_path / "pixels", max_bytes=4096)  # a cache budget far below the held image
    image = Image.effect_noise((64, 48), 40).convert("RGB")
    size = node.hold("s1", "observation_1.ab", image)
    assert size is not None and size > 4096
    assert node.hold("s1", "observation_1.ab", image) is None  # a name is written once: never overwritten
    for i in range(8):  # the cache overflows its budget and is trimmed; the held image is not touched
        node.put((f"content:x{i}", ""), Image.new("L", (32, 32), i))
    back = node.held("s1", "observation_1.ab")
    assert back is not None and back.mode == "RGB" and back.tobytes() == image.tobytes()
    assert node.sessions() == {"s1"}
    node.drop_session("s1")
    assert node.held("s1", "observation_1.ab") is None and node.sessions() == set()
    assert node.hold("s1", "observation_2.cd", image.convert("P")) is None  # a palette: the store encodes it


def test_a_part_of_the_node_s_pixels_is_read_without_the_whole(tmp_path: Path):
    from toolserver.stores.node_pixels import NodePixels

    node = NodePixels(tmp_path / "pixels", max_bytes=1 << 24)
    noise = Image.effect_noise((97, 61), 60)
    images = {mode: noise.convert(mode) for mode in ("RGB", "L", "RGBA", "I", "F", "CMYK")}
    images["I;16"] = noise.convert("I").point(lambda v: v * 200).convert("I;16")
    for mode, image in images.items():
        node.put((f"content:{mode}", ""), image)
        for box in ((0, 0, 97, 61), (13, 7, 60, 59), (96, 60, 97, 61)):
            part = node.region((f"content:{mode}", ""), box)
            assert part is not None and part.mode == mode and part.tobytes() == image.crop(box).tobytes(), (mode, box)
        for outside in ((0, 0, 98, 61), (-1, 0, 10, 10), (5, 5, 5, 9)):  # not inside: the caller crops the whole
            assert node.region((f"content:{mode}", ""), outside) is None
    node.put(("content:bits", ""), noise.convert("1"))  # packed bits are not cut by byte
    assert node.region(("content:bits", ""), (0, 0, 8, 8)) is None
    assert node.region(("content:none", ""), (0, 0, 8, 8)) is None
    node.hold("s1", "observation_1.ab", images["RGB"])
    held = node.held_region("s1", "observation_1.ab", (3, 4, 50, 40))
    assert held is not None and held.tobytes() == images["RGB"].crop((3, 4, 50, 40)).tobytes()


def test_a_zoom_reads_only_its_box_of_the_node_s_pixels(tmp_path: Path, redis_server: RedisServer):
    """A worker that did not decode the photograph cuts each zoom from the node's memory: its crops are those of one
    process, and it never copies a whole image it zooms into (the upload, a held one, a recipe's source) into its
    own cache; it keeps only the crops it made."""
    calls = [(1, "zoom_in", ZOOM), (1, "zoom_in", INNER), (1, "lookback_reuse", {"image": "observation_1"}),
             (1, "zoom_in", {"image": "observation_3", "bbox_2d": [50, 40, 400, 300]}), (0, "rotate", ROTATE),
             (1, "zoom_in", {"image": "observation_5", "bbox_2d": [100, 100, 900, 900]})]

    async def main():
        workers = worker(tmp_path, redis_server, 0), worker(tmp_path, redis_server, 1)
        memory = Core(Settings(data_dir=tmp_path / "memory", workers=2))
        sid, mid = await new_session(workers[0]), await new_session(memory)
        whole = {(2560, 1600)}  # the upload's size, then the rotated image's
        for index, tool, args in calls:
            node, alone = await workers[index].call_tool(sid, tool, args), await memory.call_tool(mid, tool, args)
            assert node.ok and pixels_of(node) == pixels_of(alone), tool
            whole |= {(image.width, image.height) for image in alone.images} if tool == "rotate" else set()
            cached = [image.size for image in workers[1].store.cache._cache.values()]
            assert cached and not whole & set(cached), f"{tool} {args}: {cached}"
        assert workers[1].store.cache.node.hits >= 2  # the upload's box and the held image's, from the node
        for core in (*workers, memory):
            await core.stop()

    asyncio.run(main())


def test_a_session_read_from_redis_is_freed_without_the_collector(tmp_path: Path, redis_server: RedisServer):
    """A session map built from Redis records (and the pixels its entries loaded) goes as soon as its last
    reference does: its entries' loaders reach their sources, not the map, so no reference cycle waits for a
    collection that the pixels' size never triggers (measured: 0.46 GB of released sessions' photographs and crops
    still held by one worker of a node, idle, until a full collection)."""
    import gc
    import weakref

    async def main():
        a = worker(tmp_path, redis_server, 0)
        sid = await new_session(a)
        assert (await a.call_tool(sid, "zoom_in", ZOOM)).ok
        assert (await a.call_tool(sid, "zoom_in", {"image": "observation_1", "bbox_2d": [10, 10, 200, 150]})).ok
        gc.collect()
        gc.disable()
        try:
            session = await a.store.get(sid)
            pixels = [weakref.ref(entry.pixels) for entry in session.images]  # every kind: upload, crop of crop
            regions = [entry.region((0, 0, 8, 8)).size for entry in session.images]
            mapped = weakref.ref(session)
            a.store.cache._cache.clear()
            del session
            assert mapped() is None and all(ref() is None for ref in pixels)
        finally:
            gc.enable()
        assert regions == [(8, 8)] * 3
        await a.stop()

    asyncio.run(main())


def test_a_group_s_model_view_is_made_once_per_node(tmp_path: Path, redis_server: RedisServer, monkeypatch):
    """Pixel-Reasoner crops an input's model view (a bicubic resize and a JPEG round trip, ~150 MB and ~0.3 s for a
    13 MP photograph). A GRPO group's sessions on two workers share one view, made by the first and read from the
    node by every other (it was made again by each session on each worker, 8x the CPU and 7x the memory of one
    process on the race workload); the crops are one process's, byte for byte."""
    from toolserver.profiles import pixel_reasoner

    made = []
    real = pixel_reasoner.jpeg_round_trip
    monkeypatch.setattr(pixel_reasoner, "jpeg_round_trip", lambda image: made.append(1) or real(image))
    crop = {"bbox_2d": [0.1, 0.1, 0.6, 0.7], "target_image": 1}

    async def main():
        a, b = worker(tmp_path, redis_server, 0), worker(tmp_path, redis_server, 1)
        sids = [await new_session(core, profile="pixel-reasoner") for core in (a, b, b, a)]
        results = [await core.call_tool(sid, "crop_image", crop) for sid, core in zip(sids, (a, b, b, a), strict=True)]
        assert len(made) == 1 and all(r.ok for r in results)
        memory = Core(Settings(data_dir=tmp_path / "memory", workers=2))
        alone = await memory.call_tool(await new_session(memory, profile="pixel-reasoner"), "crop_image", crop)
        assert {base64.b64decode(r.images[0].data) for r in results} == {base64.b64decode(alone.images[0].data)}
        for core in (a, b, memory):
            await core.stop()

    asyncio.run(main())
