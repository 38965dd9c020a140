"""SMFANet (Zheng, Sun, Dong, Pan, ECCV 2024): a lightweight self-modulation feature aggregation network.

Plain PyTorch, no basicsr or torchvision. Attribute names follow the official implementation exactly, so the
released checkpoints load with `load_state_dict(strict=True)`; `belt` (the EASA shift) keeps its original
spelling for the same reason.

Reading order, top to bottom: the two halves of a block (`DMlp` local detail, `SMFA` self-modulated
aggregation, `PCFN` partial-convolution feed-forward), the block (`FMB`), then the network (`SMFANet`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class DMlp(nn.Module):
    """Local detail estimation: a depthwise 3x3 (channel multiplier 2), then a 1x1 MLP with GELU."""

    def __init__(self, dim: int, growth_rate: float = 2.0):
        super().__init__()
        hidden = int(dim * growth_rate)
        self.conv_0 = nn.Sequential(
            nn.Conv2d(dim, hidden, 3, 1, 1, groups=dim),
            nn.Conv2d(hidden, hidden, 1, 1, 0),
        )
        self.act = nn.GELU()
        self.conv_1 = nn.Conv2d(hidden, dim, 1, 1, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_1(self.act(self.conv_0(x)))


class SMFA(nn.Module):
    """Self-modulation feature aggregation.

    The features are split in two. One half goes through EASA, an efficient approximation of self-attention:
    a modulation map built from a max-pooled (1/8 size) view plus the per-channel spatial variance, which
    then multiplies that half. The other half goes through `DMlp` for local detail. The two are summed.
    """

    down_scale = 8

    def __init__(self, dim: int = 36):
        super().__init__()
        self.linear_0 = nn.Conv2d(dim, dim * 2, 1, 1, 0)
        self.linear_1 = nn.Conv2d(dim, dim, 1, 1, 0)
        self.linear_2 = nn.Conv2d(dim, dim, 1, 1, 0)
        self.lde = DMlp(dim, 2)
        self.dw_conv = nn.Conv2d(dim, dim, 3, 1, 1, groups=dim)
        self.gelu = nn.GELU()
        self.alpha = nn.Parameter(torch.ones((1, dim, 1, 1)))
        self.belt = nn.Parameter(torch.zeros((1, dim, 1, 1)))

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        _, _, h, w = f.shape
        y, x = self.linear_0(f).chunk(2, dim=1)
        # EASA: non-local structure from a coarse view and a global statistic, at a fraction of attention's cost.
        pooled = self.dw_conv(F.adaptive_max_pool2d(x, (h // self.down_scale, w // self.down_scale)))
        variance = torch.var(x, dim=(-2, -1), keepdim=True)
        modulation = self.gelu(self.linear_1(pooled * self.alpha + variance * self.belt))
        x_l = x * F.interpolate(modulation, size=(h, w), mode="nearest")
        return self.linear_2(x_l + self.lde(y))


class PCFN(nn.Module):
    """Partial-convolution feed-forward network: a 3x3 convolution on only the first quarter of the channels."""

    def __init__(self, dim: int, growth_rate: float = 2.0, p_rate: float = 0.25):
        super().__init__()
        hidden = int(dim * growth_rate)
        self.p_dim = int(hidden * p_rate)
        self.conv_0 = nn.Conv2d(dim, hidden, 1, 1, 0)
        self.conv_1 = nn.Conv2d(self.p_dim, self.p_dim, 3, 1, 1)
        self.act = nn.GELU()
        self.conv_2 = nn.Conv2d(hidden, dim, 1, 1, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.conv_0(x))
        # Split and concatenate (not the official in-place slice update) so gradients work in eval mode too;
        # the outputs are identical.
        head, tail = torch.split(x, [self.p_dim, x.shape[1] - self.p_dim], dim=1)
        x = torch.cat([self.act(self.conv_1(head)), tail], dim=1)
        return self.conv_2(x)


class FMB(nn.Module):
    """One feature modulation block: SMFA then PCFN, each a residual on L2-normalised (per pixel) features."""

    def __init__(self, dim: int, ffn_scale: float = 2.0):
        super().__init__()
        self.smfa = SMFA(dim)
        self.pcfn = PCFN(dim, ffn_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.smfa(F.normalize(x)) + x
        return self.pcfn(F.normalize(x)) + x


class SMFANet(nn.Module):
    """RGB in [0, 1] (N x 3 x h x w) to RGB of `upscaling_factor` times the size, unclamped.

    h and w must be at least `toolserver.sr.MIN_INPUT_SIDE` (8), EASA's pooling factor.

    SMFANet is dim 36 with 8 blocks; SMFANet+ is dim 48 with 12 blocks.
    """

    def __init__(self, dim: int = 36, n_blocks: int = 8, ffn_scale: float = 2.0, upscaling_factor: int = 4):
        super().__init__()
        self.scale = upscaling_factor
        self.to_feat = nn.Conv2d(3, dim, 3, 1, 1)
        self.feats = nn.Sequential(*[FMB(dim, ffn_scale) for _ in range(n_blocks)])
        self.to_img = nn.Sequential(
            nn.Conv2d(dim, 3 * upscaling_factor**2, 3, 1, 1),
            nn.PixelShuffle(upscaling_factor),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.to_feat(x)
        x = self.feats(x) + x
        return self.to_img(x)
