"""Parsers for the tool-call formats models emit (SPEC §7). They never raise.

Each returns the calls found and, for anything malformed, a model-readable error in that system's own
words where the system defines them (Groundlight, MGPO, Mini-o3) — never a silent drop (verl's Hermes
parser only logs bad calls).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from toolserver import jsonio
from toolserver.arguments import json5_loads

FORMATS = ("hermes", "groundlight", "mags-rl", "mgpo", "mini-o3", "qwen-agent", "deepeyes", "pixel-reasoner")
DEEPEYES_MAX_CALLS = 3  # VisualToolBoxV5.max_action_per_turn: later calls of a turn are ignored
# verl-tool's PixelReasonerTool.valid_mcp_func_names: any other name is not an action at all.
PIXEL_REASONER_ACTIONS = ("zoom_in", "crop_image_normalized", "select_frames", "crop_image")

_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_GROUNDLIGHT = re.compile(r"<tool>\s*(.*?)\s*</tool>", re.DOTALL)
_ZOOM = re.compile(r"<zoom>(.*?)</zoom>", re.DOTALL)
_MGPO = re.compile(r"```json\n([\s\S]*?)\n```")
_GROUNDING = re.compile(r"<grounding>(.*?)</grounding>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass
class ParsedCall:
    name: str
    arguments: dict[str, Any] | str  # a string: the argument JSON as written, read by the profile's rules


@dataclass
class Parsed:
    format: str
    calls: list[ParsedCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # What the environment itself answers when the text holds no call (not a tool result: Groundlight's env
    # sends it bare, where tool errors are wrapped in <result>).
    notices: list[str] = field(default_factory=list)
    # The environment ends the episode after this text (None: decided by the core's general rule).
    done: bool | None = None


def _json(text: str) -> tuple[Any, str | None]:
    try:
        return jsonio.loads(text), None
    except (json.JSONDecodeError, ValueError) as exc:
        return None, str(exc)


def parse_hermes(text: str) -> Parsed:
    out = Parsed("hermes")
    for i, match in enumerate(_HERMES.finditer(text), start=1):
        value, err = _json(match.group(1).strip())
        if err is not None:
            out.errors.append(f"Error: tool call {i} is not valid JSON ({err}). Write "
                              '<tool_call>{"name": ..., "arguments": {...}}</tool_call>.')
            continue
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            out.errors.append(f'Error: tool call {i} must be a JSON object with a "name" and "arguments".')
            continue
        arguments = value.get("arguments", {})
        if isinstance(arguments, str):  # some models double-encode the arguments
            arguments, err = _json(arguments) if arguments.strip() else ({}, None)
        if err is not None or not isinstance(arguments, dict):
            out.errors.append(f'Error: the "arguments" of tool call {i} ({value["name"]}) must be a JSON object.')
            continue
        out.calls.append(ParsedCall(value["name"], arguments))
    closed = text.count("</tool_call>")
    if text.count("<tool_call>") > closed:
        out.errors.append("Error: a <tool_call> is not closed with </tool_call>.")
    return out


def parse_groundlight_args(blob: str) -> dict[str, str]:
    """Groundlight's key-value lines: `key: value`, split at the first ': ', later keys overwrite."""
    args: dict[str, str] = {}
    for line in blob.strip().split("\n"):
        line = line.strip()
        if not line or ": " not in line:
            continue
        key, value = line.split(": ", 1)
        args[key.strip()] = value.strip()
    return args


def parse_groundlight(text: str) -> Parsed:
    out = Parsed("groundlight")
    match = _GROUNDLIGHT.search(text)
    if match is None:
        if "<answer>" not in text:
            out.notices.append("Error: No tool call or answer found in your last message.")
        return out
    raw = parse_groundlight_args(match.group(1))
    name = raw.get("name")
    if not name:
        out.errors.append("Error: Tool call must specify 'name' in key-value format.")
        return out
    if name != "zoom":
        out.calls.append(ParsedCall(name, {k: v for k, v in raw.items() if k != "name"}))
        return out
    problem = _zoom_args_problem(raw)
    if problem is not None:
        out.errors.append(f"Error: Parsing arguments for tool 'zoom': {problem}")
        return out
    out.calls.append(ParsedCall("zoom", {"keypoint": jsonio.loads(raw["keypoint"])}))
    return out


