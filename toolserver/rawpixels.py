"""An image's pixels in a raw layout, a chunk at a time, written where they go without a whole copy in between.

`Image.tobytes()` gathers its raw encoder's chunks in a list and joins them: for a 13 MP photograph that is 53 MB of
chunks, then 53 MB joined, on top of the image. A node's workers write every decoded upload, every model view and
every held tool image to the node's files, and the bicubic resize reads a photograph's rows into an array: each
would briefly hold the image three times over. Here the same encoder's chunks (1 MiB, whole rows) go straight to a
file or into a preallocated array, so the transient is one chunk (measured: BENCHMARKS.md, "One node's memory on the
race workload").

Written by hand: Pillow's raw encoder does the packing; only its loop is ours (Pillow's own loop either joins or,
in `ImageFile._save`, writes whole files without giving up the GIL between chunks).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
from PIL import Image

CHUNK_BYTES = 1 << 20


def raw_chunks(image: Image.Image, layout: str) -> Iterator[bytes]:
    """`image.tobytes("raw", layout)` as consecutive chunks of whole rows (at most about `CHUNK_BYTES` each)."""
    image.load()
    if image.width == 0 or image.height == 0:
        return
    encoder = Image._getencoder(image.mode, "raw", layout)
    try:
        encoder.setimage(image.im, (0, 0, *image.size))
        bufsize = max(CHUNK_BYTES, image.width * 4)  # at least one row (RawEncode.c packs whole rows)
        while True:
            _, errcode, data = encoder.encode(bufsize)
            if data:
                yield data
            if errcode:
                break
    finally:
        encoder.cleanup()
    if errcode < 0:
        raise RuntimeError(f"raw encoder error {errcode} packing a {image.mode} image as {layout}")


def write_raw(fd: int, image: Image.Image, layout: str, header: bytes = b"") -> int:
    """Write `header` then the image's pixels in `layout` to the open file `fd`; the bytes written."""
    written = _write_all(fd, header) if header else 0
    for data in raw_chunks(image, layout):
        written += _write_all(fd, data)
    return written


def raw_array(image: Image.Image, layout: str, pixel_bytes: int) -> np.ndarray:
    """The image's rows in `layout` as a (height, width * pixel_bytes) uint8 array, filled chunk by chunk."""
    out = np.empty(image.height * image.width * pixel_bytes, np.uint8)
    at = 0
    for data in raw_chunks(image, layout):
        out[at:at + len(data)] = np.frombuffer(data, np.uint8)
        at += len(data)
    if at != out.size:
        raise RuntimeError(f"{layout} rows of a {image.mode} image: {at} bytes, not {out.size}")
    return out.reshape(image.height, image.width * pixel_bytes)


def _write_all(fd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    return len(data)
