"""NeMo Gym's image-tool turn (NVIDIA-NeMo/Gym @ 07d6b0d0): calls as `resources_servers/image_tools/base.py` reads
them (`parse_image_tool_calls`, `has_malformed_image_tool_markup`), the turn as `ImageToolsGymToolLogic.
process_nonterminal_turn` runs it under the image-tools agent's config (`responses_api_agents/image_tools_agent/
configs/image_tools_agent.yaml`), and the observation as the agent's `_tool_user_message` builds it.

- Calls: Qwen3-Coder XML blocks (`<tool_call><function=NAME><parameter=P>VALUE</parameter>…</function>
  </tool_call>`, each value read as JSON, else kept as text), then JSON blocks (`<tool_call>{"name"|"tool_name":
  …, "arguments": …}</tool_call>`, those that are not JSON skipped), in that order.
- Markup that is not exactly its clean calls (a `<tool_call>` or `</function>` more than the calls parsed, a
  `<think>` or `</think>` anywhere beside one) is `Invalid image tool call format.`, and no call runs.
- No call: the answer; the episode ends. One call a turn runs (`max_tool_calls_per_turn: 1`); with more, the
  observation adds `Only the first 1 tool call(s) were executed this turn. Call tools one turn at a time.`
- A failed call ends the episode (`terminate_on_invalid_tool_call: true`): the agent stops there and the model
  never reads the text, which the observation still carries as the environment builds it.
- The observation is one user message: `<tool_response>\\n`, the result's JSON and `\\n`, its image, `\\n`,
  [the note], `</tool_response>`, each its own part; a failure is the string `<tool_response>\\n<text>\\n
  </tool_response>`; the forced final turn is its prompt alone. (The agent writes Responses `input_text` and
  `input_image` parts; here they are chat `text` and `image_url` parts, in the same order with the same texts.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, cast

from toolserver.formats.base import CallFormat, Parsed, ParsedCall, TurnRule
from toolserver.messages import image_part
from toolserver.models import ToolResult

XML_CALL = re.compile(r"<tool_call>\s*<function=([^>\s]+)>\s*(.*?)\s*</function>\s*</tool_call>", re.DOTALL)
JSON_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
XML_PARAMETER = re.compile(r"<parameter=([^>\s]+)>\s*(.*?)\s*</parameter>", re.DOTALL)
MARKERS = ("<tool_call>", "</tool_call>", "<function=", "</function>")
MALFORMED = "Invalid image tool call format."
ONE_AT_A_TIME = "Only the first 1 tool call(s) were executed this turn. Call tools one turn at a time.\n"
INVALID_REWARD = -0.05  # the agent config's invalid_tool_call_penalty (metadata: the reward is the caller's)


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_calls(text: str) -> list[tuple[str, Any, str]]:
    """Every call in `text` as (name, arguments, "xml" | "json"): the XML ones first."""
    calls: list[tuple[str, Any, str]] = []
    for match in XML_CALL.finditer(text):
        arguments = {m.group(1).strip(): _value(m.group(2).strip()) for m in XML_PARAMETER.finditer(match.group(2))}
        calls.append((match.group(1).strip(), arguments, "xml"))
    for match in JSON_CALL.finditer(text):
        try:
            payload = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        name = payload.get("name") or payload.get("tool_name")
        if name:
            calls.append((name, payload.get("arguments") or {}, "json"))
    return calls


def is_malformed(text: str, calls: Sequence[tuple[str, Any, str]]) -> bool:
    """Call markup that is not exactly the clean calls parsed from it."""
    if not any(marker in text for marker in MARKERS):
        return False
    xml = sum(1 for call in calls if call[2] == "xml")
    return (not calls or text.count("<tool_call>") != len(calls) or text.count("</tool_call>") != len(calls)
            or text.count("<function=") != xml or text.count("</function>") != xml
            or "</think>" in text or "<think>" in text)


class NemoGymFormat(CallFormat):
    name = "nemo-gym"
    description = ("NeMo Gym's image tools: Qwen3-Coder XML or JSON <tool_call> blocks, one call a turn, no call "
                   "ends the episode and so does a failed call; the result's JSON and image in <tool_response>.")
    turn = TurnRule(errors_last=True, max_calls=1)

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name, done=False)
        calls = parse_calls(text)
        if is_malformed(text, calls):
            out.errors.append(MALFORMED)
            out.done = True
        elif not calls:
            out.done = True
        else:
            name, arguments, _ = calls[0]
            # Arguments that are not an object reach the tool as they are (a text inside a list, so that it is
            # not read as JSON again), for the environment's own refusal.
            kept = arguments if isinstance(arguments, dict) or not isinstance(arguments, str) else [arguments]
            out.calls.append(ParsedCall(str(name), cast(Any, kept)))
            if len(calls) > 1:
                out.notices.append(ONE_AT_A_TIME)
        return out

    def finish(self, results: list[ToolResult]) -> list[ToolResult]:
        """The extra-calls note goes inside the result that ran (a forced final turn shows its prompt alone);
        every failure carries the environment's penalty in its metadata."""
        kept: list[ToolResult] = []
        for result in results:
            if result.tool == "parser" and result.text == ONE_AT_A_TIME:
                if kept and kept[-1].ok and kept[-1].images:
                    kept[-1] = kept[-1].model_copy(update={"meta": {**kept[-1].meta, "note": ONE_AT_A_TIME}})
                continue
            if not result.ok and "reward" not in result.meta:
                result = result.model_copy(update={"meta": {**result.meta, "reward": INVALID_REWARD}})
            kept.append(result)
        return kept

    def ends(self, parsed: Parsed, results: Sequence[ToolResult]) -> bool:
        return bool(parsed.done) or any(not result.ok for result in results)

    def observation(self, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        for result in results:
            if not result.ok:
                messages.append({"role": "user", "content": f"<tool_response>\n{result.text}\n</tool_response>"})
            elif not result.images:  # the forced final turn's prompt
                messages.append({"role": "user", "content": result.text})
            else:
                content: list[dict[str, Any]] = [{"type": "text", "text": "<tool_response>\n"},
                                                 {"type": "text", "text": result.text + "\n"}]
                for image in result.images:
                    content += [image_part(image), {"type": "text", "text": "\n"}]
                if result.meta.get("note"):
                    content.append({"type": "text", "text": result.meta["note"]})
                content.append({"type": "text", "text": "</tool_response>"})
                messages.append({"role": "user", "content": content})
        return messages


NEMO_GYM = NemoGymFormat()


INTRO = ("You are an expert visual question answering assistant. Answer the user's question using the supplied image "
         "evidence.\n\nUse an image tool when it can provide useful evidence that is difficult to obtain from the "
         "current images. Before a call, briefly identify the evidence you need. After a result, inspect it and either "
         "make another useful call or answer the question. Do not make redundant calls, invent tools or parameters, or "
         "give the final answer in the same turn as a tool call.\n\nImages are numbered by img_idx starting at 0. "
         "Images returned by tools receive the next available indices and may be used by later calls. Bounding boxes "
         "and points use normalized integer coordinates from 0 to 1000 unless a tool says otherwise.\n\n# Tools\n\n")
CALL_SHAPE = "<tool_call>\n<function=FUNCTION_NAME>\n{}</function>\n</tool_call>"
OUTRO = ("\n\nUse exactly the function names and parameter schemas listed above. Do not invent functions or "
         "parameters.\n\n# Tool-call format\n\nSerialize a tool call using this Qwen3-Coder-style XML structure:\n\n"
         + CALL_SHAPE.format("<parameter=PARAMETER_NAME>\nPARAMETER_VALUE\n</parameter>\n")
         + "\n\nReplace the uppercase placeholders with a listed function, one of its parameters, and the desired "
         "value. Repeat the complete <parameter> block for each argument. Write arrays and numeric values in JSON "
         "notation; write string values as plain text. For a function with no parameters, omit all <parameter> "
         "blocks:\n\n" + CALL_SHAPE.format("") + "\n\nThe tool call must be the final content of that assistant "
         "turn. Tool results may contain structured data and new images. Inspect the result before continuing. Base "
         "the final answer on the resulting visual evidence, and do not mention tool use unless the user asks about "
         "it.")


def render_system_prompt(tools: Sequence[dict[str, Any]]) -> str:
    """The task's system prompt around `tools` (OpenAI function entries) written as its `<tools>` list."""
    lines = ["<tools>"]
    for entry in tools:
        function = entry["function"]
        lines += ["<function>", f"<name>{function['name']}</name>", f"<description>{function['description']}"
                  "</description>", "<parameters>"]
        for name, spec in function["parameters"]["properties"].items():
            lines += ["<parameter>", f"<name>{name}</name>", f"<type>{spec['type']}</type>",
                      f"<description>{spec['description']}</description>", "</parameter>"]
        lines += [f"<required>{json.dumps(function['parameters']['required'])}</required>", "</parameters>",
                  "</function>"]
    return INTRO + "\n".join([*lines, "</tools>"]) + OUTRO
