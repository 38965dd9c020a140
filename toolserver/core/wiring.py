"""Wiring: the shared services one server process builds from its settings, and what they report.

Built once per `Core`: the session store, the bounded work pool, the SMFANet engine, the document library, the
code sandbox and the metrics, with the store's and the pool's gauges registered. Nothing here runs a request.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from toolserver.config import Settings
from toolserver.core.shared_views import SharedViews
from toolserver.documents.encoders import Encoder
from toolserver.documents.library import ArmMount, DocumentLibrary
from toolserver.metrics import Metrics
from toolserver.pool import WorkPool
from toolserver.sandbox.confine import Limits
from toolserver.sandbox.executor import Sandbox, SandboxConfig
from toolserver.sr.engine import SREngine
from toolserver.stores import SessionStore, build_store


@dataclass
class Services:
    settings: Settings
    store: SessionStore
    pool: WorkPool
    sr: SREngine
    documents: DocumentLibrary
    metrics: Metrics
    sandbox: Sandbox
    shared: SharedViews = field(default_factory=SharedViews)  # derived images shared by all sessions

    @classmethod
    def build(cls, s: Settings) -> Services:
        pool = WorkPool(s.workers, s.queue_limit, s.retry_after_s, heavy_workers=s.heavy_workers,
                        heavy_nice=s.heavy_nice, code_workers=s.sandbox_slots)
        sr = SREngine(s.sr_model_dir, device=s.sr_device, tile=s.sr_tile, tile_pad=s.sr_tile_pad,
                      max_batch=s.sr_max_batch, channels_last=s.sr_channels_last, half=s.sr_half,
                      prefer_plus=s.sr_prefer_plus, verify_sha256=s.sr_verify_sha256, cpu_workers=s.sr_cpu_workers,
                      threads=s.sr_threads, nice=s.heavy_nice)
        metrics = Metrics()
        sandbox = build_sandbox(s, on_execution=lambda outcome: metrics.sandbox_executions.labels(outcome).inc())
        services = cls(s, build_store(s), pool, sr, build_library(s), metrics, sandbox)
        services.register_gauges()
        return services

    def register_gauges(self) -> None:
        for gauge in self.store.gauges():
            self.metrics.gauge(gauge.name, gauge.help, gauge.read)
        sandbox = self.sandbox
        self.metrics.gauge("toolserver_sandbox_live_executions", "Code executions running now",
                           lambda: sandbox.live)
        self.metrics.gauge("toolserver_sandbox_live_workers", "Stateful code workers alive (one per session of a "
                           "code-as-tool environment)", lambda: len(sandbox.workers))
        pool = self.pool
        self.metrics.gauge("toolserver_pool_in_flight", "Jobs admitted to the work pool", lambda: pool.in_flight)
        for name, lane in pool.lanes.items():
            self.metrics.gauge(f"toolserver_pool_{name}_in_flight", f"Jobs admitted to the {name} lane",
                               functools.partial(getattr, lane, "in_flight"))

    def capability_phrases(self) -> dict[str, str]:
        """What the tool descriptions say about this server's installed models."""
        phrases = {"{doc_rankings}": self.documents.describe_rankings()}
        if self.sr.available:
            scales = ", ".join(str(s) for s in self.sr.scales)
            return {**phrases, "{sr_scales}": f"Available scales on this server: {scales}.",
                    "{sr_scales_fallback}": f"Available scales on this server: {scales}."}
        return {**phrases, "{sr_scales}": "Super-resolution weights are not installed on this server, so calls fail.",
                "{sr_scales_fallback}": "Super-resolution weights are not installed on this server: regions are "
                                        "enlarged with bicubic resizing instead."}


def build_sandbox(s: Settings, on_execution: Callable[[str], None] | None = None) -> Sandbox:
    limits = Limits(memory_bytes=s.sandbox_memory_mb << 20, cpu_s=s.sandbox_cpu_s, processes=s.sandbox_processes,
                    open_files=s.sandbox_open_files, file_bytes=s.sandbox_file_mb << 20,
                    tmp_bytes=s.sandbox_tmp_mb << 20)
    config = SandboxConfig(runtime_dir=s.sandbox_dir, uid_base=s.sandbox_uid_base, slots=s.sandbox_slots,
                           min_level=s.sandbox_min_isolation, limits=limits, timeout_s=s.sandbox_timeout_s,
                           max_output_bytes=s.sandbox_max_output_bytes, max_images=s.sandbox_max_images,
                           max_pixels=min(s.max_image_pixels, s.sandbox_max_image_pixels),
                           image_cache_bytes=s.sandbox_image_cache_mb << 20,
                           max_result_bytes=s.sandbox_max_result_mb << 20, worker_slots=s.sandbox_workers)
    return Sandbox(config, on_execution=on_execution)


def build_library(s: Settings) -> DocumentLibrary:
    clip = Encoder("clip", s.clip_model, s.doc_device)
    text = Encoder("text", s.text_model, s.doc_device, batch_size=64)
    arm = None
    if s.arm_index_path is not None:
        arm = ArmMount(s.arm_index_path, s.arm_collection, s.arm_image_root or s.arm_index_path, clip)
    return DocumentLibrary(s.resolved_documents_dir(), clip=clip, text=text, chroma_url=s.chroma_url,
                           page_long_side=s.doc_page_long_side, page_format=s.doc_page_format,
                           jpeg_quality=s.jpeg_quality, batch_pages=s.doc_batch_pages, max_pages=s.doc_max_pages,
                           vector_cache_bytes=s.doc_vector_cache_bytes, arm=arm)
