"""Reading `shm` delivery's handles: a tool image's raw pixels in shared memory, with no decoding.

    result = session.call("super_resolution", image="img_0", scale=4)   # a session with delivery "shm"
    pixels = read_shm(result.images[0])       # numpy uint8 (height, width, channels), mapped, not copied
    image = shm_image(result.images[0])       # or a PIL image (one copy)

The array maps the server's file read-only: no copy is made, and the pixels stay valid after the server removes
the file (with its session, or at `expires_at`), for as long as the array lives. Only a process on the server's
host, of the server's user, can open it (docs/delivery.md).
"""

from __future__ import annotations

import os
import stat
import time
from datetime import UTC, datetime

import numpy as np
from PIL import Image

from toolserver.client.errors import ToolServerError
from toolserver.models import ResultImage, ShmHandle

_CHANNELS = {"RGB": 3, "RGBA": 4, "L": 1}


class ShmHandleGone(ToolServerError):
    """The handle's file is not there (expired, released, or on another host) or is not what the handle says."""


def read_shm(image: ResultImage | ShmHandle, *, copy: bool = False) -> np.ndarray:
    """The pixels as a read-only (height, width, channels) uint8 array mapped from the file (`copy`: a writable
    array of their own instead). Raises ShmHandleGone with the reason where the file cannot be read."""
    handle = _handle(image)
    channels = _CHANNELS.get(handle.mode)
    if channels is None:
        raise ShmHandleGone(f"unknown pixel mode {handle.mode!r} in the handle", code="shm_invalid")
    expected = handle.width * handle.height * channels
    if expected != handle.nbytes or expected <= 0:
        raise ShmHandleGone(f"the handle's size ({handle.nbytes} bytes) does not match {handle.width}x{handle.height} "
                            f"{handle.mode}", code="shm_invalid")
    try:
        fd = os.open(handle.path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise ShmHandleGone(_gone_reason(handle), code="shm_gone") from None
    except OSError as exc:
        raise ShmHandleGone(f"cannot open {handle.path}: {exc}", code="shm_gone") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != expected:
            raise ShmHandleGone(f"{handle.path} is not the handle's file ({info.st_size} bytes, expected {expected})",
                                code="shm_invalid")
        with os.fdopen(os.dup(fd), "rb") as file:
            mapped = np.memmap(file, dtype=np.uint8, mode="r", shape=(handle.height, handle.width, channels))
    finally:
        os.close(fd)
    return np.array(mapped) if copy else mapped


def shm_image(image: ResultImage | ShmHandle) -> Image.Image:
    """The pixels as a PIL image (copied out of shared memory once)."""
    pixels = read_shm(image)
    if pixels.shape[2] == 1:
        return Image.fromarray(pixels[:, :, 0], mode="L")
    return Image.fromarray(pixels)


def _handle(image: ResultImage | ShmHandle) -> ShmHandle:
    if isinstance(image, ShmHandle):
        return image
    if image.shm is None:
        raise ValueError(f"image {image.key} was not delivered by `shm` (see its data, url or path)")
    return image.shm


def _gone_reason(handle: ShmHandle) -> str:
    when = datetime.fromtimestamp(handle.expires_at, UTC).isoformat(timespec="seconds")
    if time.time() >= handle.expires_at:
        return f"the shm file {handle.path} expired at {when} (the server's `shm_ttl_s`)"
    return (f"the shm file {handle.path} is gone before its expiry ({when}): its session was released or ended, the "
            "server stopped, or this process is not on the server's host")
