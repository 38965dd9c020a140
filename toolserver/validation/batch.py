"""Many (text, validator, params) checks in one call, for reward computation; one bad item fails alone."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from toolserver.models import ErrorInfo, ValidateItem, ValidateResult
from toolserver.validation.specs import BATCH_PARAMS, run_check


def _error(code: str, message: str) -> ValidateResult:
    return ValidateResult(ok=False, error=ErrorInfo(code=code, message=message))


def validate_one(item: ValidateItem, max_chars: int) -> ValidateResult:
    model = BATCH_PARAMS.get(item.tool)
    if model is None:
        return _error("unknown_validator", f"unknown validator {item.tool!r}; validators: {', '.join(BATCH_PARAMS)}")
    if not isinstance(item.text, str):
        return _error("invalid_text", f"text must be a string, got {type(item.text).__name__}")
    if len(item.text) > max_chars:
        return _error("text_too_long", f"text has {len(item.text)} characters; the limit is {max_chars}")
    if not isinstance(item.params, dict):
        return _error("invalid_params", f"params must be an object, got {type(item.params).__name__}")
    try:
        params = model.model_validate(item.params)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'params'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors(include_url=False))
        return _error("invalid_params", problems)
    result = run_check(item.tool, item.text, params)
    return ValidateResult(ok=True, result=result, text=f"Check result: {result}")


def validate_items(items: Sequence[ValidateItem], max_chars: int) -> list[ValidateResult]:
    return [validate_one(item, max_chars) for item in items]
