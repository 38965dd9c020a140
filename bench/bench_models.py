"""The models as services, batched vs unbatched, on the CPU or on CUDA: SMFANet x4 and the document encoders.

    python -m bench.bench_models --device cpu                 # here
    python -m bench.bench_models --device cuda --json out.json  # on a GPU machine (the device tool)

SMFANet: C threads (sessions) each enlarging its own 256x256 crops x4 through the in-process transport, as a tool
does (`SRFront.upscale_many` → `LocalTransport` → `SRModel.batch` → the engine), at C = 1, 4, 16, 64:
- unbatched: `sr_batch_calls` 1 and `batch_tiles` never (one call, one forward pass at a time per worker);
- batched: the server's rule (16 calls a batch, 2 batches at once, `batch_tiles` auto: same-shaped tiles of
  several sessions stacked into one forward pass on a GPU).
Output megapixels per second; the outputs of both must be equal (max abs difference reported), and on CUDA the
outputs are compared with the CPU's on the same crops (max abs difference and PSNR; fp16 as well).

Encoders: page images through a CLIP ViT-B/32 image tower and page passages through a MiniLM-L6 text model,
built here with random weights (weights cannot be downloaded on these machines; the architecture, not the weight
values, sets the speed), through `EncoderModel.batch`: one page per call vs the pages of 32 calls in one batch.
Pages per second; CUDA's embeddings compared with the CPU's (cosine).

Inputs: `--inputs DIR` with page-sized JPEGs (default: the shared photographs, resized to a 1600-pixel long side)
and `--corpus FILE` (text for the tokenizer and the passages; default: the seed papers).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from toolserver.config import SHIPPED_SMFANET

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def load_pages(inputs: Path | None, count: int = 8) -> list[Image.Image]:
    if inputs is not None:
        files = sorted(inputs.glob("*.jpg"))[:count]
    else:
        files = sorted((SHARED / "data" / "photos").glob("*.jpg"))[:count]
    pages = []
    for path in files:
        with Image.open(path) as img:
            img = img.convert("RGB")
            img.thumbnail((1600, 1600), Image.Resampling.BICUBIC)
            pages.append(img)
    return pages


def crops(pages: list[Image.Image], n: int, side: int = 256) -> list[np.ndarray]:
    out = []
    for i in range(n):
        page = pages[i % len(pages)]
        x = (i * 97) % max(1, page.width - side)
        y = (i * 53) % max(1, page.height - side)
        out.append(np.asarray(page.crop((x, y, x + side, y + side)), dtype=np.uint8))
    return out


# -- SMFANet --------------------------------------------------------------------------------------------------
RULE = (16, 2)  # calls per batch, batches at once (the server's defaults; --rule changes them)


def sr_front(device: str, batched: bool, half: bool = False, cuda_graphs: bool | None = None) -> Any:
    """The front as a server with SMFANet in its process builds it (its rule, CUDA graphs and switch interval)."""
    from toolserver.batching import BatchRule, LocalTransport
    from toolserver.config import Settings
    from toolserver.sr.engine import SREngine
    from toolserver.sr.service import SRFront, SRModel

    server = Settings()
    engine = SREngine(SHIPPED_SMFANET, device=device, half=half, batch_tiles="auto" if batched else "never",
                      max_batch=16, cuda_graphs=server.sr_cuda_graphs if cuda_graphs is None else cuda_graphs,
                      switch_interval_s=server.sr_switch_interval_ms / 1000 or None)
    rule = BatchRule(RULE[0], 0.0, RULE[1]) if batched else BatchRule(1, 0.0, 64)
    return SRFront(LocalTransport(SRModel(engine), rule))


def run_sr(front: Any, inputs: list[np.ndarray], sessions: int, calls_each: int) -> tuple[float, list[np.ndarray]]:
    """Megapixels out per second with `sessions` threads, and the outputs of the first `len(inputs)` calls."""
    outputs: dict[int, np.ndarray] = {}
    barrier = threading.Barrier(sessions)

    def session(k: int) -> None:
        barrier.wait()
        for j in range(calls_each):
            i = (k * calls_each + j) % len(inputs)
            up = front.upscale(Image.fromarray(inputs[i]), 4)
            if k * calls_each + j < len(inputs):
                outputs[i] = np.asarray(up.image)

    threads = [threading.Thread(target=session, args=(k,)) for k in range(sessions)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    pixels = sessions * calls_each * (inputs[0].shape[0] * 4) * (inputs[0].shape[1] * 4)
    return pixels / seconds / 1e6, [outputs[i] for i in sorted(outputs)]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def bench_sr(device: str, pages: list[Image.Image], levels: list[int], calls_each: int) -> dict[str, Any]:
    inputs = crops(pages, 64)
    report: dict[str, Any] = {"crop": "256x256 -> x4 (1024x1024)", "levels": {}}
    batched, unbatched = sr_front(device, True), sr_front(device, False)
    run_sr(batched, inputs[:2], 1, 2)  # load the network (and on CUDA, its kernels)
    run_sr(unbatched, inputs[:2], 1, 2)
    reference: list[np.ndarray] = []
    for sessions in levels:
        mp_unbatched, out_u = run_sr(unbatched, inputs, sessions, calls_each)
        mp_batched, out_b = run_sr(batched, inputs, sessions, calls_each)
        diff = max((int(np.abs(a.astype(int) - b.astype(int)).max()) for a, b in zip(out_u, out_b, strict=False)),
                   default=0)
        reference = reference or out_u
        report["levels"][sessions] = {"unbatched_mp_s": round(mp_unbatched, 2), "batched_mp_s": round(mp_batched, 2),
                                      "ratio": round(mp_batched / mp_unbatched, 2), "max_abs_diff": diff}
        print(f"SR x4 {device} sessions={sessions}: {mp_unbatched:.2f} -> {mp_batched:.2f} MP/s "
              f"(max diff {diff})", flush=True)
    if device != "cpu":
        report["vs_cpu"] = compare_with_cpu(inputs[:len(reference)][:8], reference[:8], device)
    batched.close()
    unbatched.close()
    return report


def compare_with_cpu(inputs: list[np.ndarray], on_device: list[np.ndarray], device: str) -> dict[str, Any]:
    cpu = sr_front("cpu", False)
    half = sr_front(device, True, half=True)
    out_cpu = [np.asarray(cpu.upscale(Image.fromarray(x), 4).image) for x in inputs]
    out_half = [np.asarray(half.upscale(Image.fromarray(x), 4).image) for x in inputs]
    cpu.close()
    half.close()
    return {"fp32_max_abs_diff": max(int(np.abs(a.astype(int) - b.astype(int)).max())
                                     for a, b in zip(out_cpu, on_device, strict=True)),
            "fp32_min_psnr_db": round(min(psnr(a, b) for a, b in zip(out_cpu, on_device, strict=True)), 2),
            "fp16_max_abs_diff": max(int(np.abs(a.astype(int) - b.astype(int)).max())
                                     for a, b in zip(out_cpu, out_half, strict=True)),
            "fp16_min_psnr_db": round(min(psnr(a, b) for a, b in zip(out_cpu, out_half, strict=True)), 2)}


# -- encoders ---------------------------------------------------------------------------------------------------
def build_encoders(directory: Path, corpus: str) -> tuple[Path, Path]:
    """A CLIP ViT-B/32 and a MiniLM-L6 (all-MiniLM-L6-v2's shape), random weights, as sentence-transformers
    folders; the text model's WordPiece vocabulary is trained on `corpus`."""
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling, Transformer
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    torch.manual_seed(0)
    clip_hf, clip_st = directory / "clip-hf", directory / "clip-st"
    config = transformers.CLIPConfig(projection_dim=512)  # ViT-B/32 and its text tower: the library defaults
    transformers.CLIPModel(config).eval().save_pretrained(clip_hf)
    tokenizer = _wordpiece(corpus, Tokenizer, models, normalizers, pre_tokenizers, trainers)
    clip_tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=77,
                                                          pad_token="[PAD]", unk_token="[UNK]")
    image_processor = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
    transformers.CLIPProcessor(image_processor=image_processor(), tokenizer=clip_tokenizer).save_pretrained(clip_hf)
    SentenceTransformer(modules=[Transformer(str(clip_hf))], device="cpu").save(str(clip_st))

    text_hf, text_st = directory / "text-hf", directory / "text-st"
    bert = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=384, num_hidden_layers=6,
                                   num_attention_heads=12, intermediate_size=1536, max_position_embeddings=512)
    transformers.BertModel(bert).eval().save_pretrained(text_hf)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=256, pad_token="[PAD]",
                                         unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                         mask_token="[MASK]").save_pretrained(text_hf)
    body = Transformer(str(text_hf), max_seq_length=256)
    SentenceTransformer(modules=[body, Pooling(384, "mean"), Normalize()], device="cpu").save(str(text_st))
    return clip_st, text_st


