"""Pointing for OpenThinkIMG's `Point` tool on transformers' Molmo2 (`Molmo2ForConditionalGeneration`).

The reference's worker (`molmo_point_worker.py`) runs Molmo-7B-D through its remote code, which transformers does
not ship; Molmo2 is the same family (a ViT, a pooling adapter, a decoder that writes points as text) in
transformers' own architectures. The worker's path, kept: the prompt it builds, greedy decoding up to its 2048 new
tokens, stopping at `<|endoftext|>`, and the generated text decoded without special tokens, answered raw.

Molmo2's image processor needs torchvision, which is not a dependency here; its steps are reproduced with torch
alone (tests/test_perception_point.py checks them against the processor's own code): the image resized (bilinear,
no antialiasing, in float, rounded back to bytes) to a canvas of overlapping square crops chosen by
`select_tiling`, and to one low-resolution crop; both normalised ((x - mean·255) / (std·255)); each crop cut into
patches; the patches pooled in windows (`pooling_size`) whose indices skip the crops' overlaps. The prompt is the
processor's: the BOS (or EOS) token, the chat template's text with `<|image|>` replaced by the low-resolution then
the high-resolution rows of `<im_patch>` tokens (`<im_col>` ending each row), and `mm_token_type_ids` marking the
image tokens.

Batching: calls with the same image size (so the same tiling and image tokens) and the same prompt length share
one `generate` without padding, each stopping at its own end.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolserver.perception.service import PerceptionRequest

IMAGE_TOKEN = "<|image|>"
# The tokens `mm_token_type_ids` marks as the image's (the processor's `image_token_ids`).
IMAGE_TOKENS = ("<im_patch>", "<im_col>", "<im_start>", "<low_res_im_start>", "<frame_start>", "<im_end>",
                "<frame_end>", "<im_low>")
STOP = "<|endoftext|>"  # the worker's `stop_strings`


@dataclass(frozen=True)
class Molmo2Images:
    """The image processor's settings (its class defaults, overridden by the model directory's
    `preprocessor_config.json`) and the processor's token layout (`processor_config.json`)."""

    crop_size: int = 378
    max_crops: int = 8
    overlap_margins: tuple[int, int] = (4, 4)
    patch_size: int = 14
    pooling_size: tuple[int, int] = (2, 2)
    image_mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    image_std: tuple[float, ...] = (0.5, 0.5, 0.5)
    rescale_factor: float = 1 / 255
    col_tokens: bool = True
    single_crop_col_tokens: bool | None = None
    single_crop_start_token: bool = True

    @classmethod
    def from_directory(cls, path: str) -> Molmo2Images:
        def read(name: str) -> dict[str, Any]:
            file = Path(path) / name
            return json.loads(file.read_text()) if file.exists() else {}

        processor = read("processor_config.json")
        image = read("preprocessor_config.json") or processor.get("image_processor", {})
        size = image.get("size", {"height": cls.crop_size, "width": cls.crop_size})
        if size.get("height") != size.get("width"):
            raise ValueError(f"Molmo2 only supports a square `size`, got {size}")
        return cls(int(size["height"]), int(image.get("max_crops", cls.max_crops)),
                   tuple(image.get("overlap_margins", cls.overlap_margins)),  # type: ignore[arg-type]
                   int(image.get("patch_size", cls.patch_size)),
                   tuple(image.get("pooling_size", cls.pooling_size)),  # type: ignore[arg-type]
                   tuple(image.get("image_mean", cls.image_mean)), tuple(image.get("image_std", cls.image_std)),
                   float(image.get("rescale_factor", cls.rescale_factor)),
                   bool(processor.get("image_use_col_tokens", True)), processor.get("use_single_crop_col_tokens"),
                   bool(processor.get("use_single_crop_start_token", True)))


def select_tiling(height: int, width: int, patch: int, max_crops: int) -> tuple[int, int]:
    """The (rows, columns) of crops: the smallest tiling that needs no downscaling, else the one that downscales
    least; candidates ordered by crop count, then rows."""
    import torch

    tilings = sorted(((h, w) for h in range(1, max_crops + 1) for w in range(1, max_crops + 1) if h * w <= max_crops),
                     key=lambda t: (t[0] * t[1], t[0]))
    candidates = torch.tensor(tilings, dtype=torch.int32) * patch
    scales = (candidates.to(torch.float32) / torch.tensor([height, width], dtype=torch.float32)).amin(dim=-1)
    if bool(torch.all(scales < 1)):
        return tilings[int(scales.argmax())]
    return tilings[int(torch.where(scales < 1.0, 10e9, scales).argmin())]


