"""OCR for OpenThinkIMG's `OCR` tool on transformers' GOT-OCR2 (`GotOcr2ForConditionalGeneration`).

The reference runs EasyOCR (`Reader(['ch_sim', 'en'])`, CRAFT text detection then a CRNN recogniser) and answers
the recognised texts of the detected regions as a Python list. EasyOCR is not usable here: it needs torchvision, and
it refuses weights whose MD5 is not its published one, so its loading code cannot run on tiny test weights; its
networks are not transformers architectures. GOT-OCR2 reads the same two scripts (Chinese and English), offline
from a directory; its plain-text answer is split into its non-empty lines, stripped, which stand for EasyOCR's
regions (read top to bottom), and answered as the same list. The texts differ from EasyOCR's where the two engines
read differently; the format is the reference's.

Batching: every image is resized to the model's square input and every prompt is the same, so any calls share one
`generate` (greedy, as the model card runs it), each stopping at its own end token.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from toolserver.perception.service import PerceptionRequest


def lines_of(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


class GotOcrRunner:
    label = "GOT-OCR2"

    def __init__(self, max_new_tokens: int = 4096) -> None:
        self.max_new_tokens = max_new_tokens
        self.model: Any = None
        self.processor: Any = None
        self.device = "cpu"
        self.image_tokens = 256

    def load(self, path: str, device: str) -> None:
        import transformers

        self.processor = transformers.AutoProcessor.from_pretrained(path, local_files_only=True)
        model: Any = transformers.GotOcr2ForConditionalGeneration.from_pretrained(path, local_files_only=True)
        self.model = model.to(device).eval()
        vision = self.model.config.vision_config
        # The image encoder's patches, twice halved by the projector: one token each.
        self.image_tokens = (int(vision.image_size) // int(vision.patch_size) // 4) ** 2
        self.device = device

    def group_key(self, request: PerceptionRequest) -> Hashable:
        return "ocr"

    def run(self, requests: list[PerceptionRequest]) -> list[dict[str, Any]]:
        import torch
        from PIL import Image

        images = [Image.fromarray(r.pixels) for r in requests]
        inputs = self.processor(images, return_tensors="pt", num_image_tokens=self.image_tokens).to(self.device)
        with torch.inference_mode():
            out = self.model.generate(**inputs, do_sample=False, max_new_tokens=self.max_new_tokens,
                                      tokenizer=self.processor.tokenizer, stop_strings="<|im_end|>")
        texts = self.processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        return [{"text": text, "texts": lines_of(text)} for text in texts]
