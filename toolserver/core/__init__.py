"""The core every adapter calls: `Core` (a facade over intake, tool calls and delivery, `/act`, inspection,
documents, readiness and the wiring of shared services). No HTTP in this package."""

from toolserver.core.facade import Core
from toolserver.core.intake import RawImage
from toolserver.core.readiness import Readiness
from toolserver.core.results import format_validation_error
from toolserver.core.wiring import build_library

__all__ = ["Core", "RawImage", "Readiness", "build_library", "format_validation_error"]
