"""OpenAI function-calling schemas generated from a tool's pydantic arguments model.

pydantic emits JSON Schema with titles, `$defs` and `anyOf [X, null]` for optional fields; OpenAI
function calling wants plain inline schemas. Non-strict form: optional fields are simply not
required. Strict form (`strict: true`): every property required, optional ones nullable, and
`additionalProperties: false` on every object, and no string-length keywords (`minLength`, `maxLength`), which
strict function schemas refuse: the server still checks those limits (the arguments model, and
`core.calls` for tools that read their arguments raw).

A field may carry what only its strict form shows under `x-strict` (`strict_only`): a seed profile's schema stays
as its paper wrote it for the model, while its strict form, which no paper wrote, gets what the subset needs (a
type for an untyped array's items). `strict_violations` checks a schema against that subset.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

_DROP = {"title", "default"}
STRICT_ONLY = "x-strict"  # a field's additions to its strict form, dropped from the non-strict one


def strict_only(**additions: Any) -> dict[str, Any]:
    """`json_schema_extra` for a field whose strict form needs more than its verbatim one: `strict_only(items={
    "type": "number"}, minItems=4)`. On an optional field they go to the non-null option."""
    return {STRICT_ONLY: additions}


def _apply_strict_only(node: dict[str, Any], strict: bool) -> dict[str, Any]:
    additions = node.get(STRICT_ONLY)
    if additions is None:
        return node
    node = {k: v for k, v in node.items() if k != STRICT_ONLY}
    if not strict:
        return node
    if isinstance(node.get("anyOf"), list):
        node["anyOf"] = [o if o == {"type": "null"} else {**o, **additions} for o in node["anyOf"]]
        return node
    return {**node, **additions}
_NOT_STRICT = ("minLength", "maxLength")  # JSON Schema keywords OpenAI's strict mode does not accept


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = defs[node["$ref"].split("/")[-1]]
            merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
            return _inline_refs(merged, defs)
        return {k: _inline_refs(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


def _nullable_inner(node: dict[str, Any]) -> dict[str, Any] | None:
    """For `anyOf [X, {type: null}]` return X (with the node's description), else None."""
    options = node.get("anyOf")
    if not isinstance(options, list) or len(options) != 2:
        return None
    rest = [o for o in options if o != {"type": "null"}]
    if len(rest) != 1:
        return None
    inner = dict(rest[0])
    if "description" in node:
        inner["description"] = node["description"]
    return inner


def _clean(node: Any, *, strict: bool) -> Any:
    if isinstance(node, list):
        return [_clean(v, strict=strict) for v in node]
    if not isinstance(node, dict):
        return node
    node = _apply_strict_only(node, strict)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP and not isinstance(value, dict):
            continue
        if key == "properties":
            out[key] = {name: _clean(sub, strict=strict) for name, sub in value.items()}
        else:
            out[key] = _clean(value, strict=strict)
    if strict:
        for key in _NOT_STRICT:
            out.pop(key, None)
    if out.get("type") == "object" and "properties" in out:
        required = list(out.get("required", []))
        props = out["properties"]
        for name, sub in list(props.items()):
            inner = _nullable_inner(sub)
            if name in required:
                continue
            if strict:
                # Optional fields become required-but-nullable, as strict mode demands.
                if inner is None:
                    props[name] = {"anyOf": [sub, {"type": "null"}]}
                elif isinstance(inner.get("type"), str) and set(inner) <= {"type", "description", "enum"}:
                    props[name] = {**inner, "type": [inner["type"], "null"]}
                    if "enum" in inner:  # else a strict model could never leave it out
                        props[name]["enum"] = [*inner["enum"], None]
            elif inner is not None:
                props[name] = inner
        if strict:
            out["required"] = list(props)
            out["additionalProperties"] = False
        elif required:
            out["required"] = required
    return out


def loadable_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    """A verbatim prompt schema repaired so that client libraries load it: `required` names only properties
    that exist (DeepEyes' schema requires an undefined `bbox`; Qwen-Agent's MCP loader refuses the whole server
    over it). The verbatim form stays at `/v1/tools` for trainers that need the prompt as the paper wrote it."""
    required = parameters.get("required")
    if not isinstance(required, list):
        return parameters
    properties = parameters.get("properties", {})
    return {**parameters, "required": [name for name in required if name in properties]}


def parameters_schema(args_model: type[BaseModel], *, strict: bool = False) -> dict[str, Any]:
    raw = args_model.model_json_schema()
    raw.pop("description", None)  # an arguments model's docstring is for developers, not the model
    defs = raw.pop("$defs", {})
    schema = _clean(_inline_refs(raw, defs), strict=strict)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    if not strict and "required" not in schema:
        schema["required"] = []
    return schema


def function_tool(name: str, description: str, args_model: type[BaseModel], *, strict: bool = False) -> dict:
    function: dict[str, Any] = {
        "name": name,
        "description": description,
        "parameters": parameters_schema(args_model, strict=strict),
    }
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


# -- OpenAI's Structured Outputs subset (what a `strict: true` function schema may use) ------------------------------
STRICT_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
STRICT_KEYWORDS = frozenset({
    "type", "description", "enum", "const", "anyOf", "$ref", "$defs",
    "properties", "required", "additionalProperties", "items",
    "pattern", "format", "multipleOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minItems", "maxItems"})
STRICT_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"})
STRICT_MAX_DEPTH, STRICT_MAX_PROPERTIES, STRICT_MAX_ENUM = 10, 5000, 1000


def strict_violations(schema: Any) -> list[str]:
    """Why OpenAI's Structured Outputs would refuse `schema` as a strict function's parameters (empty: it accepts
    it): the root an object; every object closed (`additionalProperties: false`) with every property required;
    every schema node typed (`type`, or `anyOf`/`$ref` whose options are); only the subset's keywords and string
    formats; at most 10 levels of nesting, 5000 properties and 1000 values in an enum."""
    found: list[str] = []
    if not isinstance(schema, dict) or schema.get("type") != "object":
        found.append("$: the root must be an object schema (type: object), not anyOf or another type")
    counted = [0]
    _check_node(schema, "$", 0, found, counted)
    if counted[0] > STRICT_MAX_PROPERTIES:
        found.append(f"$: {counted[0]} properties in all, over the subset's {STRICT_MAX_PROPERTIES}")
    return found


def _check_node(node: Any, where: str, depth: int, found: list[str], counted: list[int]) -> None:
    if not isinstance(node, dict):
        found.append(f"{where}: a schema must be an object, not {type(node).__name__}")
        return
    if depth > STRICT_MAX_DEPTH:
        found.append(f"{where}: nested deeper than {STRICT_MAX_DEPTH} levels")
    found.extend(f"{where}: keyword `{key}` is not in the strict subset" for key in node if key not in STRICT_KEYWORDS)
    types = node.get("type")
    type_list = types if isinstance(types, list) else [types] if types is not None else []
    if not type_list and "anyOf" not in node and "$ref" not in node:
        found.append(f"{where}: has no `type`")
    found.extend(f"{where}: type {t!r} is not in the strict subset" for t in type_list if t not in STRICT_TYPES)
    if "format" in node and node["format"] not in STRICT_FORMATS:
        found.append(f"{where}: format {node['format']!r} is not in the strict subset")
    if isinstance(node.get("enum"), list) and len(node["enum"]) > STRICT_MAX_ENUM:
        found.append(f"{where}: {len(node['enum'])} enum values, over the subset's {STRICT_MAX_ENUM}")
    if "object" in type_list or "properties" in node:
        _check_object(node, where, depth, found, counted)
    if "array" in type_list and "items" not in node:
        found.append(f"{where}: an array without `items`")
    if "items" in node:
        _check_node(node["items"], f"{where}.items", depth + 1, found, counted)
    for index, option in enumerate(node.get("anyOf") or []):
        _check_node(option, f"{where}.anyOf[{index}]", depth, found, counted)
    for name, sub in (node.get("$defs") or {}).items():
        _check_node(sub, f"{where}.$defs.{name}", depth, found, counted)


def _check_object(node: dict[str, Any], where: str, depth: int, found: list[str], counted: list[int]) -> None:
    properties = node.get("properties") or {}
    counted[0] += len(properties)
    if node.get("additionalProperties") is not False:
        found.append(f"{where}: an object without `additionalProperties: false`")
    missing = [name for name in properties if name not in (node.get("required") or [])]
    if missing:
        found.append(f"{where}: properties not required: {', '.join(missing)}")
    for name, sub in properties.items():
        _check_node(sub, f"{where}.{name}", depth + 1, found, counted)
