"""SMFANet: the network file, checkpoint loading and verification, the downloader, the quality metric."""

from __future__ import annotations

import hashlib
import http.server
import math
import shutil
import threading
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.conftest import photo, smfanet_dir
from toolserver.sr.arch import SMFANet
from toolserver.sr.checkpoints import BY_NAME, MANIFEST, CheckpointError, download, infer_config, load_network, scan
from toolserver.sr.engine import SREngine
from toolserver.sr.quality import psnr, psnr_y, y_channel

# Parameter counts of the official releases (SMFANet paper: 186K / 191K / 197K; SMFANet+ x4: 496K).
PARAMS = {"smfanet-x2": 185_628, "smfanet-x3": 190_503, "smfanet-x4": 197_328, "smfanet-plus-x4": 495_888}
SHAPES = {"smfanet": (36, 8), "smfanet-plus": (48, 12)}


# -------------------------------------------------------------------------------------------- metric
def test_y_channel_known_values():
    rgb = np.array([[[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255]]], dtype=np.uint8)
    # MATLAB rgb2ycbcr: Y = 16 + 65.481 R + 128.553 G + 24.966 B, with RGB in [0, 1].
    np.testing.assert_allclose(y_channel(rgb)[0], [16.0, 235.0, 81.481, 144.553, 40.966], atol=1e-9)


def test_psnr_known_values():
    a = np.zeros((4, 4))
    assert psnr(a, a + 1) == pytest.approx(10 * math.log10(255**2))  # MSE 1: 48.1308 dB
    assert psnr(a, a + 1) == pytest.approx(48.1308036, abs=1e-6)
    assert psnr(a, a) == math.inf
    b = a.copy()
    b[0, 0] = 16  # MSE 256 / 16 = 16
    assert psnr(a, b) == pytest.approx(10 * math.log10(255**2 / 16))
    with pytest.raises(ValueError):
        psnr(a, np.zeros((3, 3)))


def test_psnr_y_crops_the_border():
    x = np.full((10, 10, 3), 128, np.uint8)
    y = x.copy()
    y[0, :] = 0  # differs only in the border row
    assert psnr_y(x, y, crop_border=1) == math.inf
    assert psnr_y(x, y) < 40


# -------------------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("known", MANIFEST, ids=lambda k: k.name)
def test_official_checkpoints_load_strictly(known):
    path = smfanet_dir() / known.file
    network, config = load_network(path)
    assert (config.dim, config.n_blocks) == SHAPES[known.variant]
    assert config.scale == known.scale and config.ffn_scale == 2.0
    assert sum(p.numel() for p in network.parameters()) == PARAMS[known.name]
    assert not network.training and not any(p.requires_grad for p in network.parameters())
    out = network(torch.rand(1, 3, 9, 13))
    assert out.shape == (1, 3, 9 * known.scale, 13 * known.scale)


def test_config_is_read_from_any_checkpoint(tmp_path: Path):
    net = SMFANet(dim=16, n_blocks=3, ffn_scale=1.5, upscaling_factor=3)
    path = tmp_path / "tiny.pth"
    torch.save({"params": net.state_dict()}, path)
    loaded, config = load_network(path)
    assert (config.dim, config.n_blocks, config.ffn_scale, config.scale) == (16, 3, 1.5, 3)
    x = torch.rand(1, 3, 8, 8)
    torch.testing.assert_close(loaded(x), net.eval()(x))
    # Other trainers' wrappers: {"state_dict": {"module.…": …}}
    torch.save({"state_dict": {f"module.{k}": v for k, v in net.state_dict().items()}}, path)
    assert load_network(path)[1].scale == 3


