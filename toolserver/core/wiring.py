"""Wiring: the shared services one server process builds from its settings, and what they report.

Built once per `Core`: the session store, the bounded work pool, the models' fronts (SMFANet, the document
encoders) and the document library, the code sandbox and the metrics, with the store's and the pool's gauges
registered. Nothing here runs a request.

The models (`build_models`) are built here too, for each of their homes: in this process behind a
`LocalTransport` (uvicorn), in the node's model host processes (`toolserver.core.modelhost`; a worker told their
addresses by `TOOLSERVER_MODEL_HOSTS` reaches them through `toolserver.hostlink`), or inside their own Ray Serve
deployments (`toolserver.rayapp`), which hand the ingress a transport per model instead.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from toolserver.batching import LocalTransport, Transport
from toolserver.config import Settings
from toolserver.core.modelset import MODEL_NAMES, PERCEPTION_MODELS, batch_rule, build_models
from toolserver.core.shared_views import SharedViews
from toolserver.documents.chroma import NodeChromaLink
from toolserver.documents.encoder_service import EncoderFront
from toolserver.documents.library import ArmMount, DocumentLibrary
from toolserver.hostlink import HostTransport, node_transports
from toolserver.metrics import Metrics
from toolserver.perception.service import PerceptionFront
from toolserver.pool import WorkPool
from toolserver.sandbox.budget import Promise, budget_mb, fit
from toolserver.sandbox.confine import Limits
from toolserver.sandbox.executor import Sandbox, SandboxConfig
from toolserver.sandbox.remote import RemoteSandbox
from toolserver.searchcache import SearchCacheHolder
from toolserver.sr.service import SRFront
from toolserver.stores import SessionStore, build_store

log = logging.getLogger("toolserver.sandbox")


@dataclass
class Services:
    settings: Settings
    store: SessionStore
    pool: WorkPool
    sr: SRFront
    documents: DocumentLibrary
    metrics: Metrics
    sandbox: Sandbox
    shared: SharedViews = field(default_factory=SharedViews)  # derived images shared by all sessions
    search_cache: SearchCacheHolder = field(default_factory=lambda: SearchCacheHolder(None))  # loaded on first use
    perception: dict[str, PerceptionFront] = field(default_factory=dict)  # the perception models by name

    @classmethod
    def build(cls, s: Settings, transports: dict[str, Transport] | None = None) -> Services:
        """`transports`: how to reach each model (by `MODEL_NAMES`); by default the models run in this process."""
        if transports is None and s.model_host_addresses():  # a worker of a node whose models run in model hosts
            transports = node_transports(s, names=MODEL_NAMES + PERCEPTION_MODELS)
        if transports is None:
            transports = {name: LocalTransport(model, batch_rule(s, name)) for name, model in build_models(s).items()}
        missing = tuple(name for name in PERCEPTION_MODELS if name not in transports)  # a Ray Serve app's ingress
        transports = {**transports, **{name: LocalTransport(model, batch_rule(s, name))
                                       for name, model in build_models(s, missing).items()}}
        heavy_workers = s.heavy_workers
        if heavy_workers is None and transports["smfanet"].where != LocalTransport.where:
            # The heavy lane's threads only wait for a model deployment elsewhere: enough of them that the calls of
            # many sessions reach it together and can share a batch.
            heavy_workers = max(s.threads, s.sr_batch_calls * s.sr_concurrent_batches)
        metrics = Metrics()

        def executed(outcome: str) -> None:
            metrics.sandbox_executions.labels(outcome).inc()

        if s.node_sandbox is not None and s.node_key is not None:  # the node's one sandbox (`serve --workers N`)
            sandbox = cast(Sandbox, RemoteSandbox(s.node_sandbox, bytes.fromhex(s.node_key), executed))
        else:
            sandbox = build_sandbox(s, on_execution=executed)
        for transport in transports.values():
            if isinstance(transport, HostTransport):  # which model host served each call
                transport.pool.on_served = lambda model, host: metrics.model_served_by.labels(model, host).inc()
        pool = WorkPool(s.threads, s.queue_limit, s.retry_after_s, heavy_workers=heavy_workers,
                        heavy_nice=s.heavy_nice, code_workers=sandbox.config.slots)

        def observer(name: str) -> Callable[[int], None]:
            return metrics.model_batch_size.labels(name).observe

        sr = SRFront(transports["smfanet"], on_batch=observer("smfanet"))
        clip = EncoderFront("clip", transports["clip"], on_batch=observer("clip"))
        text = EncoderFront("text", transports["text"], on_batch=observer("text"))
        perception = {name: PerceptionFront(name, transports[name], on_batch=observer(name))
                      for name in PERCEPTION_MODELS}
        services = cls(s, build_store(s), pool, sr, build_library(s, clip, text), metrics, sandbox,
                       search_cache=SearchCacheHolder(s.search_cache), perception=perception)
        services.register_gauges()
        return services

    def refresh_models(self) -> None:
        """Read again what each model serves (readiness does, so a model deployment that came up late is seen)."""
        self.sr.refresh()
        for front in self.perception.values():
            front.refresh()
        for encoder in self.documents.encoders.values():
            encoder.refresh()

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
    """The sandbox, its slot and worker counts within the memory budget (`SandboxBudgetError` where the ones set
    promise more than the host has)."""
    tmp_mb = min(s.sandbox_tmp_mb, s.sandbox_disk_mb)
    promise = fit(Promise(s.sandbox_slots, s.sandbox_workers, s.sandbox_memory_mb, tmp_mb, s.sandbox_image_cache_mb),
                  budget_mb(s.sandbox_memory_budget_mb), slots_set="sandbox_slots" in s.model_fields_set,
                  workers_set="sandbox_workers" in s.model_fields_set)
    if (promise.slots, promise.workers) != (s.sandbox_slots, s.sandbox_workers):
        log.warning("sandbox counts lowered to fit this host's memory", extra={
            "sandbox_slots": promise.slots, "sandbox_workers": promise.workers, "promised_mb": promise.mb})
    limits = Limits(memory_bytes=s.sandbox_memory_mb << 20, cpu_s=s.sandbox_cpu_s, processes=s.sandbox_processes,
                    open_files=s.sandbox_open_files, file_bytes=s.sandbox_file_mb << 20,
                    tmp_bytes=tmp_mb << 20, disk_bytes=s.sandbox_disk_mb << 20)
    config = SandboxConfig(runtime_dir=s.sandbox_dir, uid_base=s.sandbox_uid_base, slots=promise.slots,
                           min_level=s.sandbox_min_isolation, limits=limits, timeout_s=s.sandbox_timeout_s,
                           max_output_bytes=s.sandbox_max_output_bytes, max_images=s.sandbox_max_images,
                           max_pixels=min(s.max_image_pixels, s.sandbox_max_image_pixels),
                           image_cache_bytes=s.sandbox_image_cache_mb << 20,
                           max_result_bytes=s.sandbox_max_result_mb << 20, worker_slots=promise.workers,
                           cpu_policy=s.sandbox_cpu_policy)
    return Sandbox(config, on_execution=on_execution)


def build_library(s: Settings, clip: EncoderFront | None = None, text: EncoderFront | None = None) -> DocumentLibrary:
    """The document library over the given encoder fronts (by default: the encoders in this process)."""
    if clip is None or text is None:
        models = build_models(s, ("clip", "text"))
        clip = clip or EncoderFront("clip", LocalTransport(models["clip"], batch_rule(s, "clip")))
        text = text or EncoderFront("text", LocalTransport(models["text"], batch_rule(s, "text")))
    arm = None
    if s.arm_index_path is not None:
        arm = ArmMount(s.arm_index_path, s.arm_collection, s.arm_image_root or s.arm_index_path, clip)
    # A node's workers share the node's Chroma server, which its supervisor starts on the first use (node/services.py)
    node_chroma = NodeChromaLink(s.node_dir / "chroma") if (
        s.chroma_url is None and s.node_dir is not None and (s.node_dir / "chroma").is_dir()) else None
    return DocumentLibrary(s.resolved_documents_dir(), clip=clip, text=text, chroma_url=s.chroma_url,
                           node_chroma=node_chroma,
                           page_long_side=s.doc_page_long_side, page_format=s.doc_page_format,
                           jpeg_quality=s.jpeg_quality, batch_pages=s.doc_batch_pages, max_pages=s.doc_max_pages,
                           vector_cache_bytes=s.doc_vector_cache_bytes, arm=arm)


def settle_process(settings: Settings) -> None:
    """What a server process sets once its app is built, under uvicorn or as a Ray Serve replica alike.

    The objects of the imported libraries (~140k) never die: moved out of the collector's sight, a full collection
    (80 ms with them) costs what the requests' own objects cost. And images reuse freed memory: a crop's new images
    in fresh pages cost twice its CPU (BENCHMARKS.md, the race). A Serve replica without these spent 1.7x the CPU
    of `toolserver serve` on the race's calls."""
    import gc

    from PIL import Image

    gc.collect()
    gc.freeze()
    Image.core.set_blocks_max(settings.image_blocks_kept)