def _wordpiece(corpus: str, Tokenizer: Any, models: Any, normalizers: Any, pre_tokenizers: Any,
               trainers: Any) -> Any:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=30522, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                                          "[MASK]"])
    tokenizer.train_from_iterator(corpus.splitlines(), trainer)
    from tokenizers import processors

    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[
        ("[CLS]", cls), ("[SEP]", sep)])
    return tokenizer


def run_encoder(model: Any, kind: str, items: list[Any]) -> tuple[float, np.ndarray]:
    """One item per call, one call at a time."""
    from toolserver.documents.encoder_service import EncodeRequest

    started = time.perf_counter()
    vectors = [model.batch([EncodeRequest(kind, [item])])[0].vectors for item in items]  # type: ignore[arg-type]
    return len(items) / (time.perf_counter() - started), np.concatenate(vectors)


def bench_encoders(device: str, pages: list[Image.Image], corpus: str, count: int) -> dict[str, Any]:
    from toolserver.documents.encoder_service import EncoderModel
    from toolserver.documents.encoders import Encoder

    work = Path(tempfile.mkdtemp(prefix="toolserver-bench-models-"))
    clip_dir, text_dir = build_encoders(work, corpus)
    words = corpus.split()
    passages = [" ".join(words[i:i + 120]) for i in range(0, 120 * count * 2, 120)]
    images = [pages[i % len(pages)] for i in range(count)]
    report: dict[str, Any] = {}
    for role, directory, kind, items in (("clip", clip_dir, "images", images), ("text", text_dir, "texts", passages)):
        model = EncoderModel(Encoder(role, str(directory), device, batch_size=32))
        model.warm()
        run_encoder(model, kind, items[:8])
        one, v1 = run_encoder(model, kind, items)
        many, v32 = _batched(model, kind, items)
        entry = {"unbatched_per_s": round(one, 1), "batched_per_s": round(many, 1), "ratio": round(many / one, 2),
                 "min_cosine_batched_vs_unbatched": round(float(np.min(np.sum(v1 * v32, axis=1))), 6)}
        if device != "cpu":
            cpu = EncoderModel(Encoder(role, str(directory), "cpu", batch_size=32))
            _, on_cpu = run_encoder(cpu, kind, items[:16])
            entry["min_cosine_vs_cpu"] = round(float(np.min(np.sum(on_cpu * v1[:16], axis=1))), 6)
        report[role] = entry
        print(f"{role} {device}: {one:.1f} -> {many:.1f} {kind}/s", flush=True)
    return report


