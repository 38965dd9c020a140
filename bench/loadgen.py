"""A load generator cheap enough not to be what limits a node: keep-alive HTTP/1.1 POSTs of JSON on asyncio streams.

httpx's async client cost about 1.3 ms of CPU a call on the 2-core machine (BENCHMARKS.md, "One node, per call"): at
the 1,800 calls/s asked of a 16-core node, the benchmark's client processes would take more than two of the cores it
measures. This one writes each request's bytes itself and reads each answer by its Content-Length, a small fraction
of that (`bench_node` reports the clients' own CPU per call beside each row). Written by hand because no HTTP client
library here is that cheap; it speaks only what the benchmarks send (JSON bodies to one host, answers with a
Content-Length, no TLS, no redirects) and raises on anything else.
"""

from __future__ import annotations

import asyncio
import contextlib

import orjson


class RawConnection:
    """One keep-alive HTTP/1.1 connection to `host:port`; reopened when the server closes it."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        return self._reader, self._writer

    async def post_json(self, path: str, payload: object) -> tuple[int, bytes]:
        """POST `payload` as JSON to `path`: the status and the body."""
        body = orjson.dumps(payload)
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        reader, writer = await self._open()
        writer.write(head + body)
        status, headers = await self._head(reader)
        if headers.get(b"transfer-encoding"):
            raise RuntimeError("a chunked answer: this load generator reads Content-Length answers only")
        data = await reader.readexactly(int(headers.get(b"content-length", b"0")))
        if headers.get(b"connection", b"").lower() == b"close":
            await self.close()
        return status, data

    @staticmethod
    async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes]]:
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw[:-4].split(b"\r\n")
        if not lines[0].startswith(b"HTTP/1.1 "):
            raise RuntimeError(f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return int(lines[0][9:12]), headers

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def answered_ok(status: int, body: bytes) -> bool:
    """A tool call's answer that worked: 200 and `"ok": true`."""
    return status == 200 and bool(orjson.loads(body).get("ok"))
