"""Optional: make SMFANet available to basicsr training configs (`network_g: {type: SMFANet, ...}`).

The service never imports basicsr (it cannot be imported on a CPU-only torch, see docs/decisions.md); a
training environment that has it can call `register()` once before building models.
"""

from __future__ import annotations

from toolserver.sr.arch import SMFANet


def register() -> bool:
    """Add SMFANet to basicsr's ARCH_REGISTRY; False when basicsr cannot be imported here."""
    try:
        from basicsr.utils.registry import ARCH_REGISTRY
    except Exception:  # ImportError, or basicsr's own torchvision failures at import time
        return False
    if "SMFANet" not in ARCH_REGISTRY:
        ARCH_REGISTRY.register()(SMFANet)
    return True
