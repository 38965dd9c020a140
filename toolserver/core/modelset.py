"""The model services a process builds from its settings: SMFANet's engine, the two document encoders and the
perception models (each loaded lazily), and the rule by which each gathers the calls of many sessions.

Built here for each of their homes: in a server process behind a `LocalTransport` (`wiring.Services`), in the node's
model host processes (`toolserver.core.modelhost`) and in Ray Serve's model deployments (`toolserver.rayapp`). Kept
apart from `wiring`, which imports the whole server (the tools, the stores, the sandbox, the document library), so
that a model host imports the models alone: its PSS fell from 397 to 230 MB (docs/node.md, "Memory").
"""

from __future__ import annotations

from toolserver.batching import BatchRule, Model
from toolserver.config import Settings
from toolserver.documents.encoder_service import EncoderModel
from toolserver.documents.encoders import Encoder
from toolserver.perception.grounding_dino import GroundingDinoRunner
from toolserver.perception.molmo2 import Molmo2PointRunner
from toolserver.perception.ocr import GotOcrRunner
from toolserver.perception.sam2 import Sam2Runner
from toolserver.perception.service import PerceptionModel
from toolserver.sr.engine import SREngine
from toolserver.sr.service import SRModel

MODEL_NAMES = ("smfanet", "clip", "text")
# OpenThinkIMG's model tools: on the node's model hosts with the others; in process beside a Ray Serve app.
PERCEPTION_MODELS = ("grounding_dino", "sam2", "ocr", "point")


def build_models(s: Settings, names: tuple[str, ...] = MODEL_NAMES + PERCEPTION_MODELS) -> dict[str, Model]:
    """The model services, where they run: SMFANet's engine, the two document encoders and the perception models
    (loaded lazily)."""
    models: dict[str, Model] = {}
    if "smfanet" in names:
        engine = SREngine(s.sr_model_dir, device=s.sr_device, tile=s.sr_tile, tile_pad=s.sr_tile_pad,
                          max_batch=s.sr_max_batch, channels_last=s.sr_channels_last, half=s.sr_half,
                          prefer_plus=s.sr_prefer_plus, verify_sha256=s.sr_verify_sha256,
                          cpu_workers=s.sr_cpu_workers, threads=s.sr_threads, nice=s.heavy_nice,
                          batch_tiles=s.sr_batch_tiles, cuda_graphs=s.sr_cuda_graphs,
                          switch_interval_s=s.sr_switch_interval_ms / 1000 or None)
        models["smfanet"] = SRModel(engine)
    if "clip" in names:
        models["clip"] = EncoderModel(Encoder("clip", s.clip_model, s.doc_device))
    if "text" in names:
        models["text"] = EncoderModel(Encoder("text", s.text_model, s.doc_device, batch_size=64))
    if "grounding_dino" in names:
        models["grounding_dino"] = PerceptionModel("grounding_dino", GroundingDinoRunner(), s.grounding_dino_model,
                                                   s.perception_device, "TOOLSERVER_GROUNDING_DINO_MODEL")
    if "sam2" in names:
        models["sam2"] = PerceptionModel("sam2", Sam2Runner(), s.sam2_model, s.perception_device,
                                         "TOOLSERVER_SAM2_MODEL")
    if "ocr" in names:
        models["ocr"] = PerceptionModel("ocr", GotOcrRunner(s.ocr_max_new_tokens), s.ocr_model, s.perception_device,
                                        "TOOLSERVER_OCR_MODEL")
    if "point" in names:
        models["point"] = PerceptionModel("point", Molmo2PointRunner(s.point_max_new_tokens), s.point_model,
                                          s.perception_device, "TOOLSERVER_POINT_MODEL")
    return models


def batch_rule(s: Settings, name: str) -> BatchRule:
    """How calls of many sessions are gathered for model `name` (the same rule in process and on Ray Serve)."""
    if name == "smfanet":
        return BatchRule(s.sr_batch_calls, s.sr_batch_wait_ms / 1000, s.sr_concurrent_batches)
    if name in PERCEPTION_MODELS:
        return BatchRule(s.perception_batch_calls, s.perception_batch_wait_ms / 1000, 1)
    return BatchRule(s.encoder_batch_calls, s.encoder_batch_wait_ms / 1000, 1)
