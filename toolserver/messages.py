"""Tool results rendered as OpenAI chat messages.

`image_message="tool"`: each `role:"tool"` message carries its images as `image_url` parts, images
first then text, the order the seed systems' chat templates (ARM-Thinker, verl) use.
`image_message="user"`: OpenAI's own schema allows only text in tool messages, so tool messages are
text-only and one `role:"user"` message follows with every image, each introduced by a text part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolserver.models import ResultImage, ToolResult

IMAGE_TOKEN = "<image>"
# DeepEyes' PROMPT.TURN_PROMPT_V5 (6c5e796), appended after a turn's tool responses. The reference builds the
# tool-call text too but does not put it in: this prompt has no placeholder (the one that had is commented out).
DEEPEYES_TURN_PROMPT = (
    "\nThink in the mind first, and then decide whether to call tools one or more times OR provide final answer. "
    "Format strictly as: <think>...</think> <tool_call>...</tool_call> <tool_call>...</tool_call> (if any tools "
    "needed) OR <answer>...</answer> (if no tools needed)."
)
DEEPEYES_TOOL_RESPONSE = "<tool_response>\n" + IMAGE_TOKEN + "\n</tool_response>\n"
QWEN_USER_TURN = ("<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")


@dataclass(frozen=True)
class TurnRule:
    """How a system runs the calls of one model turn, where it differs from running each call in order."""

    stop_at_failure: bool = False  # a failed call ends the turn; the calls after it do not run
    errors_last: bool = False  # a broken call is reached only after the calls before it ran (and succeeded)


TURNS = {"deepeyes": TurnRule(stop_at_failure=True, errors_last=True)}


def image_url(image: ResultImage) -> str:
    if image.data is not None:
        return f"data:{image.mime};base64,{image.data}"
    if image.url is not None:
        return image.url
    if image.path is not None:
        return "file://" + image.path
    raise ValueError(f"image {image.key} has no data, url or path")  # pragma: no cover


def image_part(image: ResultImage) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": image_url(image)}}


def tool_messages(call_ids: Sequence[str], results: Sequence[ToolResult],
                  image_message: str = "tool") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    follow_up: list[dict[str, Any]] = []
    for call_id, result in zip(call_ids, results, strict=True):
        if image_message == "tool" and result.images:
            content: Any = [image_part(img) for img in result.images]
            content.append({"type": "text", "text": result.text})
        else:
            content = result.text
            for img in result.images:
                follow_up.append({"type": "text", "text": f"Image `{img.key}` from tool call {call_id}:"})
                follow_up.append(image_part(img))
        messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
    if follow_up:
        messages.append({"role": "user", "content": follow_up})
    return messages


def observation_messages(fmt: str, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
    """Tool results rendered the way each system feeds them back to the model.

    hermes (ARM-Thinker, IMAgent): a `tool` message per call, images first then text.
    qwen-agent (Qwen3-VL): a `tool` message per call with what the tool returned (its image alone on success).
    groundlight: a `user` message; an image is introduced by `<image_name> tool_result_N </image_name>`,
    a text result (tool errors included) is wrapped as `<result>\n…\n</result>`; the environment's own
    reply to a text with neither a tool call nor an answer is sent bare, as its `env_response` does.
    mgpo, mags-rl, mini-o3: one `user` message with the text, then the images.
    deepeyes: one `user` message per turn: `<tool_response>` around each image, then the turn prompt; when a
    call of the turn failed, only its `Error: …` text (the images of the calls before it are not shown).
    pixel-reasoner: a `user` message with the tool server's text, each `<image>` in it replaced by the image.
    """
    if fmt in ("deepeyes", "pixel-reasoner"):
        return _raw_text_messages(fmt, results)
    messages: list[dict[str, Any]] = []
    for result in results:
        images = [image_part(img) for img in result.images]
        if fmt == "hermes":
            content: Any = [*images, {"type": "text", "text": result.text}] if images else result.text
            messages.append({"role": "tool", "content": content})
        elif fmt == "qwen-agent":  # a function message holding what the tool returned: its image, or its text
            texts = [{"type": "text", "text": result.text}] if result.text else []
            messages.append({"role": "tool", "content": [*images, *texts] if images else result.text})
        elif fmt == "groundlight":
            if result.ok and images:
                messages.append({"role": "user", "content": [{"type": "text", "text": result.text}, *images]})
            elif result.error is not None and result.error.code == "no_tool_call":  # the env's own reply, bare
                messages.append({"role": "user", "content": result.text})
            else:
                messages.append({"role": "user", "content": f"<result>\n{result.text}\n</result>"})
        else:
            content = [{"type": "text", "text": result.text}, *images] if images else result.text
            messages.append({"role": "user", "content": content})
    return messages


def _raw_text(fmt: str, results: Sequence[ToolResult]) -> str | None:
    """The observation text of a raw-text system, `<image>` marking each image; None when there is none.

    DeepEyes: one failure is all the turn shows; else a tool response per image, then its turn prompt.
    Pixel-Reasoner: the tool server's text for the one call."""
    if not results:
        return None
    if fmt == "pixel-reasoner" or not results[-1].ok:
        return results[-1].text
    return DEEPEYES_TOOL_RESPONSE * sum(len(r.images) for r in results) + DEEPEYES_TURN_PROMPT


def observation_prompt(fmt: str, results: Sequence[ToolResult]) -> str | None:
    """The observation as raw text, for the systems that append text to the token stream (else None).

    DeepEyes appends its user turn in Qwen's chat markup (empty when the episode ended); Pixel-Reasoner's tool
    server answers with the text alone (verl-tool's agent loop wraps it in the chat template it is set up with).
    """
    if fmt not in ("deepeyes", "pixel-reasoner"):
        return None
    text = _raw_text(fmt, results)
    if text is None:
        return ""
    return QWEN_USER_TURN[0] + text + QWEN_USER_TURN[1] if fmt == "deepeyes" else text


def _raw_text_messages(fmt: str, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
    text = _raw_text(fmt, results)
    if text is None:
        return []
    images = [image_part(img) for r in results for img in r.images]
    pieces = text.split(IMAGE_TOKEN)
    if not images or len(pieces) - 1 != len(images):  # nothing to fill in (an error text): the text as it is
        return [{"role": "user", "content": text}]
    content: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        if piece:
            content.append({"type": "text", "text": piece})
        if i < len(images):
            content.append(images[i])
    return [{"role": "user", "content": content}]
