"""The official SMFANet checkpoints: a manifest, verified loading, and a downloader.

A checkpoint is a `torch.save` of `{"params": state_dict}`. Its configuration (dim, blocks, FFN ratio,
scale) is read from the tensor shapes, so SMFANet and SMFANet+ at any scale load through the same path
with strict key matching.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from toolserver.sr.arch import SMFANet

OFFICIAL_URL = "https://github.com/Zheng-MJ/SMFANet/raw/main/pretrain/{file}"


@dataclass(frozen=True)
class KnownCheckpoint:
    name: str
    file: str
    scale: int
    variant: str  # "smfanet" (dim 36, 8 blocks) or "smfanet-plus" (dim 48, 12 blocks)
    sha256: str
    size: int

    @property
    def url(self) -> str:
        return OFFICIAL_URL.format(file=self.file)


# The DF2K-trained releases (Zheng-MJ/SMFANet, `pretrain/`, Apache-2.0), with their published hashes.
MANIFEST: tuple[KnownCheckpoint, ...] = (
    KnownCheckpoint("smfanet-x2", "SMFANet_DF2K_100w_x2SR.pth", 2, "smfanet",
                    "daea7fc72a6e4aff80163768209ea5e56fd9705db9e6323f31822f24cd03902e", 803_351),
    KnownCheckpoint("smfanet-x3", "SMFANet_DF2K_100w_x3SR.pth", 3, "smfanet",
                    "ae9953d36b4afb25211a23b02499dc029dfe64a2549c3426b29aaca14f17baa1", 822_807),
    KnownCheckpoint("smfanet-x4", "SMFANet_DF2K_100w_x4SR.pth", 4, "smfanet",
                    "3141324e9ef6ebdd2338566b30ad034a3bf0c3c34e8030d4086ce4330c319402", 850_199),
    KnownCheckpoint("smfanet-plus-x4", "SMFANet_plus_DF2K_100w_x4SR.pth", 4, "smfanet-plus",
                    "28a807e1ee1f46a990458efd813654ea0ba023148a8423e49847d9b5c4f98ca3", 2_079_269),
)
BY_NAME = {c.name: c for c in MANIFEST}


class CheckpointError(Exception):
    """A checkpoint that is missing, unreadable, or not an SMFANet state dict."""


@dataclass(frozen=True)
class NetworkConfig:
    dim: int
    n_blocks: int
    ffn_scale: float
    scale: int


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _unwrap(obj: object) -> Mapping[str, object]:
    # basicsr saves {"params": ...} (sometimes "params_ema"); other trainers use "state_dict"/"model".
    if isinstance(obj, Mapping):
        for key in ("params_ema", "params", "state_dict", "model", "net"):
            inner = obj.get(key)
            if isinstance(inner, Mapping):
                obj = inner
                break
        prefix = "module."
        if obj and all(isinstance(k, str) and k.startswith(prefix) for k in obj):
            obj = {k[len(prefix):]: v for k, v in obj.items()}
        return obj
    raise CheckpointError(f"expected a state dict, found {type(obj).__name__}")


def infer_config(state: Mapping[str, object]) -> NetworkConfig:
    """Read dim, block count, FFN ratio and scale from the shapes of an SMFANet state dict."""
    import torch

    required = ("to_feat.weight", "feats.0.smfa.alpha", "feats.0.smfa.belt", "feats.0.pcfn.conv_0.weight",
                "to_img.0.weight")
    missing = [k for k in required if not isinstance(state.get(k), torch.Tensor)]
    if missing:
        raise CheckpointError(f"not an SMFANet state dict (missing {', '.join(missing)})")
    shape = {k: tuple(cast("torch.Tensor", state[k]).shape) for k in required}  # all checked to be tensors
    dim = shape["to_feat.weight"][0]
    blocks = {int(m.group(1)) for k in state if (m := re.match(r"feats\.(\d+)\.", k))}
    hidden = shape["feats.0.pcfn.conv_0.weight"][0]
    out_channels = shape["to_img.0.weight"][0]
    scale = round((out_channels / 3) ** 0.5)
    if 3 * scale * scale != out_channels or scale < 1:
        raise CheckpointError(f"to_img.0 has {out_channels} output channels, which is not 3 x scale^2")
    if blocks != set(range(len(blocks))):
        raise CheckpointError("the block indices of feats.N are not contiguous")
    return NetworkConfig(dim=dim, n_blocks=len(blocks), ffn_scale=hidden / dim, scale=scale)


def load_network(path: Path) -> tuple[SMFANet, NetworkConfig]:
    """Build the network a checkpoint describes and load it strictly, in eval mode, on the CPU."""
    import torch

    from toolserver.sr.arch import SMFANet

    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        # weights_only: a checkpoint is data; never run pickled code from it.
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"cannot read checkpoint {path.name}: {type(exc).__name__}: {exc}") from exc
    state = _unwrap(obj)
    config = infer_config(state)
    network = SMFANet(dim=config.dim, n_blocks=config.n_blocks, ffn_scale=config.ffn_scale,
                      upscaling_factor=config.scale)
    try:
        network.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"checkpoint {path.name} does not match SMFANet: {exc}") from exc
    return network.eval().requires_grad_(False), config


@dataclass(frozen=True)
class InstalledCheckpoint:
    known: KnownCheckpoint
    path: Path
    problem: str | None = None  # why it cannot be used (wrong size or hash), else None


def scan(model_dir: Path, *, verify: bool = True) -> list[InstalledCheckpoint]:
    """The manifest's checkpoints present in `model_dir`, each checked against its published hash."""
    found = []
    for known in MANIFEST:
        path = model_dir / known.file
        if not path.is_file():
            continue
        problem = None
        if verify:
            digest = sha256_of(path)
            if digest != known.sha256:
                problem = (f"sha256 {digest[:16]}... does not match the published {known.sha256[:16]}... "
                           "(a partial download or a different file); download it again")
        found.append(InstalledCheckpoint(known, path, problem))
    return found


def download(names: list[str], model_dir: Path, *, url_template: str | None = None, timeout_s: float = 60.0,
             progress: Callable[[str], None] = lambda _msg: None) -> list[Path]:
    """Fetch checkpoints by manifest name, verifying size and sha256 before they appear in `model_dir`.

    A file already present with the right hash is kept. Nothing half-written is ever left under the final
    name: the download goes to a temporary file that is renamed only after the hash matches.
    """
    import httpx

    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise CheckpointError(f"unknown checkpoint(s) {unknown}; known: {', '.join(BY_NAME)}")
    model_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        known = BY_NAME[name]
        target = model_dir / known.file
        if target.is_file() and sha256_of(target) == known.sha256:
            progress(f"{known.file}: already present, sha256 ok")
            paths.append(target)
            continue
        url = (url_template or OFFICIAL_URL).format(file=known.file)
        progress(f"{known.file}: downloading {url}")
        digest = hashlib.sha256()
        fd, tmp_name = tempfile.mkstemp(dir=model_dir, prefix=f".{known.file}.", suffix=".part")
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out, httpx.stream("GET", url, follow_redirects=True,
                                                          timeout=timeout_s) as response:
                response.raise_for_status()
                for chunk in response.iter_bytes():
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != known.sha256:
                raise CheckpointError(f"{known.file}: downloaded sha256 {digest.hexdigest()} does not match the "
                                      f"published {known.sha256}; nothing was installed")
            tmp.replace(target)
        except httpx.HTTPError as exc:
            raise CheckpointError(f"{known.file}: download from {url} failed: {exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)
        progress(f"{known.file}: installed, sha256 ok")
        paths.append(target)
    return paths