def _zoom_args_problem(raw: dict[str, str]) -> str | None:
    expected = {"name", "keypoint"}
    missing, extra = expected - set(raw), set(raw) - expected
    if missing:
        return f"Missing required arguments for zoom tool: {', '.join(sorted(missing))}"
    if extra:
        return f"Unexpected arguments for zoom tool: {', '.join(sorted(extra))}"
    value, err = _json(raw["keypoint"])
    if err is not None:
        return f"Error: Invalid JSON format for 'keypoint': '{raw['keypoint']}'"
    if not isinstance(value, list) or len(value) != 2:
        return "Error: 'keypoint' must be a JSON list of two elements."
    if not all(isinstance(v, int) for v in value):
        return "Error: Both elements in 'keypoint' list must be integers."
    return None


def parse_mags_rl(text: str) -> Parsed:
    out = Parsed("mags-rl")
    match = _ZOOM.search(text)
    if match is None:
        if "<answer>" not in text:
            out.errors.append("Zoom failed: no <zoom>[[x1, y1, x2, y2], ...]</zoom> found inside <think>.")
        return out
    value, err = _json(match.group(1).strip())
    if err is not None or not isinstance(value, list) or not value or not all(isinstance(b, list) for b in value):
        reason = err or "expected a list of boxes"
        out.errors.append(f"Zoom failed: cannot read the boxes ({reason}). "
                          "Use double brackets: <zoom>[[x1, y1, x2, y2], ...]</zoom>.")
        return out
    out.calls.append(ParsedCall("zoom", {"boxes": value}))
    return out


def parse_mgpo(text: str) -> Parsed:
    """MGPO: the first fenced ```json block holding a list of objects whose first usable item has an integer
    `bbox_2d` of 4 and a string `label`. No such block is itself an outcome: the grounding tool then returns the
    original image with MGPO's message."""
    out = Parsed("mgpo")
    for match in _MGPO.finditer(text):
        value, err = _json(match.group(1).strip())
        # MGPO's truncate_at_json_bbox: the block counts only if it is a non-empty list of objects, all of
        # them; one element of another type rejects the whole block (the next block is tried).
        if err is not None or not isinstance(value, list) or not value:
            continue
        if not all(isinstance(item, dict) for item in value):
            continue
        for item in value:
            bbox = item.get("bbox_2d")
            if (isinstance(bbox, list) and len(bbox) == 4 and all(isinstance(v, int) for v in bbox)
                    and isinstance(item.get("label"), str)):
                out.calls.append(ParsedCall("grounding", {"bbox_2d": bbox, "label": item["label"]}))
                return out
    out.calls.append(ParsedCall("grounding", {"bbox_2d": None, "label": None}))
    return out


def parse_mini_o3(text: str) -> Parsed:
    out = Parsed("mini-o3")
    for match in _GROUNDING.finditer(text):
        value, err = _json(match.group(1).strip())
        if err is not None or not isinstance(value, dict) or "bbox_2d" not in value:
            info = err or 'expected {"bbox_2d": [x0, y0, x1, y1], "source": "original_image"}'
            out.errors.append(f"ERROR occurs during grounding. Error Information: {info}.\n")
            continue
        out.calls.append(ParsedCall("zoom_in", {"image": value.get("source", "original_image"),
                                                "bbox_2d": value["bbox_2d"]}))
    return out


def parse_qwen_agent(text: str) -> Parsed:
    """Qwen-Agent's reading of `<tool_call>` blocks (NousFnCallPrompt.postprocess_fncall_messages, d04611b).

    Only the text after the last `</think>` is read when the text thinks (none of it while a `<think>` is
    open). Each block is read with JSON5; one that does not parse falls back to Qwen-Agent's string search
    for `"name": "…", "` and `"arguments": …` (a block without `</tool_call>` goes there directly, and is
    kept only if a name was found). A parsed object needs both `name` and `arguments`, whose JSON text the
    tool then reads (toolserver.arguments). Nothing is refused here: what the model wrote reaches the tool,
    whose checks answer in Qwen-Agent's words.
    """
    out = Parsed("qwen-agent")
    if "<think>" in text:
        if "</think>" not in text:
            return out
        text = text.split("</think>")[-1]
    for segment in text.split("<tool_call>")[1:]:
        if not segment.strip():
            continue
        if "</tool_call>" not in segment:
            name, arguments = _qwen_agent_extract(segment)
            if name:
                out.calls.append(ParsedCall(name, arguments))
            continue
        block = segment.split("</tool_call>")[0].strip()
        try:
            call = json5_loads(block)
        except Exception:  # the reference catches everything here and falls back to the string search
            name, arguments = _qwen_agent_extract(block)
            out.calls.append(ParsedCall(name, arguments))
            continue
        if isinstance(call, dict) and "name" in call and "arguments" in call:
            out.calls.append(ParsedCall(str(call["name"]), json.dumps(call["arguments"], ensure_ascii=False)))
    return out


