"""An image whose pixels are made only when something first reads them.

Pillow's own lazy form, as an opened file's: its mode and size are known from the start, and every method that
reads pixels (`crop`, `tobytes`, `save`, `convert`, numpy's `asarray`, ...) calls `load` first, which makes them.
A crop delivered by reference into a store that keeps its recipe (a node's) is never read during its call: its
size and mode are all the call needs, and cutting it would copy its box out of the shared photograph for nothing.

Written here rather than taken from a library: Pillow's `ImageFile` is the same idea bound to a decoder and a file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

from PIL import Image


class LazyImage(Image.Image):
    """`make()`'s image, made on the first read. `make` must give exactly `mode` and `size` (ValueError if not)."""

    def __init__(self, mode: str, size: tuple[int, int], make: Callable[[], Image.Image]):
        super().__init__()
        self._mode, self._size = mode, size
        self._make: Callable[[], Image.Image] | None = make

    @property
    def unread(self) -> bool:
        """Whether its pixels are still to be made."""
        return self._im is None

    def load(self) -> Any:  # Pillow's pixel access, or None
        if self._im is None:
            assert self._make is not None
            made = self._make()
            if (made.mode, made.size) != (self.mode, self.size):
                raise ValueError(f"a lazy image made {made.mode} {made.size}, not the {self.mode} {self.size} "
                                 "it was said to be")
            made.load()
            self.im, self.palette, self.info, self.readonly = made.im, made.palette, dict(made.info), made.readonly
            self._make = None  # what made it (a crop's source entry) is let go
        return super().load()

    def read(self) -> Image.Image:
        """Itself, its pixels made (an `ImageEntry`'s loader)."""
        self.load()
        return self


def unread(image: Image.Image) -> TypeGuard[LazyImage]:
    """Whether `image` is a `LazyImage` whose pixels nothing has read yet."""
    return isinstance(image, LazyImage) and image.unread
