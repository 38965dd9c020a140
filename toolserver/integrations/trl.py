"""A TRL environment class for a toolserver profile: `GRPOTrainer(environment_factory=environment_factory(url,
profile))`.

TRL's `environment_factory` (huggingface/trl, `trl/trainer/grpo_trainer.py`) builds one instance per rollout with no
arguments, calls `reset(**row)` with the dataset row before generating (a returned text is appended to the row's
last user message), and exposes every public method as a tool: its JSON schema comes from the method's type hints
and Google-style docstring (`transformers.utils.get_json_schema`), and what it returns becomes the tool message; a
list of content blocks (`{"type": "image", "image": <PIL image>}`, `{"type": "text", "text": ...}`) carries images
to the VLM. So the class made here has:

- a no-argument constructor (the server URL, profile and options are the factory's);
- `reset(**row)`: releases the previous episode's session and opens one holding the row's `images` (or `image`):
  PIL images, local paths, bytes or data URLs; returns a line naming the images by key (`describe_images=False`:
  nothing);
- one method per tool of the profile, named as the tool, with typed arguments and a docstring generated from the
  server's schema (`GET /v1/tools?profile=...`; constraints a type hint cannot hold, such as a list's length, are
  written into the argument's description); it runs the call on the server and returns the tool's images as PIL
  images followed by its text (just the text when there is no image, or when the call failed: the model reads the
  failure).

`tool_images="user"` (with the trainer's `processor`) is for chat templates that drop images inside tool messages
(trl#5663): the processor's template is wrapped by `tool_images_in_user_turn`, so each tool message keeps its text
while its images follow in a user turn. (TRL writes whatever a tool returns into a tool message: only the template
can move the images.)

An episode's session lives until the instance's next `reset` (TRL resets every instance for each batch, after the
reward functions, which get the instances as `environments` and may read `results`), until the instance is
collected, or until the server expires it (`ttl_s`). Calls go through toolserver's own client (`Client`), with its
retries. Importing this module does not import TRL.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import keyword
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union

from toolserver.client import Client, Session, ToolServerError
from toolserver.models import ToolResult

ToolImages = Literal["tool", "user"]
_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict,
                               "array": list, "null": type(None)}
_RESERVED = frozenset({"reset", "get_reward", "results", "session_id"})


def environment_factory(url: str, profile: str = "default", *, tool_images: ToolImages = "tool",
                        describe_images: bool = True, api_key: str | None = None, timeout: float = 120.0,
                        ttl_s: float = 900.0, coords: str | None = None, view: Mapping[str, Any] | None = None,
                        input_form: str | None = None, max_tool_calls: int | None = None,
                        processor: Any = None, client: Client | None = None) -> type:
    """The environment class of `profile` on the toolserver at `url`, for `GRPOTrainer(environment_factory=...)`.

    The profile's tools are read from the server now (one request). Session options (`coords`, `view`,
    `input_form`, `max_tool_calls`, `ttl_s`) are those of `POST /v1/sessions`. `tool_images="user"` needs the
    `processor` the trainer uses: its chat template is wrapped by `tool_images_in_user_turn` (in place).
    """
    if tool_images == "user":
        if processor is None:
            raise ValueError('tool_images="user" rewrites the chat template: pass the processor the trainer uses')
        place_tool_images_in_user_turn(processor)
    client = client or Client(url, api_key=api_key, timeout=timeout)
    entries = client.list_tools(profile)
    settings = {"profile": profile, "coords": coords, "view": view, "input_form": input_form, "ttl_s": ttl_s,
                "max_tool_calls": max_tool_calls, "output": {"format": "png", "delivery": "inline"}}
    namespace: dict[str, Any] = {
        "__doc__": f"toolserver profile `{profile}` ({url}) as a TRL environment: one session per episode.",
        "__init__": _init, "reset": _reset_method(client, settings, describe_images),
    }
    for entry in entries:
        function = entry["function"]
        if function["name"] in _RESERVED or function["name"].startswith("_"):
            raise ValueError(f"tool {function['name']!r} of profile {profile!r} cannot be a method of the class")
        namespace[function["name"]] = tool_method(function)
    name = "Toolserver_" + "".join(part.capitalize() for part in profile.replace("-", "_").split("_"))
    return type(name, (), namespace)


def _init(self: Any) -> None:
    self.session_id = None
    self.results = []  # the episode's tool results (ToolResult), for reward functions
    self._session = None
    self._release = None


def _reset_method(client: Client, settings: dict[str, Any], describe: bool) -> Callable[..., str | None]:
    def reset(self: Any, **row: Any) -> str | None:
        """Start an episode: a new session holding the row's images (`images`, or `image`)."""
        _end_episode(self)
        images = row.get("images")
        if images is None:
            images = [row["image"]] if row.get("image") is not None else []
        session = client.create_session([image for image in images if image is not None], **_options(settings))
        self._session, self.session_id, self.results = session, session.id, []
        self._release = weakref.finalize(self, _release_quietly, session)
        if not describe or not session.images:
            return None
        named = ", ".join(f"`{info.key}` (index {info.index}, {info.width}x{info.height})" for info in session.images)
        return f"\nImages: {named}."

    return reset


