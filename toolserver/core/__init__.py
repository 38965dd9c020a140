"""The core every adapter calls: `Core` (a facade over intake, tool calls and delivery, `/act`, inspection,
documents, readiness and the wiring of shared services). No HTTP in this package.

Its names are imported when first used, not with the package: a model host (`core.modelhost`) imports only the
models' part of it (`core.modelset`), not the whole server that `Core` brings."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolserver.core.facade import Core
    from toolserver.core.intake import RawImage
    from toolserver.core.readiness import Readiness
    from toolserver.core.results import format_validation_error
    from toolserver.core.wiring import build_library

__all__ = ["Core", "RawImage", "Readiness", "build_library", "format_validation_error"]
_HOMES = {"Core": "facade", "RawImage": "intake", "Readiness": "readiness", "build_library": "wiring",
          "format_validation_error": "results"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
