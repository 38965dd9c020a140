"""Inputs with the same bytes are decoded once and held once (a GRPO group's rollouts share their prompt's image)."""

import asyncio
import gc

import pytest

from tests.conftest import b64, gradient, png_bytes
from toolserver.core.shared_decodes import SharedDecodes
from toolserver.errors import ServiceError
from toolserver.imaging import DecodedImage, decode_image
from toolserver.models import CreateSessionRequest, ImageInput


@pytest.mark.slow
def test_sessions_uploading_the_same_bytes_share_one_decode(core):
    data = png_bytes(gradient(300, 200))

    async def run():
        await core.start()
        try:
            made = await asyncio.gather(*(core.create_session(CreateSessionRequest(images=[ImageInput(data=b64(data))]))
                                          for _ in range(6)))
            other = await core.create_session(CreateSessionRequest(images=[ImageInput(data=b64(png_bytes(
                gradient(301, 200))))]))
            stores = [await core.store.get(m.session_id) for m in made]
            pixels = {id(s.images[0].pixels) for s in stores}
            assert len(pixels) == 1  # six sessions, one decoded image
            assert (await core.store.get(other.session_id)).images[0].pixels is not stores[0].images[0].pixels
            assert core._intake.shared.hits == 5
            result = await core.call_tool(made[0].session_id, "zoom_in", {"image": 0, "bbox_2d": [0, 0, 500, 500]})
            assert result.ok and result.images[0].width == 150
            for m in [*made, other]:
                await core.release(m.session_id)
            del stores
            core.archive.flush()  # the trajectory archive holds a released session's images until it has written them
            gc.collect()
            assert len(core._intake.shared) == 0  # nothing kept once no session holds the pixels
        finally:
            await core.stop()

    asyncio.run(run())


def test_a_failed_decode_reaches_every_waiter_and_is_not_kept():
    shared = SharedDecodes()
    calls = 0

    async def broken() -> DecodedImage:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        raise ServiceError("the image data is broken")

    async def run():
        results = await asyncio.gather(*(shared.decode(b"xx", "white", broken) for _ in range(3)),
                                       return_exceptions=True)
        assert calls == 1 and all(isinstance(r, ServiceError) for r in results)
        good = png_bytes(gradient(10, 10))

        async def decode() -> DecodedImage:
            return decode_image(good, max_bytes=10**6, max_pixels=10**6)

        first = await shared.decode(good, "white", decode)
        again = await shared.decode(good, "white", decode)
        black = await shared.decode(good, "black", decode)  # another alpha rule is another decode
        assert again.pixels is first.pixels and black.pixels is not first.pixels

    asyncio.run(run())


def test_shared_pixels_keep_their_format():
    shared, alpha = SharedDecodes(), "white"
    data = png_bytes(gradient(8, 8))

    async def run():
        async def decode() -> DecodedImage:
            return decode_image(data, max_bytes=10**6, max_pixels=10**6, alpha=alpha)

        first = await shared.decode(data, alpha, decode)
        second = await shared.decode(data, alpha, decode)
        assert second.source_format == first.source_format == "PNG" and second.mime == "image/png"

    asyncio.run(run())
