"""Derived images shared by content: a model view, Pixel-Reasoner's JPEG round trip, a document stitch — any
image that depends only on an input and a rule — computed once for every session that asks, and held once.

The rollouts of one prompt (GRPO's group) upload the same photograph; each session used to compute its own
view of it (≈ 0.3 s of CPU for 13 MP) and hold its own copy (38 MB). Here a derived image is named by what it
depends on — the input's content (the digest of its bytes and its alpha rule, `ImageEntry.content`, or a
document page's file identity) and the rule (`ToolContext.view`'s rule names the computation and all its
parameters) — and computed by the first session that asks; sessions asking meanwhile wait for that
computation (in their worker threads) instead of repeating it. Encodings of a shared image (an output format
the session asks for, the PNG a shared store keeps) are kept beside it, so they too are made once.

Nothing is kept for its own sake: the registry holds an image weakly, so it lives as long as some session (or
a store's cache of that session) holds it, and its encodings go with it. Pixels are immutable once made, so
sharing them is safe; the computation is the per-session one, so the pixels and bytes are the same.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from concurrent.futures import Future

from PIL import Image


# Not an Exception: a tool's generic `except Exception` (Pixel-Reasoner's crop has one) lets it by.
class ComputedElsewhere(BaseException):
    """Raised in a tool's thread when the image it needs is being computed for another session and its caller
    would rather give the worker back than wait in it (`ToolCalls` waits for `future`, then runs the call
    again)."""

    def __init__(self, future: Future[Image.Image]):
        super().__init__("an image this call needs is being computed for another session")
        self.future = future


class SharedViews:
    def __init__(self) -> None:
        self._images: weakref.WeakValueDictionary[Hashable, Image.Image] = weakref.WeakValueDictionary()
        self._pending: dict[Hashable, Future[Image.Image]] = {}
        self._key_of: dict[int, Hashable] = {}  # id(image) → its key, while the image lives
        self._encodings: dict[tuple[Hashable, str], bytes] = {}
        self._pending_encodings: dict[tuple[Hashable, str], Future[bytes]] = {}
        self._lock = threading.RLock()  # a collected image's finalizer may run while this thread holds it
        self.hits = 0  # images found made (or being made) by another session
        self.computed = 0

    def __len__(self) -> int:
        return len(self._images)

    def image(self, key: Hashable, compute: Callable[[], Image.Image], *, defer: bool = False) -> Image.Image:
        """`compute()`'s image for `key`, computed once while any session holds it. A computation that fails
        fails for every session waiting on it (the same input and rule fail the same way) and is not kept.
        `defer`: where another session is computing it, raise ComputedElsewhere instead of waiting."""
        with self._lock:
            found = self._images.get(key)
            if found is not None:
                self.hits += 1
                return found
            pending = self._pending.get(key)
            if pending is None:
                mine: Future[Image.Image] = Future()
                self._pending[key] = mine
            else:
                self.hits += 1
        if pending is not None:  # another session is computing it: wait for that
            if defer:
                raise ComputedElsewhere(pending)
            return pending.result()
        try:
            image = compute()
        except BaseException as exc:
            with self._lock:
                del self._pending[key]
            mine.set_exception(exc)
            raise
        with self._lock:
            del self._pending[key]
            self.computed += 1
            if key not in self._images:  # an image is registered once, with the finalizer that forgets it
                self._images[key] = image
                self._key_of[id(image)] = key
                weakref.finalize(image, self._forget, id(image), key)
            image = self._images[key]
        mine.set_result(image)
        return image

    def encoding(self, image: Image.Image, fmt: str, encode: Callable[[], bytes]) -> bytes:
        """`encode()` of `image` in `fmt`: made once and kept with the image when it is a shared one (the same
        pixels and the same encoder give the same bytes), else simply encoded."""
        with self._lock:
            key = self._key_of.get(id(image))
            if key is None or self._images.get(key) is not image:
                return encode()
            found = self._encodings.get((key, fmt))
            if found is not None:
                self.hits += 1
                return found
            pending = self._pending_encodings.get((key, fmt))
            if pending is None:
                mine: Future[bytes] = Future()
                self._pending_encodings[(key, fmt)] = mine
            else:
                self.hits += 1
        if pending is not None:
            return pending.result()
        try:
            data = encode()
        except BaseException as exc:
            with self._lock:
                del self._pending_encodings[(key, fmt)]
            mine.set_exception(exc)
            raise
        with self._lock:
            del self._pending_encodings[(key, fmt)]
            if self._images.get(key) is image:
                self._encodings[(key, fmt)] = data
        mine.set_result(data)
        return data

    def _forget(self, image_id: int, key: Hashable) -> None:
        with self._lock:
            if self._key_of.get(image_id) == key:
                del self._key_of[image_id]
            for entry in [k for k in self._encodings if k[0] == key]:
                del self._encodings[entry]
