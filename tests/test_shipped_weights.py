"""The official SMFANet checkpoints ship inside the package (its data, so a wheel has them too): a server started
with no model setting has them."""

from __future__ import annotations

import hashlib

import httpx

from tests.conftest import b64, gradient, png_bytes
from toolserver.config import SHIPPED_SMFANET, Settings

PUBLISHED = {  # Zheng-MJ/SMFANet pretrain/, commit a05e0bb (toolserver/sr/smfanet/NOTICE)
    "SMFANet_DF2K_100w_x2SR.pth": "daea7fc72a6e4aff80163768209ea5e56fd9705db9e6323f31822f24cd03902e",
    "SMFANet_DF2K_100w_x3SR.pth": "ae9953d36b4afb25211a23b02499dc029dfe64a2549c3426b29aaca14f17baa1",
    "SMFANet_DF2K_100w_x4SR.pth": "3141324e9ef6ebdd2338566b30ad034a3bf0c3c34e8030d4086ce4330c319402",
    "SMFANet_plus_DF2K_100w_x4SR.pth": "28a807e1ee1f46a990458efd813654ea0ba023148a8423e49847d9b5c4f98ca3",
}


def test_the_shipped_files_are_the_published_ones_with_their_licence():
    assert Settings().sr_model_dir == SHIPPED_SMFANET
    for name, digest in PUBLISHED.items():
        assert hashlib.sha256((SHIPPED_SMFANET / name).read_bytes()).hexdigest() == digest
    assert "Apache License" in (SHIPPED_SMFANET / "LICENSE.txt").read_text()
    notice = (SHIPPED_SMFANET / "NOTICE").read_text()
    assert "github.com/Zheng-MJ/SMFANet" in notice and "Apache License 2.0" in notice


def test_a_server_with_default_settings_serves_super_resolution(live_server):
    # live_server sets no model directory: the shipped one is the default.
    ready = httpx.get(f"{live_server.url}/readyz", timeout=30).json()["super_resolution"]
    assert ready["available"] is True and ready["scales"] == [2, 3, 4]
    assert {c["name"] for c in ready["installed"]} == {"smfanet-x2", "smfanet-x3", "smfanet-x4", "smfanet-plus-x4"}
    with httpx.Client(base_url=live_server.url, timeout=120) as http:
        sid = http.post("/v1/sessions", json={"images": [{"data": b64(png_bytes(gradient(64, 48)))}]}).json()[
            "session_id"]
        result = http.post(f"/v1/sessions/{sid}/tools/super_resolution", json={"image": 0, "scale": 2}).json()
    assert result["ok"], result["text"]
    assert result["meta"]["method"] == "smfanet" and (result["images"][0]["width"], result["images"][0]["height"]) == (
        128, 96)
