"""The parts of one node that need no running node: its shared decoded images (`stores/node_pixels.py`), the
supervisor's hand-out of connections (`node/handoff.py`) and how it holds the port (`node/supervisor.py`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import pytest
from PIL import Image

from tests.conftest import PHOTOS
from toolserver.stores.node_pixels import HEADER, NodePixels

BRIDGE = PHOTOS / "Bridge_by_Sander_Klootwijk.jpg"


# -- the node's shared decoded images -------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "pixel_bytes"), [("RGB", 4), ("RGBA", 4), ("L", 1), ("LA", 2), ("I;16", 2),
                                                   ("F", 4), ("CMYK", 4), ("1", None)])
@pytest.mark.parametrize("size", [(97, 61), (1100, 700)])  # one chunk written, and several (rawpixels.CHUNK_BYTES)
def test_node_pixels_give_back_the_same_pixels_in_another_object(tmp_path, mode, pixel_bytes, size):
    """The whole image and any box of it, as another process reads them, kept or held; RGB is kept as RGBX (Pillow's
    own layout, four bytes a pixel, so that a box's rows are plain copies)."""
    pixels = NodePixels(tmp_path / "px", 1 << 30)
    image = Image.open(BRIDGE).convert("RGB").resize(size).convert(mode)
    pixels.put(("content:abc", ""), image)
    written = pixels.hold("sess", "held", image)
    assert written == pixels._path(("content:abc", "")).stat().st_size
    other = NodePixels(tmp_path / "px", 1 << 30)  # as another process would read it
    again = other.get(("content:abc", ""))
    assert again is not None and again is not image
    assert again.mode == image.mode and again.size == image.size and again.tobytes() == image.tobytes()
    assert other.held("sess", "held").tobytes() == image.tobytes()
    if mode in ("RGB", "RGBA", "L"):  # Pillow's own layout: the file's pages themselves, read-only
        assert again.readonly
        again.putpixel((0, 0), (1, 2, 3, 4)[:len(again.getbands())] if mode != "L" else 5)  # Pillow copies first
        assert other.get(("content:abc", "")).tobytes() == image.tobytes()
    if pixel_bytes is None:  # bits packed eight a byte: no box is cut from its rows
        assert other.region(("content:abc", ""), (1, 2, 30, 40)) is None
        return
    assert other._path(("content:abc", "")).stat().st_size == HEADER.size + size[0] * size[1] * pixel_bytes
    for box in [(0, 0, *size), (13, 7, 58, 60), (size[0] - 1, size[1] - 1, *size), (0, 30, 1, 31)]:
        cut = other.region(("content:abc", ""), box)
        assert cut is not None and cut.mode == mode and cut.tobytes() == image.crop(box).tobytes(), box
        held = other.held_region("sess", "held", box)
        assert held is not None and held.tobytes() == cut.tobytes(), box
    assert other.region(("content:abc", ""), (10, 10, size[0] + 1, 20)) is None  # not inside the image


def test_node_pixels_skip_palettes_miss_cleanly_and_drop_a_session(tmp_path):
    pixels = NodePixels(tmp_path / "px", 1 << 30)
    pixels.put(("s1", "img_1"), Image.new("P", (8, 8)))  # a palette needs more than its pixels: not kept
    assert pixels.get(("s1", "img_1")) is None
    pixels.put(("s1", "img_2"), Image.new("RGB", (8, 8), (1, 2, 3)))
    pixels.put(("weird/../id", "x y"), Image.new("RGB", (4, 4)))  # any key is a safe file name
    assert pixels.get(("s1", "img_2")).getpixel((0, 0)) == (1, 2, 3)
    pixels.drop_session("s1")
    assert pixels.get(("s1", "img_2")) is None
    assert pixels.get(("weird/../id", "x y")) is not None
    (tmp_path / "px" / "c" / "broken").write_bytes(b"not an image")
    assert pixels.get(("content:broken", "")) is None
    assert all(p.resolve().is_relative_to((tmp_path / "px").resolve()) for p in (tmp_path / "px").rglob("*"))


def test_node_pixels_keep_their_mappings_and_let_go_of_removed_files(tmp_path):
    """Reads map a file once and keep the mapping (a mapping per read faulted in every page it touched); a file
    removed or replaced is never read through its old mapping, and its mapping is let go (its memory with it)."""
    pixels = NodePixels(tmp_path / "px", 1 << 30)
    pixels.put(("s1", "img"), Image.new("RGB", (64, 48), (9, 8, 7)))
    pixels.put(("s2", "img"), Image.new("RGB", (64, 48), (1, 1, 1)))
    for _ in range(3):
        assert pixels.region(("s1", "img"), (5, 6, 20, 30)).getpixel((0, 0)) == (9, 8, 7)
    assert pixels.get(("s2", "img")) is not None and len(pixels._maps) == 2  # one mapping a file, however many reads
    path = pixels._path(("s1", "img"))
    replaced = NodePixels(tmp_path / "px", 1 << 30)  # another process replaces the file (a new inode)
    path.unlink()
    replaced.put(("s1", "img"), Image.new("RGB", (64, 48), (200, 100, 50)))
    assert pixels.region(("s1", "img"), (5, 6, 20, 30)).getpixel((0, 0)) == (200, 100, 50)
    replaced.drop_session("s2")  # removed by another process: this one's next prune lets its mapping go
    assert pixels.get(("s2", "img")) is None
    pixels.forget_removed()
    assert len(pixels._maps) == 1


def test_node_pixels_keep_to_their_budget_oldest_first(tmp_path):
    one = 64 * 64 * 4 + HEADER.size  # RGB, kept as RGBX
    pixels = NodePixels(tmp_path / "px", 8 * one)
    for i in range(20):
        pixels.put((f"content:{i}", ""), Image.new("RGB", (64, 64), (i, i, i)))
        os.utime(pixels._path((f"content:{i}", "")), (i, i))  # written in this order, to the second
    assert pixels.nbytes() <= 8 * one
    assert pixels.get(("content:19", "")) is not None and pixels.get(("content:0", "")) is None


def test_a_worker_keeps_the_node_s_mapping_of_what_it_loaded_and_gives_back_a_large_load_s_memory(tmp_path,
                                                                                                 monkeypatch):
    """What a worker decoded or made goes to the node's files, and the worker keeps (and answers with) the node's
    read-only mapping of it, not its own copy; after a load of 16 MB or more, malloc's freed pages go back at once."""
    from toolserver.stores import redis_parts

    trims = []
    monkeypatch.setattr(redis_parts, "give_back_freed_memory", lambda: trims.append(1) or True)
    cache = redis_parts.DecodedCache(1 << 30, NodePixels(tmp_path / "px", 1 << 30))
    small = Image.open(BRIDGE).convert("RGB").resize((97, 61))
    got = cache.get(("content:small", ""), lambda: small.copy())
    assert got.readonly and got.tobytes() == small.tobytes() and trims == []
    large = Image.new("RGB", (2400, 2400), (9, 8, 7))  # over 16 MiB of pixels
    got = cache.get(("content:large", ""), lambda: large.copy())
    assert got.readonly and got.tobytes() == large.tobytes() and trims == [1]
    assert cache.get(("content:large", ""), lambda: pytest.fail("loaded twice")) is got


def test_a_trim_skips_what_other_processes_remove_meanwhile(tmp_path, monkeypatch):
    """Workers release sessions while another trims: a session folder listed, then removed before it is read, and a
    file listed, then removed before its size is read, are skipped (this raised from a tool call under load)."""
    one = 64 * 64 * 4 + HEADER.size
    pixels = NodePixels(tmp_path / "px", 4 * one)
    for i in range(4):
        pixels.put((f"sess{i}", "img"), Image.new("RGB", (64, 64), (i, i, i)))
    released, emptied = pixels._path(("sess1", "img")).parent, pixels._path(("sess2", "img")).parent
    real = os.scandir

    class Listed(list):  # what a scandir read, with its context manager
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def racing(path):
        if isinstance(path, int):  # rmtree's own, by descriptor
            return real(path)
        if Path(path) == released:
            shutil.rmtree(released)  # another worker released the session after its folder was listed
        with real(path) as entries:
            found = Listed(entries)
        if Path(path) == emptied:
            for entry in found:
                os.unlink(entry.path)  # and another trimmed a file after it was listed
        return found

    monkeypatch.setattr(os, "scandir", racing)
    assert pixels.nbytes() == 2 * one
    for i in range(4, 8):  # past the budget: each put may trim
        pixels.put((f"sess{i}", "img"), Image.new("RGB", (64, 64), (i, i, i)))
    pixels._trim()
    monkeypatch.undo()
    assert pixels.nbytes() <= 4 * one and pixels.get(("sess7", "img")) is not None


def test_an_image_shared_by_content_is_made_once_for_the_node_while_the_others_wait(tmp_path):
    """Two processes' caches (each with its own NodePixels on one directory, as a node's workers have) asked for one
    upload at once: one decodes it, the other waits on the node's lock and reads the first one's pixels."""
    import threading

    from toolserver.stores.redis_parts import DecodedCache

    caches = [DecodedCache(1 << 20, NodePixels(tmp_path / "px", 1 << 30)) for _ in range(2)]
    started, loads = threading.Event(), []

    def load() -> Image.Image:
        loads.append(1)
        started.set()
        time.sleep(0.3)  # the other asks meanwhile
        return Image.new("RGB", (40, 30), (7, 8, 9))

    got: list[Image.Image] = []
    first = threading.Thread(target=lambda: got.append(caches[0].get(("content:abc", ""), load)))
    first.start()
    assert started.wait(10)
    second = caches[1].get(("content:abc", ""), load)  # blocks until the first has kept it, then reads it
    first.join()
    assert len(loads) == 1 and second.tobytes() == got[0].tobytes() and second is not got[0]
    with caches[0].node.single_flight(("content:abc", ""), "d"):  # a held lock keeps out any other holder
        taken = threading.Event()

        def other() -> None:
            with caches[1].node.single_flight(("content:abc", ""), "d"):
                taken.set()

        waiter = threading.Thread(target=other)
        waiter.start()
        assert not taken.wait(0.3)
    assert taken.wait(10)
    waiter.join()


# -- connections, handed to the worker with the fewest ------------------------------------------------------
def test_the_dispatcher_hands_each_connection_to_the_worker_with_the_fewest():
    import socket

    from toolserver.node.handoff import Dispatcher

    listening = socket.create_server(("127.0.0.1", 0))
    dispatcher = Dispatcher(listening)
    links = {i: dispatcher.link(i) for i in range(3)}
    clients: list[socket.socket] = []

    def connect(n: int) -> dict[int, int]:
        clients.extend(socket.create_connection(listening.getsockname(), timeout=10) for _ in range(n))
        got = dict.fromkeys(links, 0)
        deadline = time.monotonic() + 10
        while sum(got.values()) < n and time.monotonic() < deadline:
            dispatcher.serve(0.05)
            for i, link in links.items():
                if link.fileno() < 0:
                    continue
                link.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    while True:
                        _, fds, _, _ = socket.recv_fds(link, 16, 8)
                        got[i] += len(fds)
                        for fd in fds:
                            os.close(fd)
        return got

    try:
        assert connect(9) == {0: 3, 1: 3, 2: 3}  # none ready yet (the node's start): all of them take their share
        links[0].send(b"ready")  # worker 0's app is up, the others still start: only it takes connections
        assert connect(3) == {0: 3, 1: 0, 2: 0}
        links[1].send(b"ready")
        links[2].send(b"ready")
        links[1].send(bytes([2]))  # worker 1: two of its connections closed
        assert connect(2) == {0: 0, 1: 2, 2: 0}  # 6, 1 and 3 open: worker 1 takes both
        links[2].close()  # worker 2 exits: nothing more goes to it
        assert connect(3) == {0: 0, 1: 3, 2: 0}  # 6 and 3 open
        assert sorted(dispatcher.links) == [0, 1]
    finally:
        for sock in (*clients, *links.values(), listening):
            sock.close()
        dispatcher.close()


def test_the_dispatcher_pauses_its_accepts_while_the_process_is_out_of_descriptors():
    """accept() failing with EMFILE leaves the connection queued and the listening socket readable: a dispatcher that
    only logged and returned woke at once and failed again (a spinning supervisor, a flooded log). It stops
    accepting for a while, then takes the connection once descriptors are free."""
    import errno
    import socket

    from toolserver.node import handoff
    from toolserver.node.handoff import Dispatcher

    class Exhausted(socket.socket):
        failures = 0
        full = True

        def accept(self):  # type: ignore[no-untyped-def]
            if Exhausted.full:
                Exhausted.failures += 1
                raise OSError(errno.EMFILE, "Too many open files")
            return super().accept()

    listening = Exhausted(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    dispatcher = Dispatcher(listening)
    link = dispatcher.link(0)
    link.setblocking(False)
    client = socket.create_connection(listening.getsockname(), timeout=10)
    got: list[int] = []
    try:
        until = time.monotonic() + 0.3
        while time.monotonic() < until:
            dispatcher.serve(0.05)
        assert Exhausted.failures == 1 and dispatcher.paused_until > 0
        Exhausted.full = False
        until = time.monotonic() + handoff.ACCEPT_PAUSE_S + 10
        while not got and time.monotonic() < until:
            dispatcher.serve(0.05)
            with contextlib.suppress(BlockingIOError):
                got.extend(socket.recv_fds(link, 16, 8)[1])
        assert len(got) == 1 and dispatcher.paused_until == 0.0  # the queued connection, handed to the worker
    finally:
        for fd in got:
            os.close(fd)
        for sock in (client, link, listening):
            sock.close()
        dispatcher.close()


@pytest.mark.parametrize("mode", ["balanced", "shared", "reuseport"])
def test_the_port_is_held_for_each_way_of_taking_connections(mode):
    import socket

    from toolserver.node.supervisor import bind, listener

    held = bind("127.0.0.1", 0, mode)
    port = held.getsockname()[1]
    try:
        listening = held.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        assert bool(listening) is (mode != "reuseport")  # reuseport: bound, so the kernel queues nothing to it
        assert held.get_inheritable() is (mode != "balanced")  # balanced: the workers never see the port
        if mode != "balanced":
            own = listener(held)  # what a worker accepts on
            try:
                assert own.getsockname()[1] == port and own.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                assert (own is held) is (mode == "shared")
            finally:
                own.close()
    finally:
        held.close()


def test_a_handed_connection_reports_its_close_plain_or_upgraded_to_a_websocket():
    """A worker adopts the connections its link brings into uvicorn (the real server and protocols) and reports
    each close once, a WebSocket's too (the upgrade hands the connection to another protocol)."""
    import asyncio
    import socket

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route, WebSocketRoute

    from toolserver.middleware import DrainGate
    from toolserver.serving import DrainingServer

    async def hello(_request):
        return PlainTextResponse("hi")

    async def hold(websocket):
        await websocket.accept()
        await websocket.receive()  # until the client goes

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server = DrainingServer(uvicorn.Config(Starlette(routes=[Route("/", hello), WebSocketRoute("/ws", hold)]),
                                           lifespan="off", log_level="warning"), DrainGate(), grace_s=1,
                            handoff=theirs)
    listening = socket.create_server(("127.0.0.1", 0))

    def handed() -> socket.socket:
        client = socket.create_connection(listening.getsockname(), timeout=10)
        conn, _ = listening.accept()
        socket.send_fds(ours, [b"c"], [conn.fileno()])
        conn.close()
        return client

    def answer(client: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            data += client.recv(4096)
        return data

    def told() -> list[bytes]:
        ours.settimeout(10)
        return [ours.recv(16)]

    def client_side() -> list[bytes]:
        messages = told()  # the worker is up
        plain = handed()
        plain.sendall(b"GET / HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
        assert answer(plain).startswith(b"HTTP/1.1 200")
        plain.close()
        messages += told()
        upgraded = handed()
        upgraded.sendall(b"GET /ws HTTP/1.1\r\nHost: node\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        assert answer(upgraded).startswith(b"HTTP/1.1 101")
        upgraded.close()
        messages += told()
        return messages

    async def main() -> list[bytes]:
        serving = asyncio.create_task(server.serve(sockets=[]))
        try:
            return await asyncio.to_thread(client_side)
        finally:
            server.should_exit = True
            await serving

    try:
        assert asyncio.run(main()) == [b"ready", bytes([1]), bytes([1])]
    finally:
        listening.close()
        ours.close()

