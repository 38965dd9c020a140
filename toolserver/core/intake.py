"""Intake: images, videos and texts into a session. Every input is decoded before anything is registered, so a
refusal (413, 422) stores nothing; a video becomes its sampled frames, in its place among the inputs."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from PIL import Image

from toolserver.core.shared_decodes import SharedDecodes
from toolserver.core.wiring import Services
from toolserver.errors import BadRequest, ServiceError, TooLarge
from toolserver.imaging import DecodedImage, decode_image, encode_png
from toolserver.inputs import input_bytes
from toolserver.memorymap import ImageEntry, SessionMap, compute_view, observation_number, plan_texts
from toolserver.models import (
    AddedImages,
    CreateSessionRequest,
    ImageInfo,
    ImageInput,
    SessionCreated,
    SessionSettings,
    VideoInfo,
)
from toolserver.profiles import get_profile
from toolserver.video import DecodedVideo, VideoLimits, decode_video, looks_like_video


@dataclass(frozen=True)
class RawImage:
    """Bytes that arrived as they are (multipart upload), with an optional key and, for a video, its sampling."""

    data: bytes
    key: str | None = None
    frames_per_second: float | None = None
    max_frames: int | None = None


@dataclass
class Decoded:
    """Decoded inputs in order (a video's frames in its place), and where each video's frames are."""

    images: list[tuple[DecodedImage, str | None]]
    videos: list[tuple[DecodedVideo, int]]  # the video and the position of its first frame in `images`
    # Keyed videos taken in whole (`Profile.keeps_every_frame`): the session text `video:<key>` for each.
    video_texts: dict[str, str] = field(default_factory=dict)

    def video_infos(self, infos: list[ImageInfo]) -> list[VideoInfo]:
        out = []
        for video, start in self.videos:
            keys = [info.key for info in infos[start:start + len(video.frames)]]
            out.append(VideoInfo(keys=keys, timestamps_s=video.timestamps, duration_s=round(video.duration_s, 6),
                                 source_fps=video.source_fps, width=video.width, height=video.height,
                                 container=video.container, codec=video.codec))
        return out


class Intake:
    def __init__(self, services: Services):
        self.services = services
        self.settings = services.settings
        self.shared = SharedDecodes()

    async def create_session(self, request: CreateSessionRequest | None = None,
                             raw_images: Sequence[RawImage] = (), *, check_views: bool = True) -> SessionCreated:
        """`check_views=False`: inputs declared as views are taken at any size (verl-tool's protocol, whose
        server crops whatever image the agent loop sends)."""
        request = request or CreateSessionRequest()
        store = self.services.store
        profile = get_profile(request.profile)
        settings = SessionSettings(**request.model_dump(exclude={"images", "texts"}))
        if settings.output.delivery == "shm" and not self.settings.shm_delivery:
            raise BadRequest("`shm` delivery is off on this server (setting `shm_delivery`); use inline, ref or "
                             "path delivery", code="shm_disabled")
        settings.coords = settings.coords or profile.coords
        settings.view = settings.view or profile.view
        ttl = min(settings.ttl_s or self.settings.default_ttl_s, self.settings.max_ttl_s)
        # Decoded before the session exists: all or nothing.
        decoded = await self.decode_all(request.images, raw_images, str(profile.alpha), profile.keeps_every_frame)
        session = await store.create(settings, ttl)
        try:
            infos = await self.register_inputs(session, decoded.images, check_views=check_views)
            texts = await self.add_texts_to(session, request.texts)
            await self.add_texts_to(session, decoded.video_texts)
        except BaseException:
            with contextlib.suppress(ServiceError):
                await store.release(session.id)
            raise
        self.services.metrics.sessions_created.inc()
        return SessionCreated(session_id=session.id, profile=profile.name, images=infos, texts=texts,
                              expires_in_s=ttl, videos=decoded.video_infos(infos))

    async def add_images(self, session_id: str, images: Sequence[ImageInput] = (),
                         raw_images: Sequence[RawImage] = ()) -> AddedImages:
        store = self.services.store
        session = await store.get(session_id)
        profile = get_profile(session.settings.profile)
        decoded = await self.decode_all(images, raw_images, str(profile.alpha), profile.keeps_every_frame)
        async with store.mutating(session_id) as session:  # may have expired while decoding
            infos = await self.register_inputs(session, decoded.images)
            await self.add_texts_to(session, decoded.video_texts)
        return AddedImages(images=infos, videos=decoded.video_infos(infos))

    async def add_texts(self, session_id: str, texts: dict[str, str] | list[str]) -> list[str]:
        async with self.services.store.mutating(session_id) as session:
            return await self.add_texts_to(session, texts)

    async def decode_all(self, images: Sequence[ImageInput], raw_images: Sequence[RawImage],
                         alpha: str = "white", every_frame: bool = False) -> Decoded:
        """Every input decoded before anything is registered (all or nothing); videos become their frames."""
        s, pool = self.settings, self.services.pool
        items = list(raw_images)
        for given in images:
            items.append(RawImage(await input_bytes(given, s), given.key, given.frames_per_second, given.max_frames))
        if len(items) > s.max_images_per_session:
            raise TooLarge(f"at most {s.max_images_per_session} images per session")
        decoded = Decoded([], [])
        for item in items:
            if looks_like_video(item.data):
                whole = every_frame and item.frames_per_second is None and item.max_frames is None
                video, frames = await pool.run(self._decode_video, item, whole, lane="heavy")
                decoded.videos.append((video, len(decoded.images)))
                if whole and item.key:
                    decoded.video_texts[f"video:{item.key}"] = json.dumps(
                        {"fps": video.source_fps, "frames": len(video.frames)})
                for n, frame in enumerate(frames, start=1):
                    decoded.images.append((frame, f"{item.key}_frame_{n}" if item.key else None))
                if len(decoded.images) > s.max_images_per_session:
                    raise TooLarge(f"at most {s.max_images_per_session} images per session (a video's frames "
                                   "count as images)")
                continue
            decode = partial(_decode, item.data, s.max_image_bytes, s.max_image_pixels, alpha)
            image = await self.shared.decode(item.data, alpha, partial(pool.run, decode), known=partial(
                pool.run, self._stored, decode))
            decoded.images.append((image, item.key))
        return decoded

    def _stored(self, decode: Callable[[], DecodedImage], content: str) -> Image.Image | None:
        """The store's pixels of an upload, which it decodes with `decode` where it has none (a node: one worker
        decodes while the others that got the same bytes wait); None where it keeps none (decoded by the caller)."""
        return self.services.store.decoded_input(content, lambda: decode().pixels)

    def _decode_video(self, item: RawImage, every_frame: bool = False) -> tuple[DecodedVideo, list[DecodedImage]]:
        """The sampled frames, as decoded images whose source is a PNG (or nothing: see below)."""
        s = self.settings
        if len(item.data) > s.max_image_bytes:
            raise TooLarge(f"the video is {len(item.data)} bytes, over the {s.max_image_bytes}-byte upload limit")
        limits = VideoLimits(max_seconds=s.max_video_seconds, max_frames=s.max_video_frames,
                             max_pixels=s.max_image_pixels, max_decoded_bytes=s.session_max_bytes)
        video = decode_video(item.data, limits, fps=item.frames_per_second, max_frames=item.max_frames,
                             every_frame=every_frame)
        # A store that keeps bytes (Redis) stores each frame as a lossless PNG; the in-memory store keeps the
        # pixels alone (a GET encodes them like a tool image's), which halves the intake's time.
        keep_png = self.services.store.stores_encoded
        frames = [DecodedImage(pixels=frame, source_format="PNG",
                               source_bytes=encode_png(frame, encoder=s.png_encoder) if keep_png else None)
                  for frame in video.frames]
        return video, frames

    async def register_inputs(self, session: SessionMap, decoded: list[tuple[DecodedImage, str | None]],
                              *, check_views: bool = True) -> list[ImageInfo]:
        if len(session.images) + len(decoded) > self.settings.max_images_per_session:
            raise TooLarge(f"at most {self.settings.max_images_per_session} images per session")
        keys: list[str] = []
        taken = set(session.by_key)
        for _, key in decoded:
            if key is None:
                key = session.next_input_key(taken)
            elif key in taken:
                raise BadRequest(f"image key {key!r} already exists in this session", code="duplicate_key")
            taken.add(key)
            keys.append(key)
        entries = []
        for (image, _), key in zip(decoded, keys, strict=True):
            view, view_error = compute_view(session.view_rule, image.pixels.size)
            if check_views and session.settings.input_form == "view" and view != image.pixels.size:
                width, height = image.pixels.size
                made = f"would make it {view[0]}x{view[1]}" if view else f"refuses it ({view_error})"
                raise BadRequest(f"image {key!r} is {width}x{height}, which the session's view rule does not produce "
                                 f"(the rule {made}); with input_form 'view', upload images as the model sees them",
                                 code="not_a_view")
            entries.append(ImageEntry(key=key, index=-1, origin="input", pixels=image.pixels, view_size=view,
                                      view_error=view_error, source_bytes=image.source_bytes,
                                      source_mime=image.mime if image.source_bytes is not None else None,
                                      content=image.content))
        # A trainer keeping ARM-Thinker's imgs_map may upload `observation_N` itself: the counter continues
        # after the highest N present, so the next tool image is observation_{N+1} (never a duplicate key).
        highest = max((observation_number(key) or 0 for key in keys), default=0)
        await self.services.store.add_images(session, entries, [image.source_bytes for image, _ in decoded],
                                             observations=max(0, highest - session.observations))
        return [e.info() for e in entries]

    async def add_texts_to(self, session: SessionMap, texts: dict[str, str] | list[str]) -> list[str]:
        s = self.settings
        items: list[tuple[str | None, str]] = (list(texts.items()) if isinstance(texts, dict)
                                               else [(None, t) for t in texts])
        named = plan_texts(session, items, max_texts=s.max_texts_per_session, max_chars=s.max_text_chars)
        if named:
            await self.services.store.add_texts(session, named)
        return [key for key, _ in named]


def _decode(data: bytes, max_bytes: int, max_pixels: int, alpha: str) -> DecodedImage:
    return decode_image(data, max_bytes=max_bytes, max_pixels=max_pixels, alpha=alpha)
