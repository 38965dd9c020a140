"""Decoded inputs shared by content: sessions that upload the same bytes share one decode and one copy of the
pixels. The rollouts of one prompt in GRPO-style training (verl's `rollout.n`) all send their prompt's image,
and each would otherwise decode it (≈ 50 ms for 12 MP) and hold its own 38 MB copy.

Pixels are immutable once registered, so sharing them is safe. Nothing is kept for its own sake: an entry lives
as long as some session holds its pixels (a weak reference), and concurrent first uploads of the same bytes
wait for one decode instead of racing. Where the store keeps pixels (a node's shared copy), it is asked first: it
reads them from there, or decodes them once for the whole node while its other workers wait for them.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import weakref
from collections.abc import Awaitable, Callable

from PIL import Image

from toolserver.imaging import DecodedImage


class SharedDecodes:
    def __init__(self) -> None:
        self._pixels: weakref.WeakValueDictionary[tuple[bytes, str], Image.Image] = weakref.WeakValueDictionary()
        self._formats: dict[tuple[bytes, str], str] = {}
        self._pending: dict[tuple[bytes, str], asyncio.Future[DecodedImage]] = {}
        self.hits = 0

    def __len__(self) -> int:
        return len(self._pixels)

    async def decode(self, data: bytes, alpha: str, decode: Callable[[], Awaitable[DecodedImage]],
                     known: Callable[[str], Awaitable[Image.Image | None]] | None = None) -> DecodedImage:
        """`decode()`'s result for these bytes, computed once while any session holds it. `known(content)`: the
        pixels a store keeps for them (decoded already by a node's other worker or for a session gone from this
        one's memory, else decoded by the store itself, once a node), taken instead of `decode()`; None: decode."""
        key = (hashlib.sha256(data).digest(), alpha)
        content = f"{key[0].hex()}:{alpha}"
        pixels = self._pixels.get(key)
        if pixels is not None:
            self.hits += 1
            return DecodedImage(pixels=pixels, source_bytes=data, source_format=self._formats[key], content=content)
        pending = self._pending.get(key)
        if pending is not None:  # the same bytes are being decoded for another session: wait for that
            self.hits += 1
            shared = await asyncio.shield(pending)
            return DecodedImage(pixels=shared.pixels, source_bytes=data, source_format=shared.source_format,
                                content=content)
        future: asyncio.Future[DecodedImage] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            pixels = None if known is None else await known(content)
            if pixels is not None:
                with Image.open(io.BytesIO(data)) as header:  # its format from the header alone, no decode
                    decoded = DecodedImage(pixels=pixels, source_bytes=data, source_format=header.format or "",
                                           content=content)
            else:
                decoded = await decode()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a failure nobody else waited for is not logged as unhandled
            raise
        finally:
            del self._pending[key]
        decoded = DecodedImage(pixels=decoded.pixels, source_bytes=decoded.source_bytes,
                               source_format=decoded.source_format, content=content)
        self._pixels[key] = decoded.pixels
        self._formats[key] = decoded.source_format
        weakref.finalize(decoded.pixels, self._formats.pop, key, None)
        future.set_result(decoded)
        return decoded
