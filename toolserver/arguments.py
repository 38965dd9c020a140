"""How a profile's system turns a tool call's arguments into a dict, and what it says when it cannot.

Every entry point (`/tools/{name}`, `/tool_calls`, `/act`, MCP) hands the arguments to the profile's
reader, so one profile answers the same way whichever door a call comes through.

- `strict` — `json.loads` of an argument string (verl's parsers, hence ARM-Thinker; Groundlight and MGPO
  build their arguments themselves; our own `default`). Anything else is refused as invalid JSON.
- `qwen-agent` — Qwen-Agent's `BaseTool._verify_json_format_args` (QwenLM/Qwen-Agent, commit d04611b):
  an argument string loses a surrounding ``` fence, then `json.loads`, then `json5.loads` (unquoted keys,
  single quotes, trailing commas); the result is checked against the tool's JSON schema with
  `jsonschema.validate`, so a missing required parameter or a wrong type is an error. Qwen-Agent's agent
  catches that exception and shows the model `An error occurred when calling tool `<name>`:` followed by
  the exception's type and text (jsonschema's own message, so the same library writes it) and `Traceback:`
  with the frames. Deviation: we end the text at `Traceback:`; the frames would name files of the
  reference's installation, which say nothing to the model and differ from one machine to another.
- `python` — DeepEyes and verl-tool's Pixel-Reasoner index whatever `json.loads` gave them, so any JSON value
  (a list, a number, null) reaches the tool as it is, and the tool's own lookups fail with Python's words.
  An argument string (OpenAI `tool_calls`) is still read as JSON first, as `strict` does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from typing import Any

import json5
import jsonschema

from toolserver import jsonio
from toolserver.errors import ToolFailure


class ArgumentStyle(StrEnum):
    """How a profile's system reads a call's arguments (the module docstring says what each does)."""

    STRICT = "strict"
    QWEN_AGENT = "qwen-agent"
    PYTHON = "python"


JSON5_MAX_CHARS = 1_000_000  # json5 is pure Python: a fallback for model-written arguments, not megabytes


def read_arguments(style: ArgumentStyle | str, tool_name: str, raw: Any, schema: Callable[[], dict[str, Any]]) -> Any:
    """The arguments as a dict (any JSON value for `python`), or ToolFailure with the text the system would
    show the model. `schema` gives the tool's JSON schema, for the styles that validate against it."""
    if style == ArgumentStyle.QWEN_AGENT:
        return _qwen_agent(tool_name, raw, schema())
    if style == ArgumentStyle.PYTHON and not isinstance(raw, str):
        return raw
    return _strict(tool_name, raw)


def _strict(tool_name: str, raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = jsonio.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            text = f"Error: the arguments of {tool_name} are not valid JSON: {exc}."
            raise ToolFailure(text, "invalid_json") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ToolFailure(f"Error: the arguments of {tool_name} must be a JSON object.", "invalid_arguments")
    return raw


def json5_loads(text: str) -> Any:
    """JSON5 (a superset of JSON), nesting bounded: JSON's fast parser first, then json5's.

    Raises json.JSONDecodeError (the JSON parser's) when neither reads the text.
    """
    try:
        return jsonio.loads(text)
    except json.JSONDecodeError as json_error:
        if len(text) > JSON5_MAX_CHARS:
            raise
        try:
            value = json5.loads(text)
        except (ValueError, RecursionError):
            raise json_error from None
        if isinstance(value, dict | list) and jsonio.too_deep(value):
            raise json_error from None
        return value


def qwen_agent_json_loads(text: str) -> Any:
    """Qwen-Agent's `json_loads`: strip newlines at the ends and a ``` fence, then JSON, then JSON5.

    Raises json.JSONDecodeError (the first parser's) when both fail, as the reference does.
    """
    text = text.strip("\n")
    if text.startswith("```") and text.endswith("\n```"):
        text = "\n".join(text.split("\n")[1:-1])
    return json5_loads(text)


def qwen_agent_error(tool_name: str, exc: BaseException) -> ToolFailure:
    """Qwen-Agent's `Agent._call_tool` message for an exception raised by a tool (frames left out)."""
    text = f"An error occurred when calling tool `{tool_name}`:\n{type(exc).__name__}: {exc}\nTraceback:\n"
    return ToolFailure(text, "invalid_arguments")


def _qwen_agent(tool_name: str, raw: Any, schema: dict[str, Any]) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = qwen_agent_json_loads(raw)
        except json.JSONDecodeError:
            raise qwen_agent_error(tool_name, ValueError("Parameters must be formatted as a valid JSON!")) from None
    if raw is None:
        raw = {}
    # What jsonschema.validate does (check the schema, raise the best-matching error), with the checked
    # validator kept per schema: 0.03 ms a call instead of 1 ms.
    error = jsonschema.exceptions.best_match(_validator(schema).iter_errors(raw))
    if error is not None:
        raise qwen_agent_error(tool_name, error)
    return raw


_validators: dict[int, tuple[dict[str, Any], Any]] = {}


def _validator(schema: dict[str, Any]) -> Any:
    """The schema's validator, checked once. Schemas are long-lived objects (a tool's constant or its cached
    generated schema); the entry keeps the schema alive, so its id cannot be reused by another."""
    found = _validators.get(id(schema))
    if found is None or found[0] is not schema:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        found = _validators[id(schema)] = (schema, cls(schema))
    return found[1]
