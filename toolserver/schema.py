"""OpenAI function-calling schemas generated from a tool's pydantic arguments model.

pydantic emits JSON Schema with titles, `$defs` and `anyOf [X, null]` for optional fields; OpenAI
function calling wants plain inline schemas. Non-strict form: optional fields are simply not
required. Strict form (`strict: true`): every property required, optional ones nullable, and
`additionalProperties: false` on every object, and no string-length keywords (`minLength`, `maxLength`), which
strict function schemas refuse: the server still checks those limits (the arguments model, and
`core.calls` for tools that read their arguments raw).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

_DROP = {"title", "default"}
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