def _options(settings: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in settings.items() if value is not None}


def _end_episode(env: Any) -> None:
    if env._release is not None:
        env._release()
    env._session, env.session_id, env._release = None, None, None


def _release_quietly(session: Session) -> None:
    with contextlib.suppress(ToolServerError):  # the server is down: the session expires by itself
        session.release()


def tool_method(function: Mapping[str, Any]) -> Callable[..., Any]:
    """A method running the tool `function` (an OpenAI function entry of `/v1/tools`) in the episode's session,
    with a signature and a Google-style docstring that `transformers.utils.get_json_schema` reads as its schema."""
    name = function["name"]
    properties: dict[str, Any] = function.get("parameters", {}).get("properties", {})
    required = set(function.get("parameters", {}).get("required", []))
    python_names = {prop: prop + "_" if keyword.iskeyword(prop) else prop for prop in properties}
    schema_names = {python: prop for prop, python in python_names.items()}

    def method(self: Any, **kwargs: Any) -> Any:
        if self._session is None:
            return "Error: no episode is running (reset was not called)."
        arguments = {schema_names.get(k, k): v for k, v in kwargs.items() if v is not None}
        result = self._session.call(name, arguments)
        self.results.append(result)
        return content_blocks(result)

    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    # Required arguments first: a Python signature cannot put one after an argument with a default.
    for prop in sorted(properties, key=lambda p: p not in required):
        python = python_names[prop]
        annotations[python] = json_type(properties[prop])
        default = inspect.Parameter.empty if prop in required else None
        parameters.append(inspect.Parameter(python, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=annotations[python]))
    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    method.__doc__ = _docstring(function.get("description") or name, properties, python_names)
    return method


def json_type(schema: Mapping[str, Any]) -> Any:
    """The Python type hint of a JSON schema, as `transformers.utils.get_json_schema` reads them back."""
    if schema.get("enum"):
        return Literal[tuple(schema["enum"])]
    if "const" in schema:
        return Literal[schema["const"]]
    members = schema.get("anyOf") or schema.get("oneOf")
    if members:
        return _union([json_type(member) for member in members])
    kind = schema.get("type")
    if isinstance(kind, list):
        return _union([json_type({**schema, "type": k}) for k in kind])
    if kind == "array":
        items = schema.get("items")
        return list[json_type(items)] if isinstance(items, Mapping) else list  # type: ignore[misc]
    return _JSON_TYPES.get(kind, Any) if isinstance(kind, str) else Any


def _union(types: list[Any]) -> Any:
    unique = list(dict.fromkeys(types))
    return unique[0] if len(unique) == 1 else Union[tuple(unique)]  # noqa: UP007 - built at run time


def _docstring(description: str, properties: Mapping[str, Any], python_names: Mapping[str, str]) -> str:
    lines = [" ".join(description.split()), "", "Args:"]
    for prop, schema in properties.items():
        text = " ".join(str(schema.get("description") or prop.replace("_", " ")).split())
        lines.append(f"    {python_names[prop]}: {text}{_constraints(schema)}")
    return "\n".join(lines) if properties else lines[0]


