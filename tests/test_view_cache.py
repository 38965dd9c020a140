"""The model's view of an image (ARM-Thinker's fetch_image resize, Groundlight's pre-resize, MGPO's
process_image) is computed once per image and rule, counted in the session's budget, shed first under
pressure, and kept in the replica's decoded cache with Redis sessions. Results stay bit for bit the same."""

from __future__ import annotations

import asyncio

import pytest
from PIL import Image

from tests.conftest import b64, gradient, png_bytes
from toolserver.config import Settings
from toolserver.core import Core
from toolserver.memorymap import image_nbytes
from toolserver.models import CreateSessionRequest, ImageInput
from toolserver.profiles import arm_thinker, groundlight, mgpo
from toolserver.profiles.mgpo import process_image
from toolserver.profiles.qwen_family import fetch_image_view

PICTURE = gradient(900, 700)


def run(coro):
    return asyncio.run(coro)


class Counting:
    """Wraps a view function and counts its calls."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0

    def __call__(self, image):
        self.calls += 1
        return self.fn(image)


async def session_with(core: Core, profile: str, picture: Image.Image = PICTURE, **settings) -> str:
    created = await core.create_session(CreateSessionRequest(
        profile=profile, images=[ImageInput(data=b64(png_bytes(picture)))], **settings))
    return created.session_id


CASES = [
    ("arm-thinker", "image_zoom_in_tool", {"image": "original_image", "bbox_2d": [100, 100, 600, 500]},
     arm_thinker, "fetch_image_view", fetch_image_view, {}),
    ("arm-thinker-qwen3vl", "image_zoom_in_tool", {"img_idx": 0, "label": "x", "bbox_2d": [100, 100, 600, 500]},
     arm_thinker, "fetch_image_view", fetch_image_view, {}),
    ("mgpo", "grounding", {"bbox_2d": [5, 5, 10, 10], "label": "x"}, mgpo, "process_image", process_image,
     {"max_tool_calls": 100}),
]


@pytest.mark.parametrize(("profile", "tool", "args", "module", "attr", "fn", "extra"), CASES,
                         ids=[c[0] for c in CASES])
def test_a_view_is_computed_once_and_results_are_unchanged(settings_any_store, monkeypatch, profile, tool, args,
                                                          module, attr, fn, extra):
    counting = Counting(fn)
    monkeypatch.setattr(module, attr, counting)
    picture = gradient(1400, 1000) if profile == "mgpo" else PICTURE  # MGPO shrinks only above 1,003,520 px

    async def main():
        core = Core(settings_any_store)
        try:
            sid = await session_with(core, profile, picture, **extra)
            first = await core.call_tool(sid, tool, args)
            second = await core.call_tool(sid, tool, args)
            return first, second
        finally:
            await core.stop()

    first, second = run(main())
    assert counting.calls == 1
    assert first.images[0].data == second.images[0].data  # same pixels, same encoder: same bytes
    assert first.ok == second.ok and first.error == second.error


def test_groundlight_view_is_cached_per_image_and_matches_the_uncached_result(monkeypatch, settings):
    calls = []
    original_resize = Image.Image.resize
    bicubic = groundlight.resize_bicubic

    def counting_resize(image, size):
        if image.size == (2000, 1500):  # the whole photo: the pre-resize to the view
            calls.append(size)
        return bicubic(image, size)

    monkeypatch.setattr(groundlight, "resize_bicubic", counting_resize)
    picture = gradient(2000, 1500)

    async def main():
        core = Core(settings)
        try:
            sid = await session_with(core, "groundlight", picture)
            results = [await core.call_tool(sid, "zoom", {"keypoint": [300 + 50 * i, 200]}) for i in range(3)]
            info = await core.session_info(sid)
            return results, info
        finally:
            await core.stop()

    results, info = run(main())
    assert calls == [(1024, 768)]  # once, for three calls
    assert all(r.ok for r in results)
    # The cached view gives what a fresh resize would: the window of the third call, upscaled.
    view = original_resize(picture, (1024, 768), Image.Resampling.BICUBIC)
    expected = groundlight.upscale_to(view.crop(groundlight.window_box(400, 200, 1024, 768)), 1024)
    import base64
    import io
    got = Image.open(io.BytesIO(base64.b64decode(results[2].images[0].data)))
    assert got.convert("RGB").tobytes() == expected.tobytes()
    assert info.bytes_held >= 1024 * 768 * 3  # the view is counted


def test_the_view_counts_in_the_budget_and_is_shed_before_a_refusal(tmp_path):
    picture = gradient(900, 700)
    view_bytes = image_nbytes(fetch_image_view(picture))
    upload = len(png_bytes(picture))
    pixels = 900 * 700 * 3
    # Room for the photo, its view and one crop, but not for a second photo unless the view goes.
    budget = upload + pixels + view_bytes + 1_000_000
    settings = Settings(data_dir=tmp_path / "data", workers=2, session_max_bytes=budget)

    async def main():
        core = Core(settings)
        try:
            sid = await session_with(core, "arm-thinker")
            held_before = (await core.session_info(sid)).bytes_held
            zoom = await core.call_tool(sid, "image_zoom_in_tool",
                                        {"image": "original_image", "bbox_2d": [0, 0, 300, 300]})
            held_after = (await core.session_info(sid)).bytes_held
            records, _ = await core.store.call_log(await core.store.get(sid))
            held_after -= sum(len(r) for r in records)  # the call's log record counts too
            entry = core.store._sessions[sid].images[0]
            cached_before = list(entry.views)
            await core.add_images(sid, [ImageInput(data=b64(png_bytes(gradient(500, 400))))])
            return zoom, held_before, held_after, cached_before, list(entry.views)
        finally:
            await core.stop()

    zoom, held_before, held_after, cached_before, cached_after = run(main())
    assert zoom.ok
    crop = zoom.images[0]
    assert held_after == held_before + view_bytes + crop.width * crop.height * 3
    assert cached_before == [arm_thinker.FETCH_IMAGE_RULE]
    assert cached_after == []  # shed to make room for real data


def test_a_view_that_does_not_fit_is_not_kept_and_the_call_still_works(tmp_path):
    picture = gradient(900, 700)
    budget = len(png_bytes(picture)) + 900 * 700 * 3 + 400_000  # no room for the ~1.9 MB view
    settings = Settings(data_dir=tmp_path / "data", workers=2, session_max_bytes=budget)

    async def main():
        core = Core(settings)
        try:
            sid = await session_with(core, "arm-thinker")
            zoom = await core.call_tool(sid, "image_zoom_in_tool",
                                        {"image": "original_image", "bbox_2d": [0, 0, 200, 200]})
            return zoom, core.store._sessions[sid].images[0].views
        finally:
            await core.stop()

    zoom, views = run(main())
    assert zoom.ok and views == {}


def test_views_of_idle_sessions_go_before_any_session_is_evicted(tmp_path):
    picture = gradient(900, 700)
    one_session = len(png_bytes(picture)) + 900 * 700 * 3
    view_bytes = image_nbytes(fetch_image_view(picture))
    crop_bytes = 2 * 45 * 2 * 35 * 3  # [0, 0, 50, 50] of the 896x700 view, doubled (under 224 px)
    small = gradient(600, 400)
    # Two sessions with their views and crops fit exactly; a small third session fits once one view is shed.
    total = 2 * (one_session + view_bytes + crop_bytes) + 10_000
    settings = Settings(data_dir=tmp_path / "data", workers=2, total_max_bytes=total)

    async def main():
        core = Core(settings)
        try:
            sids = []
            for _ in range(2):
                sid = await session_with(core, "arm-thinker")
                zoom = await core.call_tool(sid, "image_zoom_in_tool",
                                            {"image": "original_image", "bbox_2d": [0, 0, 50, 50]})
                assert zoom.ok and zoom.images[0].width * zoom.images[0].height * 3 == crop_bytes
                sids.append(sid)
            views_before = [list(core.store._sessions[sid].images[0].views) for sid in sids]
            third = await session_with(core, "arm-thinker", small)
            # Read before the stop, which hands every live session to the archive and forgets it.
            live = [sid in core.store._sessions for sid in [*sids, third]]
            views_after = [dict(core.store._sessions[sid].images[0].views) for sid in sids]
            return core.store.evicted, live, views_before, views_after
        finally:
            await core.stop()

    evicted, live, views_before, views_after = run(main())
    assert views_before == [[arm_thinker.FETCH_IMAGE_RULE]] * 2
    assert evicted == 0
    assert all(live)
    # Only as much as needed, least recently used first: the first session's view went, the second's stayed.
    assert views_after[0] == {}
    assert list(views_after[1]) == [arm_thinker.FETCH_IMAGE_RULE]


def test_redis_views_live_in_the_replicas_decoded_cache(settings_any_store, monkeypatch):
    if settings_any_store.session_store != "redis":
        pytest.skip("the in-memory store is covered above")
    counting = Counting(fetch_image_view)
    monkeypatch.setattr(arm_thinker, "fetch_image_view", counting)

    async def main():
        core = Core(settings_any_store)
        other = Core(settings_any_store)  # a second replica on the same Redis
        try:
            sid = await session_with(core, "arm-thinker")
            args = {"image": "original_image", "bbox_2d": [100, 100, 600, 500]}
            here = [await core.call_tool(sid, "image_zoom_in_tool", args) for _ in range(2)]
            there = [await other.call_tool(sid, "image_zoom_in_tool", args) for _ in range(2)]
            return here, there, core.store.cache, other.store.cache
        finally:
            await core.stop()
            await other.stop()

    here, there, cache, other_cache = run(main())
    assert counting.calls == 2  # once per replica
    assert {r.images[0].data for r in here + there} == {here[0].images[0].data}
    # An input's view is kept by its content (every session that uploaded the same bytes shares it)
    assert any(key[0].startswith("content:") and "|view:" in key[0] for key in cache._cache)
    assert any(key[0].startswith("content:") and "|view:" in key[0] for key in other_cache._cache)
