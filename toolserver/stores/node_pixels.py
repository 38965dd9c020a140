"""Decoded images held once for the whole node, in shared memory, by every server process of `toolserver serve
--workers N`.

A GRPO group's rollouts upload the same photograph; each server process that serves one of their calls needs its
pixels. Without this, each process decodes the upload again and keeps its own copy (the Redis store's per-process
`DecodedCache`). With it, the first process to decode an image writes its raw pixels to a file in the node's private
directory on a tmpfs (`/dev/shm` where it has room), and every other process reads them back with one copy instead
of a decode. The files are the node's one held copy; a process keeps only a small cache of its own.

Written by hand rather than with `multiprocessing.shared_memory`: that module's segments have a resource tracker per
process that unlinks them when the process that made them exits, while these images must outlive the worker
that decoded them (a worker killed under load is replaced and the next one reads them). Plain files under one
directory that the node supervisor removes at exit have no such owner.

Layout: `c/<digest>` for inputs shared by content (their bytes and alpha rule: the decoded cache's `content:` keys)
and for the model views made from them (a GRPO group's rollouts share one), `s/<session>/<blob>` for a session's own
images, so that a released session's files go at once; both are a cache, trimmed to the budget. `h/<session>/<name>`
holds the tool images of a session whose store is the node's own (`hold`): there the file is the image's one stored
copy (Redis keeps only its record), so it is never trimmed and goes only with its session (released, or found
expired by the store's sweep). Such a file is written in place under a new name that no reader knows until the call
that wrote it commits. `l/` holds the lock files of `single_flight`, by which one process decodes an upload or makes
a view while the others wait for it. Each file is a 20-byte header (magic, layout, width, height) then the pixels in
that layout: `Image.tobytes()`'s, except that an RGB image is written as RGBX, four bytes a pixel, Pillow's own
layout in memory: a box is then read back row by row with a plain copy (a 1 MP box of a 13 MP photograph: 0.19 ms
against 0.43 ms from three bytes a pixel), for a third more shared memory. A file is written to a temporary name and
renamed, so a reader never sees half an image; readers may race an eviction, which is a miss. The byte budget is
kept by the writer that passes it: the least recently written files go first.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import mmap
import os
import shutil
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

from PIL import Image

from toolserver.memorymap import PixelBox
from toolserver.rawpixels import CHUNK_BYTES, write_raw

log = logging.getLogger("toolserver.store")
MAGIC = b"TSPX"
HEADER = struct.Struct("<4s8sII")  # magic, layout (ASCII, NUL-padded), width, height
MODES = frozenset({"1", "L", "LA", "RGB", "RGBA", "I", "F", "I;16", "CMYK", "YCbCr"})  # pixels alone say it all
LAYOUT = {"RGB": "RGBX"}  # a mode written in another raw layout than `tobytes()`'s (the default: the mode's own)
MODE_OF = {layout: mode for mode, layout in LAYOUT.items()}
LOCKS = 64  # lock files a pool of `single_flight`
MAPPED = frozenset({"RGBX", "RGBA", "L"})  # layouts that are Pillow's own in memory: read as a mapping, no copy
# Bytes a pixel takes in each layout, for those whose rows can be cut by byte ("1" packs bits)
PIXEL_BYTES = {"L": 1, "LA": 2, "I;16": 2, "RGB": 3, "YCbCr": 3, "RGBX": 4, "RGBA": 4, "CMYK": 4, "I": 4, "F": 4}


class NodePixels:
    """The node's decoded images in `directory` (shared by the server processes), bounded by `max_bytes`."""

    def __init__(self, directory: Path, max_bytes: int):
        self.directory = directory
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._written = 0  # bytes this process wrote since it last measured the directory
        self.hits = 0
        self.misses = 0
        self._dirs: set[str] = set()  # session folders of `h/` this process made (one mkdir per session)
        self._maps = Mappings()
        for part in ("c", "s", "h", "l"):
            (directory / part).mkdir(parents=True, exist_ok=True)

    def _path(self, key: tuple[str, str]) -> Path:
        owner, blob = key
        if owner.startswith("content:"):
            return self.directory / "c" / _safe(owner[len("content:"):])
        return self.directory / "s" / _safe(owner) / _safe(blob)

    @contextlib.contextmanager
    def single_flight(self, key: tuple[str, str], pool: str) -> Iterator[None]:
        """While held, no other thread of any of the node's processes holds it for `key`: what `key` names is made
        once for the node, the others wait and then read it. A lock file of the directory's `l/` (an advisory
        `flock`, let go by the kernel when its holder dies), one of `LOCKS` per `pool`: keys that share one wait
        for each other, and a holder may take another pool's lock (a view's maker decodes its input) but never its
        own pool's twice."""
        slot = int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=4).digest(), "little") % LOCKS
        fd = os.open(self.directory / "l" / f"{pool}{slot}", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # and with it the lock

    def get(self, key: tuple[str, str]) -> Image.Image | None:
        """The image under `key`, or None: for RGB, RGBA and L a read-only Image over the node's pages (no copy),
        for other modes a copy of this process."""
        return self._read(self._path(key))

    def mapping(self, key: tuple[str, str]) -> Image.Image | None:
        """The node's read-only mapping of `key`, for the process that has just written it (not counted as a hit),
        or None where its layout is read as a copy or it was not kept."""
        image = self._read(self._path(key), count=False)
        return image if image is not None and image.readonly else None

    def _read(self, path: Path, box: PixelBox | None = None, *, count: bool = True) -> Image.Image | None:
        try:
            mm = self._maps.get(path)
            if (header := _header(mm)) is None:
                return None
            layout, mode, width, height = header
            with memoryview(mm) as view:
                if box is None:
                    image = _mapped(mm, layout, mode, (width, height))
                    if image is None:
                        image = _unpacked(mode, (width, height), view[HEADER.size:], (layout, 0))
                else:
                    left, top, right, bottom = box
                    size = PIXEL_BYTES.get(layout, 0)
                    if not size or not (0 <= left < right <= width and 0 <= top < bottom <= height):
                        return None
                    # The box's rows straight from the mapping: the raw decoder steps a whole row (`stride`) each time
                    start = HEADER.size + (top * width + left) * size
                    image = _unpacked(mode, (right - left, bottom - top), view[start:], (layout, width * size))
        except (FileNotFoundError, ValueError, struct.error, OSError):
            if count:
                with self._lock:
                    self.misses += 1
            return None
        if count:
            with self._lock:
                self.hits += 1
        return image

    def mode(self, key: tuple[str, str]) -> str | None:
        """The mode of the image under `key` from its header alone (no pixel read), or None where it is not here."""
        return self._mode(self._path(key))

    def held_mode(self, session_id: str, name: str) -> str | None:
        return self._mode(self.directory / "h" / _safe(session_id) / _safe(name))

    def _mode(self, path: Path) -> str | None:
        try:
            header = _header(self._maps.get(path))
        except (FileNotFoundError, ValueError, struct.error, OSError):
            return None
        return None if header is None else header[1]

    def region(self, key: tuple[str, str], box: PixelBox) -> Image.Image | None:
        """`get(key).crop(box)`, reading only the box's bytes from the shared pages (a 1 MP crop of a 13 MP
        photograph copies 3 MB, not 40), or None where the image is not here or the box is not inside it."""
        return self._read(self._path(key), box)

    def put(self, key: tuple[str, str], image: Image.Image) -> None:
        """Keep `image` for the node, unless it is kept already, its mode needs more than its pixels (a palette),
        or the directory is full; never fails."""
        if image.mode not in MODES or self.max_bytes <= 0:
            return
        path = self._path(key)
        if path.exists():
            return
        layout = LAYOUT.get(image.mode, image.mode)
        nbytes = _nbytes(image, layout)
        if nbytes + HEADER.size > self.max_bytes:
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:  # the pixels a chunk at a time: no second copy of the image in this process (rawpixels.py)
                write_raw(fd, image, layout, HEADER.pack(MAGIC, layout.encode(), image.width, image.height))
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as exc:  # a full tmpfs, a removed directory at shutdown: the caller decoded it anyway
            log.debug("node pixels not kept: %s", exc)
            with contextlib.suppress(OSError):
                tmp.unlink()
            return
        with self._lock:
            self._written += nbytes + HEADER.size
            measure = self._written >= self.max_bytes // 8
            if measure:
                self._written = 0
        if measure:
            self._trim()

    def hold(self, session_id: str, name: str, image: Image.Image) -> int | None:
        """Write `image` as the session's held image `name` (replacing any file of that name), not counted against
        the cache's budget; the bytes written, or None where it cannot be held (its mode, a full tmpfs)."""
        if image.mode not in MODES:
            return None
        folder = self.directory / "h" / _safe(session_id)
        path = folder / _safe(name)
        layout = LAYOUT.get(image.mode, image.mode)
        header = HEADER.pack(MAGIC, layout.encode(), image.width, image.height)
        nbytes = _nbytes(image, layout)
        # Written in place: no reader knows the name before the call commits it, and it is new (O_EXCL). An image of
        # one chunk (most crops) is one system call (each gives up the GIL, and getting it back from a busy event loop
        # costs up to its switch interval); a larger one goes a chunk at a time, no second copy of it in this process.
        fd = -1
        try:
            if session_id not in self._dirs:
                folder.mkdir(parents=True, exist_ok=True)
                with self._lock:
                    self._dirs.add(session_id)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                if nbytes <= CHUNK_BYTES:
                    written = os.writev(fd, [header, image.tobytes("raw", layout)])
                else:
                    written = write_raw(fd, image, layout, header)
            finally:
                os.close(fd)
            if written != len(header) + nbytes:
                raise OSError(f"short write ({written} bytes)")
        except OSError as exc:  # a full tmpfs, a session folder swept meanwhile: the caller encodes it instead
            log.debug("node pixels not held: %s", exc)
            if fd >= 0:  # ours, half written
                with contextlib.suppress(OSError):
                    path.unlink()
            with self._lock:
                self._dirs.discard(session_id)
            return None
        return written

    def held(self, session_id: str, name: str) -> Image.Image | None:
        """The session's held image `name` (one copy), or None where it is gone (its session ended)."""
        return self._read(self.directory / "h" / _safe(session_id) / _safe(name))

    def held_region(self, session_id: str, name: str, box: PixelBox) -> Image.Image | None:
        """`held(...).crop(box)`, reading only the box's bytes, or None (gone, or the box is not inside it)."""
        return self._read(self.directory / "h" / _safe(session_id) / _safe(name), box)

    def drop_session(self, session_id: str) -> None:
        for part in ("s", "h"):
            shutil.rmtree(self.directory / part / _safe(session_id), ignore_errors=True)
        with self._lock:
            self._dirs.discard(session_id)
        self.forget_removed()

    def forget_removed(self) -> None:
        """Let go of this process's mappings of files that were removed (their memory goes with the last mapping)."""
        self._maps.prune(force=True)

    def sessions(self) -> set[str]:
        """The sessions that have files here (by folder name: a session id is one)."""
        found: set[str] = set()
        for part in ("s", "h"):
            with contextlib.suppress(OSError):
                found.update(p.name for p in (self.directory / part).iterdir() if not p.name.startswith("."))
        return found

    def _trim(self) -> None:
        """Remove the least recently written files until the directory holds 90% of the budget."""
        files = [(st.st_mtime, st.st_size, path) for part in ("c", "s")  # not `h/`: held
                 for path, st in _files(self.directory / part)]
        total = sum(size for _, size, _ in files)
        if total <= self.max_bytes:
            return
        for _, size, path in sorted(files):
            if total <= self.max_bytes * 0.9:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                total -= size

    def nbytes(self) -> int:
        return sum(st.st_size for _, st in _files(self.directory))


class Mappings:
    """This process's mappings of the node's files, kept open between reads. Mapping a file anew for every read
    made each read fault in every page it touched (a 1 MP box of a 13 MP photograph: 1.6 ms, of which 1.2 went to
    the faults; 0.4 ms from a mapping kept). A kept mapping costs no memory while its file is there (its pages are
    the file's, in the node's tmpfs); a removed file's pages live while a process maps it, so each read checks its
    file is the one mapped (a stat), and once a second (`prune`, also after a session's files go) the mappings of
    removed files are let go. At most `MAX_MAPPINGS`, the least recently read go first."""

    MAX_MAPPINGS = 256
    PRUNE_EVERY_S = 1.0

    def __init__(self) -> None:
        self._open: OrderedDict[Path, tuple[int, mmap.mmap]] = OrderedDict()
        self._lock = threading.Lock()
        self._pruned = time.monotonic()

    def get(self, path: Path) -> mmap.mmap:
        """The mapping of the file at `path` now (FileNotFoundError where there is none). A mapping is never closed
        here, only forgotten: a reader in another thread may hold it, and it unmaps with its last reference."""
        inode = os.stat(path).st_ino
        self.prune()
        with self._lock:
            held = self._open.get(path)
            if held is not None and held[0] == inode:
                self._open.move_to_end(path)
                return held[1]
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        with self._lock:
            self._open[path] = (inode, mm)
            self._open.move_to_end(path)
            while len(self._open) > self.MAX_MAPPINGS:
                self._open.popitem(last=False)
        return mm

    def prune(self, *, force: bool = False) -> None:
        """Forget the mappings whose files were removed or replaced (at most once a second unless `force`)."""
        now = time.monotonic()
        if not force and now - self._pruned < self.PRUNE_EVERY_S:
            return
        self._pruned = now
        with self._lock:
            held = list(self._open.items())
        gone = []
        for path, (inode, _) in held:
            try:
                if os.stat(path).st_ino != inode:
                    gone.append((path, inode))
            except OSError:
                gone.append((path, inode))
        with self._lock:
            for path, inode in gone:  # unless a reader mapped the new file meanwhile
                if path in self._open and self._open[path][0] == inode:
                    del self._open[path]

    def __len__(self) -> int:
        return len(self._open)


def _mapped(mm: mmap.mmap, layout: str, mode: str, size: tuple[int, int]) -> Image.Image | None:
    """The whole image as a read-only Image over the mapping itself, no copy (what `Image.frombuffer` does for the
    layouts that are Pillow's own in memory, here also an RGB image's RGBX), or None where the layout is not one
    of those. Its pages are the node's file: a worker that reads a 13 MP photograph or its model view takes no
    memory of its own for it (0.07 ms, where a copy took ~10 ms and 50 MB). The mapping lives while the image does
    (the file may be removed meanwhile: its pages go with the last mapping); Pillow copies a read-only image before
    changing it in place."""
    if layout not in MAPPED:
        return None
    try:
        core = Image.core.map_buffer(mm, size, "raw", HEADER.size, (mode, 0, 1))
    except (AttributeError, TypeError, ValueError, SystemError):  # a Pillow without it: copy instead
        return None
    image = Image.new(mode, (0, 0))._new(core)
    image.readonly = 1
    return image


def _header(mm: mmap.mmap) -> tuple[str, str, int, int] | None:
    """A kept file's layout, mode, width and height; None where it is not one (struct.error where it is too short)."""
    magic, raw, width, height = HEADER.unpack_from(mm, 0)
    if magic != MAGIC:
        return None
    layout = raw.rstrip(b"\0").decode()
    return layout, MODE_OF.get(layout, layout), width, height


def _unpacked(mode: str, size: tuple[int, int], data: memoryview, raw: tuple[str, int]) -> Image.Image:
    """`Image.frombytes(mode, size, data, "raw", raw)` without first filling the new image with zeros (which it
    does, and the rows are all written over at once: 20 % of a 3 MP box's read)."""
    image = Image.new(mode, size, None)
    image.frombytes(data, "raw", raw)
    return image


def _nbytes(image: Image.Image, layout: str) -> int:
    """The bytes of the image's pixels in `layout`."""
    if layout == "1":  # eight pixels a byte, each row to a whole byte
        return image.height * ((image.width + 7) // 8)
    return image.width * image.height * PIXEL_BYTES[layout]


def _files(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every file under `root` with its stat. Other processes remove files and whole session folders meanwhile
    (a released session, a trim of theirs): what is gone by the time it is read is skipped, not an error."""
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as entries:
                found = list(entries)
        except OSError:
            continue
        for entry in found:
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    folders.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    yield Path(entry.path), entry.stat(follow_symlinks=False)


def _safe(name: str) -> str:
    """A file name for any key part: itself where it is plain, else its digest."""
    if name and len(name) <= 128 and all(c.isalnum() or c in "-_." for c in name) and not name.startswith("."):
        return name
    return hashlib.sha256(name.encode()).hexdigest()
