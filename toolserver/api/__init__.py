"""The HTTP adapter (FastAPI): a thin layer over `toolserver.core.Core`, one router per resource."""

from toolserver.api.app import create_app

__all__ = ["create_app"]