def _qwen_agent_extract(text: str) -> tuple[str, str]:
    """Qwen-Agent's fallback for a tool call it cannot parse: the name between `"name": "` and the next
    `", "`, and everything after `"arguments": ` less its last character (the closing brace)."""
    name, arguments = "", ""
    name_at, args_at = text.find('"name": "'), text.find('"arguments": ')
    if name_at > 0:
        rest = text[name_at + len('"name": "'):]
        end = rest.find('", "')
        if end > -1:
            name = rest[:end]
    if args_at > 0:
        arguments = text[args_at + len('"arguments": '):]
    arguments = arguments.strip()
    return name, arguments[:-1] if len(arguments) > 2 else ""


def parse_deepeyes(text: str) -> Parsed:
    """DeepEyes' VisualToolBoxV5.execute (6c5e796): a non-empty last `<answer>` ends the episode before any call
    is read; so does a text without `<tool_call>…</tool_call>`. The first three blocks are the turn's calls,
    each `json.loads`-ed and indexed as `["name"]`, `["arguments"]`; the first block that fails ends the list
    with Python's words behind `Error: ` (a call before it still runs first, and its own failure would be
    what the model sees, as in the reference's loop)."""
    out = Parsed("deepeyes")
    answers = _ANSWER.findall(text)
    blocks = [block.strip() for block in _HERMES.findall(text)]
    if (answers and answers[-1]) or not blocks:
        out.done = True
        return out
    out.done = False
    for block in blocks[:DEEPEYES_MAX_CALLS]:
        try:
            call = jsonio.loads(block)
            name, arguments = call["name"], call["arguments"]
        except Exception as exc:  # the reference's turn catches everything and shows its text
            out.errors.append(f"Error: {exc}")
            break
        if not isinstance(name, str):
            out.errors.append(f"Error: Unknown tool name: {name}")
            break
        out.calls.append(ParsedCall(name, arguments))
    return out


def parse_pixel_reasoner(text: str) -> Parsed:
    """verl-tool's PixelReasonerTool.parse_action (980962b): the first `<tool_call>` block only, `json.loads`-ed;
    one that does not parse, is not an object or names no known action is no action: the observation is
    empty (''). Then `arguments` must be there and be an object, with the reference's texts. The agent loop
    calls the tool server only when the model stopped at `</tool_call>`, so a text without `<tool_call>`
    ends the episode."""
    out = Parsed("pixel-reasoner")
    if "<tool_call>" not in text:
        out.done = True
        return out
    out.done = False
    try:
        call = jsonio.loads(text.split("<tool_call>")[1].split("</tool_call>")[0])
        name = call.get("name", "")
        known = name in PIXEL_REASONER_ACTIONS
    except Exception:
        known = False
    if not known:
        out.errors.append("")
    elif "arguments" not in call:
        out.errors.append("Missing 'arguments' in the tool call.")
    elif not isinstance(call["arguments"], dict):
        out.errors.append("'arguments' should be a dictionary of parameters key-value pairs, got "
                          f"{type(call['arguments'])}.")
    else:
        out.calls.append(ParsedCall(name, call["arguments"]))
    return out


PARSERS = {"hermes": parse_hermes, "groundlight": parse_groundlight, "mags-rl": parse_mags_rl,
           "mgpo": parse_mgpo, "mini-o3": parse_mini_o3, "qwen-agent": parse_qwen_agent,
           "deepeyes": parse_deepeyes, "pixel-reasoner": parse_pixel_reasoner}


def parse(text: str, fmt: str) -> Parsed:
    try:
        return PARSERS[fmt](text)
    except Exception as exc:  # a parser bug must reach the model as text, never as a 500
        return Parsed(fmt, errors=[f"Error: could not read the tool call: {exc}"])
