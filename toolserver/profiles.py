"""The registry: profiles, each a named set of tool instances with the conventions of one system.

`default` is the canonical toolset; the seed profiles reproduce each paper's tool environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolserver.errors import BadRequest
from toolserver.geometry import Coords
from toolserver.models import ViewSettings
from toolserver.schema import function_tool
from toolserver.tools.arm_thinker import ArmZoom, ArmZoomQwen3
from toolserver.tools.base import Tool
from toolserver.tools.deepeyes import DeepEyesRotate, DeepEyesZoom
from toolserver.tools.doc_pages import DocPageByIndex, DocPageSearch
from toolserver.tools.groundlight import GroundlightZoom
from toolserver.tools.imagent import ImagentLookback, ImagentZoomIn
from toolserver.tools.keypoint_zoom import KeypointZoom
from toolserver.tools.lookback import LookbackReuse
from toolserver.tools.magnify import Magnify
from toolserver.tools.mags_rl import MagsZoom
from toolserver.tools.mgpo import MgpoGrounding
from toolserver.tools.pixel_reasoner import PixelCrop, PixelSelectFrames
from toolserver.tools.qwen3vl import Qwen3Zoom
from toolserver.tools.rotate import Rotate
from toolserver.tools.select_frames import SelectFrames
from toolserver.tools.super_resolution import SuperResolution
from toolserver.tools.validators import validators
from toolserver.tools.zoom_in import COORD_PHRASES, ZoomIn

# ARM-Thinker's NOT_ALLOWED_TOOL_CALL_MESSAGE, sent once the turn budget is spent (seed_impls.md §1.5).
ARM_LIMIT_MESSAGE = (
    "\n\n**Important Requirement:**\nYou have reached the maximum number of tool calls and are not allowed to "
    "call any more tools. Please reason on the current situation and **must** give your final answer or judgment "
    "within `<answer>...</answer>`."
)
DEFAULT_LIMIT_MESSAGE = (
    "Error: this session has reached its limit of {limit} tool calls; no more tools can be called. "
    "Give your final answer now."
)


@dataclass
class Profile:
    name: str
    description: str
    tools: dict[str, Tool]
    coords: Coords = Coords.REL1000
    view: ViewSettings = field(default_factory=ViewSettings)
    max_tool_calls: int | None = None
    limit_message: str = DEFAULT_LIMIT_MESSAGE
    call_format: str = "hermes"  # how `/act` reads this system's raw model output (toolserver.parsers)
    alpha: str = "white"  # transparency at intake (toolserver.imaging.to_rgb): as the system's reference does
    arguments: str = "strict"  # how tool-call arguments are read and checked (toolserver.arguments)
    unknown_tool_template: str = "Error: unknown tool {name!r}. Available tools: {tools}."
    # Other names a system's server answers to (callable, not listed): alias -> listed tool name.
    aliases: dict[str, str] = field(default_factory=dict)

    def unknown_tool_text(self, name: str) -> str:
        return self.unknown_tool_template.format(name=name, tools=", ".join(self.tools))

    def tool(self, name: str) -> Tool | None:
        return self.tools.get(name) or self.tools.get(self.aliases.get(name, ""))

    def openai_tools(self, *, strict: bool = False, coords: Coords | None = None,
                     subs: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """The OpenAI function entries; `subs` fills placeholders that depend on the server (installed models)."""
        phrases = {"{coords}": COORD_PHRASES[coords or self.coords], "{sr_scales}": "", "{sr_scales_fallback}": ""}
        phrases.update(subs or {})
        out = []
        for name, tool in self.tools.items():
            entry = function_tool(name, tool.description, tool.Args, strict=strict)
            out.append(_substitute(entry, phrases))
        return out


def _substitute(node: Any, subs: dict[str, str]) -> Any:
    if isinstance(node, str):
        replaced = node
        for old, new in subs.items():
            replaced = replaced.replace(old, new)
        # A placeholder filled with "" may leave a trailing space behind.
        return replaced.rstrip() if replaced != node else node
    if isinstance(node, dict):
        return {k: _substitute(v, subs) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, subs) for v in node]
    return node


def _tools(*tools: Tool) -> dict[str, Tool]:
    return {tool.name: tool for tool in tools}


def _build_profiles() -> dict[str, Profile]:
    profiles = [
        Profile("default", "Canonical toolset: zoom_in, keypoint_zoom, lookback_reuse, rotate, select_frames, "
                "super_resolution, magnify, document page retrieval and the 19 instruction-following validators, "
                "any coordinate convention.",
                _tools(ZoomIn(), KeypointZoom(), LookbackReuse(), Rotate(), SelectFrames(), SuperResolution(),
                       Magnify(), DocPageSearch(), DocPageByIndex(), *validators(strict=True))),
        Profile("arm-thinker", "ARM-Thinker: image_zoom_in_tool by image key on the fetch_image view (rel 0-1000), "
                "document page retrieval and the instruction-following validators.",
                _tools(ArmZoom(), DocPageSearch(arm_literal=True), DocPageByIndex(arm_literal=True),
                       *validators(strict=False, arm_errors=True)), limit_message=ARM_LIMIT_MESSAGE),
        Profile("arm-thinker-qwen3vl", "ARM-Thinker's Qwen3-VL variant: image_zoom_in_tool with img_idx and label.",
                _tools(ArmZoomQwen3(), *validators(strict=False, arm_errors=True)), limit_message=ARM_LIMIT_MESSAGE),
        Profile("qwen3-vl", "Qwen-Agent's official Qwen3-VL image_zoom_in_tool (bbox_2d, label, img_idx).",
                _tools(Qwen3Zoom()), call_format="qwen-agent", arguments="qwen-agent",
                unknown_tool_template="Tool {name} does not exists."),
        Profile("groundlight", "Groundlight r1_vlm: zoom on a keypoint, <tool> key-value calls, images <= 1024 px.",
                _tools(GroundlightZoom()), coords=Coords.ABS_VIEW,
                view=ViewSettings(factor=None, max_long_side=1024), call_format="groundlight"),
        Profile("mgpo", "MGPO: one grounding crop from a fenced-JSON bbox_2d in model-input pixels.",
                _tools(MgpoGrounding()), coords=Coords.ABS_VIEW,
                view=ViewSettings(prescale_max_pixels=1003520, prescale_min_pixels=200704),
                max_tool_calls=1, call_format="mgpo", alpha="drop"),
        Profile("imagent", "IMAgent: zoom_in and lookback_reuse by image index, at most 5 calls.",
                _tools(ImagentZoomIn(), ImagentLookback()), max_tool_calls=5),
        Profile("deepeyes", "DeepEyes (VisualToolBoxV5): image_zoom_in_tool in original pixels and image_rotate_tool "
                "on the first input image; at most 3 calls a turn, one error voids the turn, an answer ends it.",
                _tools(DeepEyesZoom(), DeepEyesRotate()), coords=Coords.ABS_ORIGINAL, call_format="deepeyes",
                alpha="drop", arguments="python", unknown_tool_template="Error: Unknown tool name: {name}"),
        Profile("pixel-reasoner", "Pixel-Reasoner (verl-tool): crop_image (alias zoom_in, crop_image_normalized) and "
                "select_frames over every image so far, numbered from 1; results as JPEG at quality 75.",
                _tools(PixelCrop(), PixelSelectFrames()), coords=Coords.ABS_VIEW, call_format="pixel-reasoner",
                arguments="python", unknown_tool_template="Unknown action name.",
                aliases={"zoom_in": "crop_image", "crop_image_normalized": "crop_image"}),
        Profile("mags-rl", "Mags-RL: <zoom>[[x1,y1,x2,y2],...]</zoom> magnifying glass, boxes under 40% of the image.",
                _tools(MagsZoom()), coords=Coords.ABS_VIEW, max_tool_calls=1, call_format="mags-rl"),
    ]
    return {p.name: p for p in profiles}


PROFILES: dict[str, Profile] = _build_profiles()


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise BadRequest(f"unknown profile {name!r}; profiles: {', '.join(PROFILES)}",
                         code="unknown_profile") from None