def _batched(model: Any, kind: str, items: list[Any]) -> tuple[float, np.ndarray]:
    """32 calls of one item each, answered together (what the batcher gives under concurrent queries)."""
    from toolserver.documents.encoder_service import EncodeRequest

    started = time.perf_counter()
    vectors = []
    for i in range(0, len(items), 32):
        replies = model.batch([EncodeRequest(kind, [item]) for item in items[i:i + 32]])  # type: ignore[arg-type]
        vectors.extend(r.vectors for r in replies)
    return len(items) / (time.perf_counter() - started), np.concatenate(vectors)


def main() -> None:
    global RULE
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--calls", type=int, default=4, help="calls per session per level")
    parser.add_argument("--pages", type=int, default=128, help="pages (and twice as many passages) encoded")
    parser.add_argument("--inputs", type=Path)
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--skip", nargs="*", default=[], choices=["sr", "encoders"])
    parser.add_argument("--rule", type=int, nargs=2, default=list(RULE), metavar=("CALLS", "AT_ONCE"),
                        help="the batched rule: calls per batch, batches at once")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    RULE = (args.rule[0], args.rule[1])
    pages = load_pages(args.inputs)
    corpus = args.corpus.read_text() if args.corpus else "\n".join(
        p.read_text() for p in sorted((SHARED / "seeds").glob("*.txt")))
    report: dict[str, Any] = {"device": args.device}
    if args.device.startswith("cuda"):
        import torch

        report["gpu"] = torch.cuda.get_device_name(0)
    if "sr" not in args.skip:
        report["smfanet"] = bench_sr(args.device, pages, args.levels, args.calls)
    if "encoders" not in args.skip:
        report["encoders"] = bench_encoders(args.device, pages, corpus, args.pages)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
