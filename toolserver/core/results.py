"""Small constructors for tool results the core makes itself (failures before or around a tool's run), and the
model-readable text of an arguments model's validation errors."""

from __future__ import annotations

from pydantic import ValidationError

from toolserver.models import ErrorInfo, ToolResult


def failure(tool: str, text: str, code: str, meta: dict | None = None) -> ToolResult:
    return ToolResult(ok=False, tool=tool, text=text, error=ErrorInfo(code=code, message=text), meta=meta or {})


def format_validation_error(tool: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return f"Error: invalid arguments for {tool}: " + "; ".join(parts) + "."