def resize_normalize(images: Any, height: int, width: int, cfg: Molmo2Images) -> Any:
    """uint8 N x C x H x W -> float32 N x C x height x width: bilinear in float without antialiasing, rounded back
    to bytes, then rescaled and normalised in one step (mean and deviation times 255)."""
    import torch
    import torch.nn.functional as F

    resized = F.interpolate(images.float(), size=(height, width), mode="bilinear", align_corners=False,
                            antialias=False).round().clamp(0, 255).to(images.dtype)
    mean = (torch.tensor(cfg.image_mean) * (1.0 / cfg.rescale_factor)).to(torch.float32).view(-1, 1, 1)
    std = (torch.tensor(cfg.image_std) * (1.0 / cfg.rescale_factor)).to(torch.float32).view(-1, 1, 1)
    return (resized.to(torch.float32) - mean) / std


def pooling_windows(grid: Any, pool_h: int, pool_w: int) -> tuple[Any, int, int]:
    """A patch-index grid grouped into pooling windows (rows x columns, window cells), padded with -1 evenly."""
    import torch.nn.functional as F

    pad_h = pool_h * ((grid.shape[0] + pool_h - 1) // pool_h) - grid.shape[0]
    pad_w = pool_w * ((grid.shape[1] + pool_w - 1) // pool_w) - grid.shape[1]
    grid = F.pad(grid, (pad_w // 2, (pad_w + 1) // 2, pad_h // 2, (pad_h + 1) // 2), mode="constant", value=-1)
    rows, cols = grid.shape[0] // pool_h, grid.shape[1] // pool_w
    windows = grid.reshape(rows, pool_h, cols, pool_w).permute(0, 2, 1, 3).reshape(rows * cols, pool_h * pool_w)
    return windows, rows, cols


def _crops(image: Any, cfg: Molmo2Images) -> tuple[Any, Any]:
    """The overlapping crops of one image (1 x C x H x W) and the grid of the patch indices they keep."""
    import torch

    left, right = cfg.overlap_margins
    crop_patches = cfg.crop_size // cfg.patch_size
    window = (crop_patches - left - right) * cfg.patch_size
    margin = (left + right) * cfg.patch_size
    rows, cols = select_tiling(image.shape[2] - margin, image.shape[3] - margin, window, cfg.max_crops)
    canvas_h, canvas_w = rows * window + margin, cols * window + margin
    canvas = resize_normalize(image, canvas_h, canvas_w, cfg)
    crops = canvas.unfold(2, cfg.crop_size, window).unfold(3, cfg.crop_size, window)
    crops = crops.permute(0, 2, 3, 4, 5, 1).reshape(rows * cols, cfg.crop_size, cfg.crop_size, image.shape[1])
    index = torch.arange(rows * cols * crop_patches * crop_patches, dtype=torch.int32).reshape(
        rows, cols, crop_patches, crop_patches)
    if left:
        index[1:, :, :left, :] = -1
        index[:, 1:, :, :left] = -1
    if right:
        index[:-1, :, -right:, :] = -1
        index[:, :-1, :, -right:] = -1
    index = index.permute(0, 2, 1, 3).reshape(-1)
    return crops, index[index >= 0].reshape(canvas_h // cfg.patch_size, canvas_w // cfg.patch_size)


def preprocess(pixels: Any, cfg: Molmo2Images) -> dict[str, Any]:
    """One image (H x W x 3 uint8): its patches (1 + crops, patches per crop, pixels per patch), pooling indices
    into them, and grid [low-res rows, low-res columns, high-res rows, high-res columns]."""
    import torch

    image = torch.from_numpy(pixels.copy()).permute(2, 0, 1).unsqueeze(0)
    crops, index_grid = _crops(image, cfg)
    pool_h, pool_w = cfg.pooling_size
    pooling, high_rows, high_cols = pooling_windows(index_grid, pool_h, pool_w)
    low = resize_normalize(image, cfg.crop_size, cfg.crop_size, cfg).permute(0, 2, 3, 1)
    side = cfg.crop_size // cfg.patch_size
    low_pooling, low_rows, low_cols = pooling_windows(torch.arange(side * side, dtype=torch.int32).reshape(
        side, side), pool_h, pool_w)
    pooling = torch.cat([low_pooling, torch.where(pooling >= 0, pooling + side * side, -1)])
    all_crops = torch.cat([low, crops])
    n, p = all_crops.shape[0], cfg.patch_size
    patches = all_crops.reshape(n, side, p, side, p, all_crops.shape[-1]).transpose(2, 3).reshape(
        n, side * side, p * p * all_crops.shape[-1])
    return {"patches": patches, "pooling": pooling, "grid": [low_rows, low_cols, high_rows, high_cols]}


def image_grid(height: int, width: int, cfg: Molmo2Images) -> list[int]:
    """`preprocess`'s grid without the pixels (the processor's `get_image_grid_and_crops`)."""
    left, right = cfg.overlap_margins
    window = (cfg.crop_size // cfg.patch_size - left - right) * cfg.patch_size
    margin = (left + right) * cfg.patch_size
    rows, cols = select_tiling(height - margin, width - margin, window, cfg.max_crops)
    pool_h, pool_w = cfg.pooling_size
    side = cfg.crop_size // cfg.patch_size
    return [math.ceil(side / pool_h), math.ceil(side / pool_w), math.ceil((rows * window + margin) // cfg.patch_size
            / pool_h), math.ceil((cols * window + margin) // cfg.patch_size / pool_w)]


def image_string(grid: list[int], cfg: Molmo2Images) -> str:
    """The processor's tokens for one image: the low-resolution rows, then the high-resolution rows."""
    low_rows, low_cols, rows, cols = grid
    row = "<im_patch>" * cols + ("<im_col>" if cfg.col_tokens else "")
    high = "<im_start>" + row * rows + "<im_end>"
    low_col = cfg.col_tokens if cfg.single_crop_col_tokens is None else cfg.single_crop_col_tokens
    low_row = "<im_patch>" * low_cols + ("<im_col>" if low_col else "")
    start = "<low_res_im_start>" if cfg.single_crop_start_token else "<im_start>"
    return start + low_row * low_rows + "<im_end>" + high


class Molmo2PointRunner:
    label = "Molmo2"

    def __init__(self, max_new_tokens: int = 2048) -> None:
        self.max_new_tokens = max_new_tokens
        self.model: Any = None
        self.tokenizer: Any = None
        self.images = Molmo2Images()
        self.device = "cpu"

    def load(self, path: str, device: str) -> None:
        import transformers

        self.tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        if self.tokenizer.chat_template is None:
            raise ValueError(f"{path} has no chat template (chat_template.jinja)")
        self.images = Molmo2Images.from_directory(path)
        model: Any = transformers.Molmo2ForConditionalGeneration.from_pretrained(path, local_files_only=True)
        self.model = model.to(device).eval()
        self.device = device

    def prompt(self, text: str) -> str:
        """The chat template's text for one image and the user's words, BOS (or EOS) first, as the processor
        writes it; `<|image|>` still to be replaced by the image's tokens."""
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
        rendered = str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        if IMAGE_TOKEN not in rendered:
            rendered = IMAGE_TOKEN + rendered
        bos = self.tokenizer.bos_token or self.tokenizer.eos_token
        return rendered if rendered.startswith(bos) else bos + rendered

    def token_ids(self, request: PerceptionRequest, grid: list[int]) -> list[int]:
        text = self.prompt(str(request.params["prompt"])).replace(IMAGE_TOKEN, image_string(grid, self.images), 1)
        return list(self.tokenizer(text)["input_ids"])

    def group_key(self, request: PerceptionRequest) -> Hashable:
        # The same size is the same tiling and image tokens; the same prompt length needs no padding.
        height, width = request.pixels.shape[:2]
        return height, width, len(self.token_ids(request, image_grid(height, width, self.images)))

    def inputs(self, requests: list[PerceptionRequest]) -> dict[str, Any]:
        import torch

        images = [preprocess(r.pixels, self.images) for r in requests]
        pooling, offset = [], 0
        for image in images:
            pooling.append(torch.where(image["pooling"] >= 0, image["pooling"] + offset, image["pooling"]))
            offset += image["patches"].shape[0] * image["patches"].shape[1]
        ids = torch.tensor([self.token_ids(r, image["grid"]) for r, image in zip(requests, images, strict=True)])
        marked = torch.tensor(self.tokenizer.convert_tokens_to_ids(list(IMAGE_TOKENS)))
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "mm_token_type_ids": torch.isin(ids, marked).long(),
                "pixel_values": torch.cat([image["patches"] for image in images]),
                "image_token_pooling": torch.cat(pooling),
                "image_grids": torch.tensor([image["grid"] for image in images], dtype=torch.int64),
                "image_num_crops": torch.tensor([image["patches"].shape[0] for image in images], dtype=torch.int64)}

    def run(self, requests: list[PerceptionRequest]) -> list[dict[str, Any]]:
        import torch

        inputs = {k: v.to(self.device) for k, v in self.inputs(requests).items()}
        with torch.inference_mode():
            out = self.model.generate(**inputs, do_sample=False, max_new_tokens=self.max_new_tokens,
                                      tokenizer=self.tokenizer, stop_strings=STOP)
        texts = self.tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        return [{"text": text} for text in texts]
