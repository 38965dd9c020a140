"""Derived images shared across sessions (`toolserver.core.shared_views`): sessions whose inputs have the same
bytes share one computation of a view and one copy of its pixels (and of its encodings), concurrent first calls
wait for that one computation, nothing outlives the sessions that hold it, and every result is, pixel for pixel
and byte for byte, what each session computing for itself returns. With either session store."""

from __future__ import annotations

import asyncio
import base64
import gc
import io
import threading
import time

import pytest
from PIL import Image

from tests.conftest import PHOTOS, b64
from tests.docs_helpers import make_pdf
from toolserver.core import Core
from toolserver.core.shared_views import SharedViews
from toolserver.imaging import encode_image
from toolserver.models import CreateSessionRequest, ImageInput
from toolserver.profiles import arm_thinker, pixel_reasoner
from toolserver.stores import redis as redis_store

PHOTO = (PHOTOS / "Wood.jpg").read_bytes()
CASES = [  # profile, tool, arguments, the module and name of the view's computation
    ("pixel-reasoner", "crop_image", {"bbox_2d": [100, 100, 600, 500], "target_image": 1}, pixel_reasoner,
     "jpeg_round_trip"),
    ("arm-thinker", "image_zoom_in_tool", {"image": "original_image", "bbox_2d": [100, 100, 600, 500]}, arm_thinker,
     "fetch_image_view"),
]


class Counting:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        time.sleep(0.05)  # long enough for the other sessions' first calls to arrive meanwhile
        return self.fn(*args, **kwargs)


def no_sharing(core: Core) -> None:
    core.services.shared.image = lambda key, compute, **_: compute()  # type: ignore[method-assign]
    core.services.shared.encoding = lambda image, fmt, encode: encode()  # type: ignore[method-assign]


async def rollouts(core: Core, profile: str, tool: str, args: dict, sessions: int = 6, photo: bytes = PHOTO):
    """`sessions` sessions upload the same photo at once and make the same first call at once; then a second."""
    made = await asyncio.gather(*(core.create_session(CreateSessionRequest(
        profile=profile, images=[ImageInput(data=b64(photo))])) for _ in range(sessions)))
    ids = [m.session_id for m in made]
    first = await asyncio.gather(*(core.call_tool(sid, tool, args) for sid in ids))
    second = await asyncio.gather(*(core.call_tool(sid, tool, args) for sid in ids))
    return ids, [*first, *second]


@pytest.mark.slow
@pytest.mark.parametrize(("profile", "tool", "args", "module", "name"), CASES, ids=[c[0] for c in CASES])
def test_one_view_for_all_sessions_and_the_same_bytes(settings_any_store, monkeypatch, profile, tool, args, module,
                                                      name):
    counting = Counting(getattr(module, name))
    monkeypatch.setattr(module, name, counting)

    async def run(shared: bool):
        core = Core(settings_any_store.model_copy(update={"redis_prefix": settings_any_store.redis_prefix
                                                          + ("s" if shared else "u")}))
        if not shared:
            no_sharing(core)
            # and the Redis store keeps each session's view under the session, not the input's content
            monkeypatch.setattr(redis_store, "_view_key", lambda session_id, entry, rule: (
                session_id, f"{entry.blob_key}|view:{rule}"))
        try:
            ids, results = await rollouts(core, profile, tool, args)
            observations = [await core.image_bytes(sid, "observation_1", "png") for sid in ids]
            for sid in ids:
                await core.release(sid)
            core.archive.flush()  # the archive holds a released session's images until their thumbnails are out
            if hasattr(core.store, "cache"):  # the Redis store's decoded cache keeps an input's view by its content
                core.store.cache._cache.clear()  # (bounded, least recently used first), as it keeps its pixels
            gc.collect()
            return results, observations, len(core.services.shared), core.services.shared.computed
        finally:
            await core.stop()

    results, observations, left, computed = asyncio.run(run(shared=True))
    assert counting.calls == 1 and computed == 1  # six sessions, two rounds of calls: one view
    assert left == 0  # released sessions leave nothing behind
    alone, alone_observations, _, _ = asyncio.run(run(shared=False))
    assert counting.calls == 1 + 6  # each session for itself: six views
    assert all(r.ok for r in results) and len({r.images[0].data for r in results}) == 1
    assert [r.images[0].data for r in results] == [r.images[0].data for r in alone]  # the same bytes
    assert observations == alone_observations  # and the same pixels held (as PNG)


def test_the_view_is_one_copy_in_memory(settings):
    async def run():
        core = Core(settings)
        try:
            ids, results = await rollouts(core, *CASES[0][:3])
            sessions = [await core.store.get(sid) for sid in ids]
            views = {id(view) for s in sessions for view in s.images[0].views.values()}
            assert len(views) == 1  # every session holds the same view object
            assert all(r.ok for r in results)
        finally:
            await core.stop()

    asyncio.run(run())


def test_inputs_differing_by_a_pixel_do_not_share(settings):
    image = Image.open(io.BytesIO(PHOTO)).convert("RGB")
    other = image.copy()
    other.putpixel((0, 0), (0, 0, 0))

    async def run():
        core = Core(settings)
        try:
            args = CASES[0][2]
            _, results = await rollouts(core, "pixel-reasoner", "crop_image", args, 2)
            _, others = await rollouts(core, "pixel-reasoner", "crop_image", args, 2,
                                       photo=encode_image(other, "png"))
            assert core.services.shared.computed == 2
            assert all(r.ok for r in results + others)
        finally:
            await core.stop()

    asyncio.run(run())


