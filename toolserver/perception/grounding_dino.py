"""GroundingDINO as OpenThinkIMG's `grounding_dino` worker runs it, on transformers'
`GroundingDinoForObjectDetection` (the reference loads the IDEA-Research checkpoint through the `groundingdino`
package, which is not installable here; `IDEA-Research/grounding-dino-tiny` is the same Swin-T OGC weights in
transformers' layout).

What the worker does, reproduced: the caption lower-cased, stripped and ended with a period; the image resized to
a shortest side of 800 (longest at most 1333) and normalised with ImageNet's mean and deviation (the model
directory's image processor, whose defaults are those); a box kept where its best token's probability exceeds
`box_threshold`; its phrase the caption's tokens whose probability exceeds `text_threshold` (the first token and
positions from 255 on never count), decoded, with the periods removed; then non-maximum suppression at IoU 0.8 on
the corner boxes, which orders the boxes by falling score. Boxes stay normalised to 0-1 (x1, y1, x2, y2).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from toolserver.perception.service import PerceptionRequest

NMS_IOU = 0.8
LAST_TOKEN = 255  # the reference's right_idx: token positions from here on never name a phrase


def caption_of(text: str) -> str:
    caption = text.lower().strip()
    return caption if caption.endswith(".") else caption + "."


def nms(boxes: Any, scores: Any, iou_threshold: float) -> list[int]:
    """Greedy non-maximum suppression over corner boxes (torchvision's rule): indices kept, by falling score."""
    import torch

    order = torch.argsort(scores, descending=True, stable=True).tolist()
    areas = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).tolist()
    kept: list[int] = []
    suppressed = [False] * len(order)
    for rank, i in enumerate(order):
        if suppressed[rank]:
            continue
        kept.append(i)
        for later in range(rank + 1, len(order)):
            j = order[later]
            if suppressed[later]:
                continue
            w = float(torch.clamp(torch.minimum(boxes[i, 2], boxes[j, 2]) - torch.maximum(boxes[i, 0], boxes[j, 0]),
                                  min=0))
            h = float(torch.clamp(torch.minimum(boxes[i, 3], boxes[j, 3]) - torch.maximum(boxes[i, 1], boxes[j, 1]),
                                  min=0))
            inter = w * h
            union = areas[i] + areas[j] - inter
            if union > 0 and inter / union > iou_threshold:
                suppressed[later] = True
    return kept


class GroundingDinoRunner:
    label = "GroundingDINO"

    def __init__(self) -> None:
        self.model: Any = None
        self.processor: Any = None
        self.device = "cpu"

    def load(self, path: str, device: str) -> None:
        import transformers

        self.processor = transformers.AutoProcessor.from_pretrained(path, local_files_only=True)
        model: Any = transformers.GroundingDinoForObjectDetection.from_pretrained(path, local_files_only=True)
        self.model = model.to(device).eval()
        self.device = device

    def _tokens(self, request: PerceptionRequest) -> list[int]:
        return list(self.processor.tokenizer(caption_of(str(request.params["caption"])))["input_ids"])

    def group_key(self, request: PerceptionRequest) -> Hashable:
        # Same image size and caption length: nothing is padded, so a batch answers what each call alone would.
        return request.pixels.shape, len(self._tokens(request))

    def run(self, requests: list[PerceptionRequest]) -> list[dict[str, Any]]:
        import torch
        from PIL import Image

        images = [Image.fromarray(r.pixels) for r in requests]
        captions = [caption_of(str(r.params["caption"])) for r in requests]
        pixels = self.processor.image_processor(images=images, return_tensors="pt")
        text = self.processor.tokenizer(captions, return_tensors="pt")
        inputs = {k: v.to(self.device) for k, v in [*pixels.items(), *text.items()]}
        with torch.inference_mode():
            outputs = self.model(**inputs)
        probs = outputs.logits.sigmoid().float().cpu()
        boxes = outputs.pred_boxes.float().cpu()
        return [self._detections(probs[i], boxes[i], text["input_ids"][i].tolist(), r)
                for i, r in enumerate(requests)]

    def _detections(self, probs: Any, boxes: Any, token_ids: list[int], request: PerceptionRequest) -> dict[str, Any]:
        import torch

        box_threshold = float(request.params["box_threshold"])
        text_threshold = float(request.params["text_threshold"])
        best = probs.max(dim=1).values
        keep = best > box_threshold
        probs, boxes, best = probs[keep], boxes[keep], best[keep]
        phrases = [self._phrase(row > text_threshold, token_ids) for row in probs]
        cx, cy, w, h = boxes.unbind(-1)
        corners = torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)
        kept = nms(corners, best, NMS_IOU) if len(best) else []
        height, width = request.pixels.shape[:2]
        return {"boxes": [[round(float(x), 2) for x in corners[i].tolist()] for i in kept],
                "logits": [round(float(best[i]), 2) for i in kept],
                "phrases": [phrases[i] for i in kept],
                "size": [int(height), int(width)]}

    def _phrase(self, chosen: Any, token_ids: list[int]) -> str:
        positions = [int(p) for p in np.flatnonzero(chosen.numpy()) if 0 < int(p) < LAST_TOKEN and p < len(token_ids)]
        return str(self.processor.tokenizer.decode([token_ids[p] for p in positions])).replace(".", "")
