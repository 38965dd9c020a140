"""The zygote's images: decoded once, by key, and inherited by every child through the fork (copy-on-write), so a
session's image crosses the pipe once, not with every execution. The least recently used go first past the
budget."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from PIL import Image


class ImageCache:
    def __init__(self, budget: int):
        self.images: OrderedDict[str, Image.Image] = OrderedDict()
        self.bytes, self.budget = 0, budget

    def resolve(self, message: dict[str, Any]) -> list[str]:
        """Each image spec of `message` as a PIL image (`resolved`), from its bytes or from the cache; the keys
        not cached."""
        resolved, missing = [], []
        for spec in message.get("images", []):
            key = spec.get("key")
            if "data" in spec:
                image = Image.frombytes(spec["mode"], tuple(spec["size"]), spec["data"])
                if key is not None:
                    self._remember(key, image)
            elif key in self.images:
                image = self.images[key]
                self.images.move_to_end(key)
            else:
                missing.append(str(key))
                continue
            resolved.append((spec["names"], image))
        message["resolved"] = resolved
        return missing

    def _remember(self, key: str, image: Image.Image) -> None:
        size = len(image.getbands()) * image.width * image.height
        if key in self.images or size > self.budget:
            return
        self.images[key] = image
        self.bytes += size
        while self.bytes > self.budget:
            _, old = self.images.popitem(last=False)
            self.bytes -= len(old.getbands()) * old.width * old.height