def test_a_view_returned_as_it_is_is_encoded_once(settings, monkeypatch):
    """MGPO answers an invalid box with its whole processed view: the sessions share that image and its PNG."""
    from toolserver.core import delivery

    encodes = Counting(delivery.encode_image)
    monkeypatch.setattr(delivery, "encode_image", encodes)
    big = encode_image(Image.open(io.BytesIO(PHOTO)).convert("RGB").resize((1400, 1000)), "png")

    async def run(shared: bool):
        core = Core(settings)
        if not shared:
            no_sharing(core)
        try:
            made = [await core.create_session(CreateSessionRequest(
                profile="mgpo", images=[ImageInput(data=b64(big))], max_tool_calls=5)) for _ in range(4)]
            return await asyncio.gather(*(core.call_tool(m.session_id, "grounding", {"bbox_2d": [5, 5, 1, 1],
                                                                                       "label": "x"})
                                          for m in made))
        finally:
            await core.stop()

    results = asyncio.run(run(True))
    assert encodes.calls == 1
    alone = asyncio.run(run(False))
    assert encodes.calls == 1 + 4
    assert [r.images[0].data for r in results] == [r.images[0].data for r in alone]
    assert not results[0].ok and results[0].error.code == "invalid_box"


@pytest.mark.slow
def test_a_document_stitch_is_shared(tmp_path, monkeypatch):
    from tests.test_document_tools import doc_settings
    from toolserver.tools import doc_pages

    stitches = Counting(doc_pages.stitch)
    monkeypatch.setattr(doc_pages, "stitch", stitches)
    core = Core(doc_settings(tmp_path))
    core.documents.ingest(make_pdf(tmp_path / "manual.pdf"))
    args = {"filename": "manual", "query": "fit_linear_model least squares"}

    async def run():
        try:
            made = [await core.create_session(CreateSessionRequest(profile="arm-thinker")) for _ in range(3)]
            return await asyncio.gather(*(core.call_tool(m.session_id, "doc_page_retrieval_by_query", args)
                                          for m in made))
        finally:
            await core.stop()

    results = asyncio.run(run())
    assert stitches.calls == 1 and all(r.ok for r in results)
    assert len({r.images[0].data for r in results}) == 1
    pages = [Image.open(p).convert("RGB") for p in (core.documents.page_candidates("manual", n)[0]
                                                      for n in results[0].meta["pages"])]
    alone = doc_pages.stitch.fn(pages, target=1120, gap=8, max_pixels=doc_pages.MAX_PIXELS)
    got = Image.open(io.BytesIO(base64.b64decode(results[0].images[0].data)))
    assert got.convert("RGB").tobytes() == alone.tobytes()


def test_threads_wait_for_one_computation_and_share_its_failure():
    shared = SharedViews()
    calls, gate = [], threading.Event()

    def compute() -> Image.Image:
        calls.append(1)
        gate.wait(5)
        return Image.new("RGB", (4, 4))

    def broken() -> Image.Image:
        calls.append(1)
        gate.wait(5)
        raise ValueError("no view for this aspect ratio")

    images = _at_once(shared, "a", compute, gate)
    assert len(calls) == 1 and len({id(image) for image in images}) == 1
    gate.clear()
    failures = _at_once(shared, "b", broken, gate)
    assert len(calls) == 2 and all(isinstance(failure, ValueError) for failure in failures)
    assert len(shared) == 1  # the failure is not kept; the image is, while something holds it
    del images
    gc.collect()
    assert len(shared) == 0


def _at_once(shared: SharedViews, key: str, fn, gate: threading.Event) -> list:
    """Five threads ask for `key` at once; the computation finishes once they all wait."""
    out: list = []

    def ask() -> None:
        try:
            out.append(shared.image(key, fn))
        except ValueError as exc:
            out.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(5)]
    for thread in threads:
        thread.start()
    time.sleep(0.1)
    gate.set()
    for thread in threads:
        thread.join()
    return out


def test_a_call_waiting_for_another_sessions_view_gives_its_worker_back(settings, monkeypatch):
    """Two workers; three sessions need the view of photo A, whose computation is held back; a fourth session's
    call on photo B still runs: the calls waiting for A's view wait outside the workers."""
    gate = threading.Event()
    real = pixel_reasoner.jpeg_round_trip

    def held_for_a(image: Image.Image) -> Image.Image:
        if image.width > 1000:  # photo A's view (photo B is 500x400)
            assert gate.wait(20), "photo B's call never finished"
        return real(image)

    monkeypatch.setattr(pixel_reasoner, "jpeg_round_trip", held_for_a)
    other = encode_image(Image.open(io.BytesIO(PHOTO)).convert("RGB").resize((500, 400)), "png")
    args = CASES[0][2]

    async def run():
        core = Core(settings.model_copy(update={"workers": 2}))
        try:
            made = [await core.create_session(CreateSessionRequest(profile="pixel-reasoner", images=[
                ImageInput(data=b64(photo))])) for photo in (PHOTO, PHOTO, PHOTO, other)]
            calls = [asyncio.ensure_future(core.call_tool(m.session_id, "crop_image", args)) for m in made]
            b_result = await asyncio.wait_for(calls[3], 15)  # while A's view is still being computed
            assert not gate.is_set() and b_result.ok
            gate.set()
            a_results = await asyncio.gather(*calls[:3])
            assert all(r.ok for r in a_results) and len({r.images[0].data for r in a_results}) == 1
            assert core.services.shared.computed == 2
        finally:
            gate.set()
            await core.stop()

    asyncio.run(run())
