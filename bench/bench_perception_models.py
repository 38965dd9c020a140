"""OpenThinkIMG's perception models as services, batched vs unbatched: GroundingDINO, SAM2, GOT-OCR2 and Molmo2.

    python -m bench.bench_perception_models                          # here: the tests' tiny models, on the CPU
    python -m bench.bench_perception_models --device cuda --size full --json out.json     # a GPU host, no weights
    python -m bench.bench_perception_models --device cuda --grounding-dino DIR --sam2 DIR --ocr DIR --point DIR
        # real weights

C threads (sessions) each make `--calls` calls of a model through the in-process transport, as the tools do
(`PerceptionFront.run` → `LocalTransport` → `PerceptionModel.batch` → the runner):
- unbatched: one call per batch (`BatchRule(1)`): one forward pass per call;
- batched: the server's rule (`perception_batch_calls` 16 a batch): the calls waiting share a forward pass.
Calls per second for each, their ratio, the mean batch size, and whether every batched answer equals the
unbatched one (GroundingDINO's up to its 2-decimal rounding; SAM2's masks, OCR's and Point's texts exactly).

Models: `--size tiny` (default) builds the tests' tiny random models; `--size full` builds the published
architectures (grounding-dino-tiny, sam2-hiera-large, GOT-OCR2 and Molmo2-8B with a byte-level vocabulary) with
random weights, since weights cannot be downloaded on these machines (the architecture, not the weight values, sets
the speed; OCR's generation length is fixed by `--ocr-tokens` and never stops early, Point's is at most
`--point-tokens`); a directory given for a model is loaded instead. Point's phrases have one length, so that the
calls on one image size share a pass. Images: 640x480 photographs from ../shared/data/photos (else random pixels).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import PHOTOS  # noqa: E402
from tests.perception_helpers import (  # noqa: E402
    _bert_tokenizer,
    build_tiny_got_ocr2,
    build_tiny_grounding_dino,
    build_tiny_molmo2,
    build_tiny_sam2,
)
from toolserver.batching import BatchRule, LocalTransport  # noqa: E402
from toolserver.perception.grounding_dino import GroundingDinoRunner  # noqa: E402
from toolserver.perception.molmo2 import Molmo2PointRunner  # noqa: E402
from toolserver.perception.ocr import GotOcrRunner  # noqa: E402
from toolserver.perception.sam2 import Sam2Runner  # noqa: E402
from toolserver.perception.service import PerceptionFront, PerceptionModel  # noqa: E402


def images(count: int, size: tuple[int, int]) -> list[np.ndarray]:
    files = sorted(PHOTOS.glob("*.jpg"))[:count]
    out = []
    for i in range(count):
        if files:
            with Image.open(files[i % len(files)]) as img:
                out.append(np.asarray(img.convert("RGB").resize(size, Image.Resampling.BICUBIC)))
        else:
            out.append(np.random.default_rng(i).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    return out


def build_full(name: str, directory: Path) -> Path:
    """The published architecture with random weights (see the module's text)."""
    import torch
    import transformers

    torch.manual_seed(0)
    if name == "grounding_dino":
        tiny = build_tiny_grounding_dino(directory / "tokenizer-source")
        transformers.GroundingDinoForObjectDetection(transformers.GroundingDinoConfig()).eval().save_pretrained(
            directory)
        processor = transformers.AutoProcessor.from_pretrained(tiny)
        processor.image_processor = transformers.GroundingDinoImageProcessorPil()  # 800, at most 1333
        processor.tokenizer = _bert_tokenizer(directory / "vocab")
        processor.save_pretrained(directory)
    elif name == "sam2":
        hiera = transformers.Sam2HieraDetConfig(
            hidden_size=144, blocks_per_stage=[2, 6, 36, 4], embed_dim_per_stage=[144, 288, 576, 1152],
            num_attention_heads_per_stage=[2, 4, 8, 16], window_size_per_stage=[8, 4, 16, 8],
            global_attention_blocks=[23, 33, 43], num_attention_heads=2)
        vision = transformers.Sam2VisionConfig(backbone_config=hiera, backbone_channel_list=[1152, 576, 288, 144])
        transformers.Sam2Model(transformers.Sam2Config(vision_config=vision)).eval().save_pretrained(directory)
    elif name == "point":
        build_full_molmo2(directory)
    else:
        tiny = build_tiny_got_ocr2(directory / "tokenizer-source")
        processor = transformers.AutoProcessor.from_pretrained(tiny)
        tokenizer = processor.tokenizer
        text = dict(vocab_size=len(tokenizer), hidden_size=1024, intermediate_size=2816, num_hidden_layers=24,
                    num_attention_heads=16, num_key_value_heads=16, eos_token_id=-1,
                    pad_token_id=tokenizer.pad_token_id)
        config = transformers.GotOcr2Config(text_config=text,
                                            image_token_index=tokenizer.convert_tokens_to_ids("<imgpad>"))
        model = transformers.GotOcr2ForConditionalGeneration(config).eval()
        model.save_pretrained(directory)
        processor.image_processor = transformers.GotOcr2ImageProcessorPil(size={"height": 1024, "width": 1024})
        processor.save_pretrained(directory)
    return directory


def build_full_molmo2(directory: Path) -> None:
    """Molmo2-8B's architecture (its configuration's defaults) over the tiny model's byte-level tokenizer and its
    image processor's default settings (378-pixel crops, at most 8)."""
    import transformers

    tiny = build_tiny_molmo2(directory / "tokenizer-source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny)
    ids = {token: tokenizer.convert_tokens_to_ids(token)
           for token in ("<im_start>", "<low_res_im_start>", "<im_end>", "<im_patch>", "<frame_start>", "<frame_end>")}
    config = transformers.Molmo2Config(
        image_start_token_id=ids["<im_start>"], low_res_image_start_token_id=ids["<low_res_im_start>"],
        image_end_token_id=ids["<im_end>"], image_patch_id=ids["<im_patch>"],
        frame_start_token_id=ids["<frame_start>"], frame_end_token_id=ids["<frame_end>"])
    model = transformers.Molmo2ForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = None  # random weights: every call writes all its tokens
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def params_for(name: str, i: int, size: tuple[int, int]) -> dict[str, Any]:
    if name == "grounding_dino":
        return {"caption": ["a red car", "the person", "a dog"][i % 3], "box_threshold": 0.3, "text_threshold": 0.25}
    if name == "sam2":
        return {"points": [((0.2 + 0.1 * (i % 5)) * size[0], 0.5 * size[1])]}
    if name == "point":
        return {"prompt": f"Point to the {['red car', 'the dog', 'a chair'][i % 3]} in the scene."}
    return {}


def same(name: str, a: dict[str, Any], b: dict[str, Any]) -> bool:
    if name == "sam2":
        return bool(np.array_equal(a["mask"], b["mask"]))
    if name in ("ocr", "point"):
        return a == b
    if len(a["boxes"]) != len(b["boxes"]):
        return False
    return all(np.allclose(x, y, atol=0.0101) for x, y in zip(sorted(a["boxes"]), sorted(b["boxes"]), strict=True))


def run(model: PerceptionModel, name: str, rule: BatchRule, pictures: list[np.ndarray], concurrency: int,
        calls: int, size: tuple[int, int]) -> tuple[float, float, dict[tuple[int, int], dict]]:
    batches: list[int] = []
    front = PerceptionFront(name, LocalTransport(model, rule), on_batch=batches.append)
    answers: dict[tuple[int, int], dict] = {}

    def session(c: int) -> None:
        for k in range(calls):
            i = c * calls + k
            answers[c, k] = front.run(pictures[i % len(pictures)], params_for(name, i, size))

    threads = [threading.Thread(target=session, args=(c,)) for c in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    return concurrency * calls / seconds, float(np.mean(batches)), answers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", choices=["tiny", "full"], default="tiny")
    parser.add_argument("--grounding-dino", type=Path)
    parser.add_argument("--sam2", type=Path)
    parser.add_argument("--ocr", type=Path)
    parser.add_argument("--point", type=Path)
    parser.add_argument("--models", default="grounding_dino,sam2,ocr,point")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--calls", type=int, default=2, help="calls per session")
    parser.add_argument("--ocr-tokens", type=int, default=32)
    parser.add_argument("--point-tokens", type=int, default=16)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    size = (640, 480)
    pictures = images(8, size)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            given = {"grounding_dino": args.grounding_dino, "sam2": args.sam2, "ocr": args.ocr,
                     "point": args.point}[name]
            builders = {"grounding_dino": build_tiny_grounding_dino, "sam2": build_tiny_sam2,
                        "ocr": build_tiny_got_ocr2, "point": build_tiny_molmo2}
            directory = given or (builders[name](Path(tmp) / name) if args.size == "tiny"
                                  else build_full(name, Path(tmp) / name))
            runner: Any = {"grounding_dino": GroundingDinoRunner, "sam2": Sam2Runner,
                           "ocr": lambda: GotOcrRunner(args.ocr_tokens),
                           "point": lambda: Molmo2PointRunner(args.point_tokens)}[name]()
            model = PerceptionModel(name, runner, str(directory), args.device)
            model.warm()
            run(model, name, BatchRule(args.concurrency), pictures, args.concurrency, 1, size)  # warm-up
            unbatched, _, alone = run(model, name, BatchRule(1), pictures, args.concurrency, args.calls, size)
            batched, mean_batch, together = run(model, name, BatchRule(args.concurrency), pictures,
                                                args.concurrency, args.calls, size)
            row = {"model": name, "weights": "given" if given else args.size, "device": args.device,
                   "sessions": args.concurrency, "calls": args.concurrency * args.calls,
                   "unbatched_calls_per_s": round(unbatched, 2), "batched_calls_per_s": round(batched, 2),
                   "ratio": round(batched / unbatched, 2), "mean_batch": round(mean_batch, 1),
                   "batched_equals_unbatched": all(same(name, together[k], alone[k]) for k in alone)}
            print(json.dumps(row), flush=True)
            results.append(row)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
