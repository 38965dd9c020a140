"""The small contract every tool implements.

A tool is a typed arguments model (the schema the model sees is generated from it) plus `run`, a
pure function of a read-only `ToolContext` that returns a `ToolOutput`. `run` executes in a worker
thread; the core registers the images it returns into the session afterwards, so a call that times
out changes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from PIL import Image
from pydantic import BaseModel

from toolserver.errors import ToolFailure
from toolserver.geometry import Coords
from toolserver.memorymap import Derivation, ImageEntry, SessionMap, find_image
from toolserver.pool import LaneName
from toolserver.schema import parameters_schema
from toolserver.searchcache import SearchCacheHolder

if TYPE_CHECKING:
    from toolserver.documents.library import DocumentLibrary
    from toolserver.perception.service import PerceptionFront
    from toolserver.sandbox.executor import Sandbox
    from toolserver.sr.service import SRFront


@dataclass
class ToolOutput:
    text: str
    images: list[Image.Image] = field(default_factory=list)
    # Where a system defines its result as an encoded image (Pixel-Reasoner's JPEG), those bytes and their MIME
    # type, one per entry of `images` (None: encoded as the session asks): delivered as they are, so the client
    # decodes the very pixels the reference's model sees. `images` holds their decoded pixels.
    encoded: list[tuple[bytes, str] | None] = field(default_factory=list)
    # Where a system shows the model a resized copy of a result while its later calls read the result itself
    # (Mini-o3: `process_image` of a crop), that copy, one per entry of `images` (None: the image itself). The
    # copy is what is delivered (inline, path, its URL) and recorded as the image's delivered encoding, and its
    # size is the image's view size; the session keeps `images` for the tools.
    shown: list[Image.Image | None] = field(default_factory=list)
    # False: `encoded` is only the form the model is shown (NeMo Gym's agent re-encodes each result as a JPEG
    # for the model while its tools read the image it saved), and the session keeps `images` as they are.
    encoded_is_pixels: bool = True
    # How each entry of `images` is remade from an image of the session (a crop, a resize), where it is exactly
    # that (None: it is not): a store may keep the recipe instead of the pixels. Made with `Derivation.make`.
    derived: list[Derivation | None] = field(default_factory=list)
    # Existing images returned again (lookback): each gets a new observation key, pixels shared.
    reused: list[ImageEntry] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    ok: bool = True
    error_code: str | None = None

    @classmethod
    def failure(cls, text: str, code: str, **meta: Any) -> ToolOutput:
        return cls(text=text, ok=False, error_code=code, meta=meta)

    def encoded_form(self, offset: int) -> tuple[bytes, str] | None:
        """The bytes the system defines for the `offset`-th returned image, if it defines any."""
        return self.encoded[offset] if offset < len(self.encoded) else None

    def derivation(self, offset: int) -> Derivation | None:
        """How the `offset`-th returned image is remade from one the session holds, if the tool says so."""
        return self.derived[offset] if offset < len(self.derived) else None

    def shown_form(self, offset: int) -> Image.Image | None:
        """The copy the system shows the model in place of the `offset`-th returned image, if it shows one."""
        return self.shown[offset] if offset < len(self.shown) else None

    def returned(self) -> list[tuple[Image.Image, ImageEntry | None]]:
        """Every image this call returns, in key order: new images, then reused ones (with their source)."""
        return [(img, None) for img in self.images] + [(e.pixels, e) for e in self.reused]


@dataclass(frozen=True)
class ToolContext:
    """What a tool may see of its session while it runs (snapshotted before the call)."""

    session_id: str
    images: tuple[ImageEntry, ...]
    texts: Mapping[str, str]
    coords: Coords
    observations: int  # tool images returned so far in this session
    inputs_are_views: bool = False  # the session's input images were uploaded as the model sees them
    sr: SRFront | None = None  # the super-resolution model, shared by all sessions
    documents: DocumentLibrary | None = None  # the document library, shared by all sessions
    sandbox: Sandbox | None = None  # the code sandbox, shared by all sessions
    search_cache: SearchCacheHolder | None = None  # the user's cached search results (`SEARCH_CACHE`)
    perception: Mapping[str, PerceptionFront] | None = None  # the perception models by name, shared by all sessions
    sr_max_output_pixels: int = 16_777_216
    deadline: float | None = None  # time.monotonic() by which the call must finish
    # The session's call log (JSON records, oldest first), for profiles whose tools keep state beyond images
    # (`Profile.reads_call_log`); empty otherwise.
    calls: tuple[str, ...] = ()
    # The session store's cache of model views (whole-image resizes), looked up by (entry, rule).
    cached_view: Callable[[ImageEntry, str], Image.Image | None] | None = None
    # The store's way to make a view once for every process that shares it (a node's workers), or None.
    view_maker: Callable[[ImageEntry, str, Callable[[], Image.Image]], Image.Image] | None = None
    # Views this call computed, for the core to hand to the store once the call is over.
    new_views: list[tuple[ImageEntry, str, Image.Image]] = field(default_factory=list)
    tool_calls: int = 0  # calls this session's tools have run so far (Mini-o3 numbers its turns by them)
    # Derived images shared by every session (the server's registry, `core.shared_views`): `share(key, compute)`
    # is compute()'s image for `key`, computed once while any session holds it; `defer=False` waits for another
    # session's computation in this thread rather than running the call again once it is done.
    share: Callable[..., Image.Image] | None = None
    # Nothing reads the call's new images before it ends (delivered by reference, into a store that keeps a crop as
    # its recipe): a tool may return one whose pixels are made when first read (`Derivation.image`).
    pixels_on_demand: bool = False

    @classmethod
    def of(cls, session: SessionMap, **services: Any) -> ToolContext:
        assert session.settings.coords is not None  # filled from the profile at creation
        # What the call may read while texts are added beside it: a copy in memory, a read-on-demand view remotely.
        return cls(session.id, tuple(session.images), session.texts.copy(), session.settings.coords,
                   session.observations, session.settings.input_form == "view", tool_calls=session.tool_calls,
                   **services)

    def observation_key(self, offset: int = 0) -> str:
        return f"observation_{self.observations + 1 + offset}"

    def view(self, entry: ImageEntry, rule: str, compute: Callable[[Image.Image], Image.Image]) -> Image.Image:
        """`compute(entry.pixels)` (the image as a seed system's model sees it), once per image and `rule`.

        `rule` names the computation and all its parameters: two rules with one name must give the same
        pixels. Views are immutable like every image; a tool crops or copies them, never draws on them. The view
        of an input is shared by every session whose input has the same content (`ImageEntry.content`).
        """
        cached = self.cached_view(entry, rule) if self.cached_view is not None else None
        if cached is not None:
            return cached
        for seen, seen_rule, image in self.new_views:  # asked twice within one call
            if seen is entry and seen_rule == rule:
                return image
        if entry.content is not None:
            maker = self.view_maker
            image = self.derived(("view", entry.content, rule), (lambda: compute(entry.pixels)) if maker is None
                                 else (lambda: maker(entry, rule, lambda: compute(entry.pixels))))
        else:
            image = compute(entry.pixels)
        self.new_views.append((entry, rule, image))
        return image

    def derived(self, key: Hashable, compute: Callable[[], Image.Image], *, rerun: bool = True) -> Image.Image:
        """`compute()`, an image that depends only on what `key` names (an input's content and a rule, a document
        page's file and a rule): computed once for every session that asks while any of them holds it. Where
        another session is computing it, the call may be run again once it is made (`rerun`); a tool whose work
        before this point costs more than waiting passes `rerun=False`."""
        if self.share is None:
            return compute()
        return self.share(key, compute) if rerun else self.share(key, compute, defer=False)

    @property
    def keys(self) -> list[str]:
        return [e.key for e in self.images]

    def find(self, ref: str | int) -> ImageEntry | None:
        return find_image(self.images, ref)

    def image(self, ref: str | int) -> ImageEntry:
        """Resolve a key or 0-based index, or fail with a text that lists what exists."""
        entry = self.find(ref)
        if entry is not None:
            return entry
        if not self.images:
            raise ToolFailure("Error: this session has no images yet; upload one first.", "unknown_image")
        if isinstance(ref, int) and not isinstance(ref, bool):
            raise ToolFailure(
                f"Error: image index {ref} is out of range; valid indices are 0 to {len(self.images) - 1}.",
                "unknown_image",
            )
        raise ToolFailure(
            f"Error: unknown image {ref!r}. Available images: {self.keys} (or their 0-based indices).",
            "unknown_image",
        )


@functools.cache
def _generated_schema(args_model: type[BaseModel]) -> dict[str, Any]:
    return parameters_schema(args_model)


class Tool:
    """Subclasses set `name`, `description`, `Args`, and implement `run`."""

    # Plain attributes, usually set on the class: a few tools (validators, document retrieval) build their
    # name, description or arguments model per instance.
    name: str
    description: str
    Args: type[BaseModel]
    # Seed profiles reproduce their own validation order and message texts, so they receive the raw
    # arguments dict; the schema still comes from `Args`.
    raw_arguments: ClassVar[bool] = False
    # Which work lane runs the tool (toolserver.pool): "heavy" for tools that run a network or an index,
    # so that cheap pixel tools and validators never queue behind them.
    lane: ClassVar[LaneName] = "fast"
    # The JSON schema a validating system (Qwen-Agent) checks arguments against, as that system writes it;
    # None: the schema generated from `Args`, which is what the model is shown.
    system_schema: ClassVar[dict[str, Any] | None] = None

    def validation_schema(self) -> dict[str, Any]:
        if self.system_schema is not None:
            return self.system_schema
        return _generated_schema(self.Args)

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:  # pragma: no cover - abstract
        raise NotImplementedError
