"""Where input bytes come from: inline base64, a server path under an allowed root, or a URL.

URL fetching is off by default. When on, every hop (redirects included) must resolve only to public
addresses unless `url_allow_private` is set; the body is read in chunks and cut off at the byte limit.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx

from toolserver.config import Settings
from toolserver.errors import BadRequest, Forbidden, TooLarge
from toolserver.imaging import decode_base64
from toolserver.models import ImageInput

MAX_REDIRECTS = 5


def resolve_allowed_path(path: str, roots: list[Path]) -> Path:
    """The real path of `path` if it lies under one of `roots` (symlinks resolved), else Forbidden."""
    if not roots:
        raise Forbidden("server paths are disabled: no allowed roots are configured (TOOLSERVER_ALLOWED_ROOTS)")
    real = Path(path).expanduser().resolve()
    for root in roots:
        if real.is_relative_to(root.expanduser().resolve()):
            if not real.is_file():
                raise BadRequest(f"no such file: {path}", code="file_not_found")
            return real
    raise Forbidden(f"path {path!r} is outside the allowed roots")


def read_allowed_file(path: str, roots: list[Path], max_bytes: int) -> bytes:
    real = resolve_allowed_path(path, roots)
    size = real.stat().st_size
    if size > max_bytes:
        raise TooLarge(f"file is {size} bytes, over the {max_bytes}-byte limit")
    return real.read_bytes()


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def check_url_target(url: str, allow_private: bool) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"only http(s) URLs with a host can be fetched, got {url!r}", code="invalid_url")
    if allow_private:
        return
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(parts.hostname, parts.port or 0, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise BadRequest(f"cannot resolve host {parts.hostname!r}: {exc}", code="invalid_url") from None
    for info in infos:
        address = str(info[4][0])
        if not _is_public(address):
            raise Forbidden(f"URL host {parts.hostname!r} resolves to a private or local address ({address})")


async def fetch_url(url: str, settings: Settings) -> bytes:
    if not settings.allow_url_fetch:
        raise Forbidden("fetching images by URL is disabled on this server (TOOLSERVER_ALLOW_URL_FETCH)")
    async with httpx.AsyncClient(follow_redirects=False, timeout=settings.url_timeout_s) as client:
        for _ in range(MAX_REDIRECTS + 1):
            await check_url_target(url, settings.url_allow_private)
            try:
                async with client.stream("GET", url) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        continue
                    if response.status_code != 200:
                        raise BadRequest(f"fetching {url} answered HTTP {response.status_code}",
                                         code="fetch_failed")
                    chunks, total = [], 0
                    async for chunk in response.aiter_bytes():
                        total += len(chunk)
                        if total > settings.max_image_bytes:
                            raise TooLarge(f"image at {url} is over the {settings.max_image_bytes}-byte limit")
                        chunks.append(chunk)
                    return b"".join(chunks)
            except httpx.HTTPError as exc:
                raise BadRequest(f"fetching {url} failed: {exc}", code="fetch_failed") from None
    raise BadRequest(f"too many redirects fetching {url}", code="fetch_failed")


async def input_bytes(item: ImageInput, settings: Settings) -> bytes:
    if item.data is not None:
        return decode_base64(item.data, settings.max_image_bytes)
    if item.path is not None:
        return await asyncio.to_thread(read_allowed_file, item.path, settings.allowed_roots,
                                       settings.max_image_bytes)
    assert item.url is not None
    return await fetch_url(item.url, settings)