def test_bad_checkpoints_give_clear_errors(tmp_path: Path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_network(tmp_path / "missing.pth")
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not a checkpoint at all" * 10)
    with pytest.raises(CheckpointError, match=r"cannot read checkpoint garbage\.pth"):
        load_network(garbage)
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes((smfanet_dir() / BY_NAME["smfanet-x4"].file).read_bytes()[:300_000])
    with pytest.raises(CheckpointError, match=r"cannot read checkpoint truncated\.pth"):
        load_network(truncated)
    other = tmp_path / "other.pth"
    torch.save({"params": {"conv.weight": torch.zeros(3, 3, 3, 3)}}, other)
    with pytest.raises(CheckpointError, match="not an SMFANet state dict"):
        load_network(other)
    state = SMFANet(dim=16, n_blocks=2).state_dict()
    state["feats.1.extra"] = torch.zeros(1)
    torch.save(state, other)
    with pytest.raises(CheckpointError, match="does not match SMFANet"):
        load_network(other)
    with pytest.raises(CheckpointError, match="expected a state dict"):
        torch.save([1, 2, 3], other)
        load_network(other)
    with pytest.raises(CheckpointError, match=r"missing to_feat\.weight"):
        infer_config({})


def test_scan_verifies_published_hashes(tmp_path: Path):
    shutil.copy(smfanet_dir() / BY_NAME["smfanet-x2"].file, tmp_path)
    # A file under the x4 name that is really the x3 network: right format, wrong hash.
    shutil.copy(smfanet_dir() / BY_NAME["smfanet-x3"].file, tmp_path / BY_NAME["smfanet-x4"].file)
    found = {c.known.name: c for c in scan(tmp_path)}
    assert found["smfanet-x2"].problem is None
    assert "does not match the published" in found["smfanet-x4"].problem
    engine = SREngine(tmp_path)
    assert engine.scales == [2]
    assert "SMFANet_DF2K_100w_x4SR.pth" in engine.status()["problems"][0]
    assert {c.known.name for c in scan(tmp_path, verify=False) if c.problem is None} == {"smfanet-x2", "smfanet-x4"}


# ------------------------------------------------------------------------------------------ download
@pytest.fixture
def mirror(tmp_path: Path):
    """A local HTTP mirror of the checkpoint folder (the real download URL is out of reach in tests)."""
    root = tmp_path / "mirror"
    root.mkdir()
    for known in MANIFEST[:2]:
        shutil.copy(smfanet_dir() / known.file, root)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/{{file}}"
    server.shutdown()


def test_download_verifies_and_installs(mirror, tmp_path: Path):
    _root, url = mirror
    dest = tmp_path / "models"
    messages: list[str] = []
    paths = download(["smfanet-x2"], dest, url_template=url, progress=messages.append)
    assert paths == [dest / "SMFANet_DF2K_100w_x2SR.pth"]
    assert hashlib.sha256(paths[0].read_bytes()).hexdigest() == BY_NAME["smfanet-x2"].sha256
    assert messages[-1].endswith("installed, sha256 ok")
    download(["smfanet-x2"], dest, url_template=url, progress=messages.append)
    assert messages[-1].endswith("already present, sha256 ok")
    assert SREngine(dest).scales == [2]


def test_download_refuses_a_wrong_file_and_leaves_nothing(mirror, tmp_path: Path):
    root, url = mirror
    (root / "SMFANet_DF2K_100w_x2SR.pth").write_bytes(b"tampered")
    dest = tmp_path / "models"
    with pytest.raises(CheckpointError, match="does not match the published"):
        download(["smfanet-x2"], dest, url_template=url)
    with pytest.raises(CheckpointError, match=r"download from .* failed"):
        download(["smfanet-x4"], dest, url_template=url)  # not on the mirror: 404
    with pytest.raises(CheckpointError, match="unknown checkpoint"):
        download(["smfanet-x9"], dest, url_template=url)
    assert list(dest.iterdir()) == []


def test_cli_weights(mirror, tmp_path: Path, capsys):
    from toolserver.cli import main

    _root, url = mirror
    assert main(["weights", "download", "smfanet-x3", "--dir", str(tmp_path / "m"), "--url-template", url]) == 0
    assert main(["weights", "list", "--dir", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "smfanet-x3" in out and " ok" in out and "missing" in out
    assert main(["weights", "download", "smfanet-x4", "--dir", str(tmp_path / "m"), "--url-template", url]) == 1


# ----------------------------------------------------------------------------------------- fidelity
FIDELITY_PHOTOS = ["LadyBird.jpg", "Wood.jpg", "Bridge_by_Sander_Klootwijk.jpg", "TwoWings.jpg",
                   "Dragonfly_by_Bolly.jpg", "umang_by_Abhishek_Mudgal.jpg"]


def _hr(name: str, long_side: int = 360) -> Image.Image:
    """A photo brought to a detailed HR size divisible by 2, 3 and 4 (the camera JPEG is softer at 1:1)."""
    img = Image.open(photo(name)).convert("RGB")
    k = long_side / max(img.size)
    return img.resize((round(img.width * k) // 12 * 12, round(img.height * k) // 12 * 12), Image.Resampling.BICUBIC)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smfanet-x2", "smfanet-x3", "smfanet-x4", "smfanet-plus-x4"])
def test_restores_better_than_bicubic(name, tmp_path: Path):
    """Bicubic-downscale real photographs, restore them, and compare Y-PSNR (border = scale) with bicubic.

    The paper reports SMFANet x4 at +3.8 dB over bicubic on Set5; on these photos the mean gain must be at
    least 1.5 dB at every scale, and SMFANet must win on every photo.
    """
    known = BY_NAME[name]
    (tmp_path / known.file).symlink_to(smfanet_dir() / known.file)
    engine = SREngine(tmp_path, prefer_plus=known.variant == "smfanet-plus")
    s = known.scale
    gains = []
    for photo_name in FIDELITY_PHOTOS:
        hr = _hr(photo_name)
        lr = hr.resize((hr.width // s, hr.height // s), Image.Resampling.BICUBIC)
        restored = engine.upscale(lr, s).image
        bicubic = lr.resize(hr.size, Image.Resampling.BICUBIC)
        gain = psnr_y(restored, hr, s) - psnr_y(bicubic, hr, s)
        assert gain > 0, (photo_name, gain)
        gains.append(gain)
    engine.close()
    assert sum(gains) / len(gains) >= 1.5, gains


# ------------------------------------------------------------------------------------------- basicsr
def test_basicsr_registration(monkeypatch):
    """Without basicsr nothing happens; with it, SMFANet lands in ARCH_REGISTRY once."""
    import sys
    import types

    from toolserver.sr import basicsr_compat

    monkeypatch.setitem(sys.modules, "basicsr", None)  # as on a CPU-only torch: not importable
    assert basicsr_compat.register() is False

    class Registry:  # basicsr.utils.registry.Registry's interface: register() decorator, `in`, get()
        def __init__(self):
            self._obj_map: dict[str, type] = {}

        def register(self):
            def deco(cls):
                assert cls.__name__ not in self._obj_map, "registered twice"
                self._obj_map[cls.__name__] = cls
                return cls
            return deco

        def __contains__(self, name):
            return name in self._obj_map

        def get(self, name):
            return self._obj_map[name]

    registry_module = types.ModuleType("basicsr.utils.registry")
    registry_module.ARCH_REGISTRY = Registry()
    monkeypatch.setitem(sys.modules, "basicsr", types.ModuleType("basicsr"))
    monkeypatch.setitem(sys.modules, "basicsr.utils", types.ModuleType("basicsr.utils"))
    monkeypatch.setitem(sys.modules, "basicsr.utils.registry", registry_module)
    assert basicsr_compat.register() is True and basicsr_compat.register() is True
    assert registry_module.ARCH_REGISTRY.get("SMFANet") is SMFANet