def _constraints(schema: Mapping[str, Any]) -> str:
    """What a type hint cannot say (a list's length, bounds), in words."""
    notes = []
    low, high = schema.get("minItems"), schema.get("maxItems")
    if low is not None and low == high:
        notes.append(f"exactly {low} items")
    elif low is not None or high is not None:
        notes.append(" and ".join(f"{word} {n} items" for word, n in (("at least", low), ("at most", high))
                                  if n is not None))
    nested = schema.get("items")
    items: Mapping[str, Any] = nested if isinstance(nested, Mapping) else schema
    for key, word in (("minimum", ">="), ("maximum", "<=")):
        if key in items:
            notes.append(f"{'each ' if items is not schema else ''}{word} {items[key]}")
    return f" ({', '.join(notes)})" if notes else ""


def content_blocks(result: ToolResult) -> list[dict[str, Any]] | str:
    """TRL's content blocks of a result: its images as PIL images, then its text; the text alone without images."""
    if not result.images:
        return result.text
    from PIL import Image

    blocks: list[dict[str, Any]] = []
    for image in result.images:
        with Image.open(io.BytesIO(image.content())) as decoded:
            blocks.append({"type": "image", "image": decoded.convert("RGB")})
    if result.text:
        blocks.append({"type": "text", "text": result.text})
    return blocks


# The preamble `tool_images_in_user_turn` puts before a chat template: it rewrites `messages` so that each run of
# tool messages keeps their text and is followed by one user message holding their images. Jinja assigns at the
# top level of a template shadow the render's `messages` for the rest of it.
_USER_TURN_PREAMBLE = """{%- set _toolserver = namespace(messages=[], images=[]) -%}
{%- for _message in messages -%}
    {%- if _message.role == 'tool' and _message.content is not string -%}
        {%- set _toolserver.images = _toolserver.images + (_message.content | selectattr('type', 'in', ['image',
            'image_url']) | list) -%}
        {%- set _toolserver.messages = _toolserver.messages + [{'role': 'tool', 'name': _message.name,
            'tool_call_id': _message.tool_call_id, 'content': (_message.content | rejectattr('type', 'in',
            ['image', 'image_url']) | list)}] -%}
    {%- else -%}
        {%- if _toolserver.images -%}
            {%- set _toolserver.messages = _toolserver.messages + [{'role': 'user', 'content': _toolserver.images}] -%}
            {%- set _toolserver.images = [] -%}
        {%- endif -%}
        {%- set _toolserver.messages = _toolserver.messages + [_message] -%}
    {%- endif -%}
{%- endfor -%}
{%- if _toolserver.images -%}
    {%- set _toolserver.messages = _toolserver.messages + [{'role': 'user', 'content': _toolserver.images}] -%}
{%- endif -%}
{%- set messages = _toolserver.messages -%}
"""


def tool_images_in_user_turn(template: str) -> str:
    """`template` (a chat template) with every tool message's images moved into a user turn right after that run
    of tool messages; the tool messages keep their text. For templates that drop images in tool messages (Qwen2-VL,
    Qwen2.5-VL, Gemma; trl#5663) and so would leave the image tokens out while TRL feeds the images."""
    return _USER_TURN_PREAMBLE + template


def place_tool_images_in_user_turn(processor: Any) -> None:
    """Wrap `processor.chat_template` with `tool_images_in_user_turn`, once. TRL recognises the templates whose tool
    calls it can parse by their exact text, so the tokenizer's response template is set first from the original
    template (`trl.chat_template_utils.add_response_schema`) when TRL knows it and none is set yet."""
    template = processor.chat_template
    if template is None or template.startswith(_USER_TURN_PREAMBLE):
        return
    tokenizer = getattr(processor, "tokenizer", processor)
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            from trl.chat_template_utils import add_response_schema
        except ImportError:
            pass  # not training with TRL: nothing parses tool calls from this template's text
        else:
            with contextlib.suppress(ValueError):  # a template TRL does not know: the caller sets its response template
                add_response_schema(processor)
    processor.chat_template = tool_images_in_user_turn(template)


def release_all(environments: Sequence[Any]) -> None:
    """End the episodes of these instances now (e.g. `trainer._environment_pool` values after training)."""
    for env in environments:
        _end_episode(env)
