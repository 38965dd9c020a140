"""The session-store contract: everything the core, the tools' context and the readiness report ask of a
store. The in-memory store (`stores.memory`) and the Redis store (`stores.redis`) implement it; a third store
implements these methods and nothing else.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from PIL import Image

from toolserver.memorymap import (
    Blob,
    CallCommit,
    Derivation,
    DerivedPixels,
    HeldPixels,
    ImageEntry,
    RecordedOutcome,
    SessionMap,
)
from toolserver.models import SessionSettings
from toolserver.stores.aliases import Aliases

CALL_LOG_LIMIT = 1000  # call records a session keeps (its latest)
# Told of a session as the store forgets it, before its images and calls are dropped: (session, why it went or None
# for a release, its call log's records, how many older ones were dropped). The trajectory archive listens.
SessionEnded = Callable[[SessionMap, "str | None", Sequence[str], int], None]


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    profile: str
    images: int
    calls: int
    age_s: float | None


@dataclass(frozen=True)
class StoreGauge:
    """A number the store reports to /metrics (a Prometheus gauge), read when metrics are scraped."""

    name: str
    help: str
    read: Callable[[], float]


class SessionStore(ABC):
    """Where sessions live. The core calls only these methods, so the backends are interchangeable."""

    kind: str
    # Whether tool images must come with an encoding to store (the in-memory store keeps pixels).
    stores_encoded: bool = False
    # Names for sessions, kept where every replica sees them (verl-tool's trajectories, MCP's sessions).
    aliases: Aliases
    # Who hears of each session that ends (a store that sees its sessions end calls it; see `SessionEnded`).
    ended: SessionEnded | None = None

    @abstractmethod
    async def create(self, settings: SessionSettings, ttl_s: float) -> SessionMap: ...

    @abstractmethod
    async def get(self, session_id: str) -> SessionMap:
        """The session, touched (its idle timer restarts); 404 unknown, 410 expired or evicted."""

    @abstractmethod
    def exclusive(self, session_id: str) -> AbstractAsyncContextManager[SessionMap]:
        """The session, held by this caller alone (one tool call at a time per session)."""

    @abstractmethod
    def mutating(self, session_id: str) -> AbstractAsyncContextManager[SessionMap]:
        """The session, for adding images or texts (exclusive where the store is shared)."""

    @abstractmethod
    async def release(self, session_id: str) -> None: ...

    @abstractmethod
    async def holds(self, session_id: str) -> bool:
        """Whether the session exists and has not expired, without touching it (for clean-up sweeps)."""

    @abstractmethod
    async def add_images(self, session: SessionMap, entries: list[ImageEntry],
                         blobs: Sequence[Blob] = (), *, observations: int = 0) -> None:
        """Charge, index and keep `entries` (`blobs`: their stored encodings, for stores that keep bytes);
        `observations` tool images are counted. All or nothing."""

    @abstractmethod
    async def add_texts(self, session: SessionMap, texts: list[tuple[str, str]]) -> None: ...

    @abstractmethod
    async def commit_call(self, session: SessionMap, commit: CallCommit) -> None:
        """A tool call's whole effect, all or nothing: its images, its count, its log record, its outcome (the
        latest OUTCOMES_KEPT are kept). `session` is updated to match. Raises SessionGone when the session ended,
        TooLarge when the images do not fit (nothing written); a shared store raises Unavailable with code
        `outcome_unknown` when it cannot tell whether the write happened, and `session_lock_lost` when the call's
        lock lapsed (nothing written). The log record never fails a call: one the budget cannot hold is dropped
        and counted."""

    @abstractmethod
    async def recorded_outcome(self, session: SessionMap, key: str) -> RecordedOutcome | None:
        """The outcome committed under idempotency key `key`, if the session still keeps it."""

    @abstractmethod
    async def keep_encoding(self, session: SessionMap, entry: ImageEntry, fmt: str, data: bytes) -> None:
        """Remember an encoding of `entry`, if the budget allows; never fails."""

    @abstractmethod
    async def cached_encoding(self, session: SessionMap, entry: ImageEntry, fmt: str) -> bytes | None: ...

    @abstractmethod
    async def call_log(self, session: SessionMap) -> tuple[list[str], int]:
        """The session's call records (JSON, oldest first) and how many were dropped."""

    @abstractmethod
    async def list_sessions(self, offset: int, limit: int) -> tuple[list[SessionSummary], int]:
        """Live sessions, oldest first, a page of them, and how many there are."""

    @abstractmethod
    def view_lookup(self, session: SessionMap) -> Callable[[ImageEntry, str], Image.Image | None]:
        """How a tool thread finds a model view computed by an earlier call (`ToolContext.view`)."""

    def view_maker(self, session: SessionMap
                   ) -> Callable[[ImageEntry, str, Callable[[], Image.Image]], Image.Image] | None:
        """How a tool thread makes a view the store can share as it is made (`make()`, kept), or None: the call
        makes it and hands it to `keep_views`."""
        return None

    @abstractmethod
    async def keep_views(self, session: SessionMap, views: Sequence[tuple[ImageEntry, str, Image.Image]]) -> None:
        """Remember the views a call computed, if the budget allows; never fails, never evicts a session."""

    @abstractmethod
    async def read_source(self, session: SessionMap, entry: ImageEntry) -> bytes:
        """An input image's bytes as uploaded."""

    def hold_pixels(self, session_id: str, key: str, image: Image.Image) -> HeldPixels | None:
        """Keep a new tool image's raw pixels where every server process of the node reads them, before its call
        commits (in a worker thread); None where the store does not (it then needs an encoding to keep). Pixels
        held for a call that commits nothing are never read and go with their session."""
        return None

    def keeps_recipes(self) -> bool:
        """Whether `derive_pixels` keeps a crop as its recipe (so a call that delivers it by reference need not cut
        it: `ToolContext.pixels_on_demand`)."""
        return False

    def derive_pixels(self, session_id: str, derivation: Derivation, image: Image.Image) -> DerivedPixels | None:
        """Keep a new tool image as its recipe (`derivation`, which made `image` from an image of the session)
        instead of its pixels, where the store can remake it in any of its processes; None where it does not."""
        return None

    def decoded_input(self, content: str, decode: Callable[[], Image.Image]) -> Image.Image | None:
        """The pixels of an upload by `content` (the bytes' digest and alpha rule, `DecodedImage.content`), in a
        worker thread: those this store's process or node decoded already, else, in a node, `decode()`'s, kept for
        the others (one process decodes while the others that got the same bytes wait for it); None where it has
        none to give (the caller decodes)."""
        return None

    async def sweep_ended(self) -> int:
        """Free what sessions that ended without a release (expired, evicted) left outside the store; how many."""
        return 0

    async def check(self) -> str | None:
        """None when the store can serve, else why not (for /readyz)."""
        return None

    def sweep(self) -> int:
        return 0

    def stats(self) -> dict[str, int | str]:
        """What /readyz shows of the store: `kind`, and `sessions` and `bytes_held` where the store knows them."""
        return {"kind": self.kind}

    def gauges(self) -> list[StoreGauge]:
        """The store's own gauges for /metrics (none by default)."""
        return []

    async def close(self) -> None:
        return None
