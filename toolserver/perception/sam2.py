"""SAM2 as OpenThinkIMG's `SegmentRegionAroundPoint` worker runs it (`SAM2ImagePredictor` over sam2-hiera-large),
on transformers' `Sam2Model` (the `sam2` package and its checkpoints are not installable here;
`facebook/sam2-hiera-large` is the same weights in transformers' layout).

The predictor's path, reproduced: the image scaled to 0-1, resized to the model's square input (bilinear, with
antialiasing, as torchvision's `Resize` on a tensor), normalised with ImageNet's mean and deviation; the points, in
pixels, scaled to that square; all points of a call one prompt, every label positive, one mask
(`multimask_output=False`); the low-resolution mask resized bilinearly to the image and thresholded at 0.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from toolserver.perception.service import PerceptionRequest

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class Sam2Runner:
    label = "SAM2"

    def __init__(self) -> None:
        self.model: Any = None
        self.device = "cpu"
        self.size = 1024

    def load(self, path: str, device: str) -> None:
        import transformers

        model: Any = transformers.Sam2Model.from_pretrained(path, local_files_only=True)
        self.model = model.to(device).eval()
        self.size = int(self.model.config.prompt_encoder_config.image_size)
        self.device = device

    def group_key(self, request: PerceptionRequest) -> Hashable:
        # Every image is resized to one square; calls with as many points share a pass without padding.
        return len(request.params["points"])

    def _pixels(self, request: PerceptionRequest) -> Any:
        import torch
        import torch.nn.functional as F

        image = torch.from_numpy(request.pixels.copy()).permute(2, 0, 1).float().div(255.0).unsqueeze(0)
        image = F.interpolate(image, size=(self.size, self.size), mode="bilinear", align_corners=False,
                              antialias=True)
        mean = torch.tensor(MEAN).view(1, 3, 1, 1)
        std = torch.tensor(STD).view(1, 3, 1, 1)
        return (image - mean) / std

    def run(self, requests: list[PerceptionRequest]) -> list[dict[str, Any]]:
        import torch
        import torch.nn.functional as F

        pixels = torch.cat([self._pixels(r) for r in requests]).to(self.device)
        points = []
        for r in requests:
            height, width = r.pixels.shape[:2]
            points.append([[float(x) / width * self.size, float(y) / height * self.size]
                           for x, y in r.params["points"]])
        coords = torch.tensor(points, dtype=torch.float32).unsqueeze(1).to(self.device)  # B x 1 x N x 2
        labels = torch.ones(coords.shape[:3], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            out = self.model(pixel_values=pixels, input_points=coords, input_labels=labels, multimask_output=False)
        low_res = out.pred_masks[:, 0].float()  # B x 1 x h x w
        scores = out.iou_scores[:, 0, 0].float().cpu()
        results = []
        for i, r in enumerate(requests):
            height, width = r.pixels.shape[:2]
            mask = F.interpolate(low_res[i:i + 1], size=(height, width), mode="bilinear", align_corners=False)
            results.append({"mask": (mask[0, 0] > 0.0).cpu().numpy(), "score": float(scores[i])})
        return results
