"""NeMo Gym's rewards for its image tools (profile `nemo-gym`), NVIDIA-NeMo/Gym @ 07d6b0d0: two of them, as its two
agents assign them.

- The image-tools agent (`responses_api_agents/image_tools_agent/app.py`, `_run_image_tools_loop` and `run`, config
  `configs/image_tools_agent.yaml`): the task's own resources server scores the final answer (`base`: string_match,
  mcqa, math_with_judge or gui_coordinate, none of them image-tool code: the caller passes its reward as
  `extra.base_reward`, 0.0 if absent), and the tools add `tools`, each call's reward (+0.02 a run, −0.02 a repeat,
  −0.05 a failure or malformed call: toolserver's `meta.reward` of each result) summed in order, clipped to the cap
  (0.20) after every call that returned images. Total: base + tools.
- PivotRL (`resources_servers/image_tools/app.py`, `ImageToolsPivotResourcesServer.verify`, config
  `configs/image_tools_pivot.yaml`), chosen by `extra.verifier = "image_tools_pivot"`: the rollout's single turn
  (`response`, else the last turn) against the demonstrated action (`ground_truth`: `{"name", "arguments"}`, or the
  row's `expected_answer` string holding it as JSON; `extra.metadata.expected_action` is read after the first).
  Level 0 the tool (zoom and crop one decision), level 1 the image(s), level 2 the argument: a box's IoU, a point's
  closeness on the 0–1000 scale, a color's channel closeness, a rotation modulo 360, a flip axis, an overlay's
  alpha. Binary at 0.5 (the shipped config); more than one call in the turn scores 0. `extra.settings` overrides
  the shipped config's fields (`reward_mode`, `argument_threshold`, `enable_target_match`, `numeric_tolerance`,
  `penalize_extra_tool_calls`, `unify_region_inspect_tools`). The verifier's fields (failure reason, argument
  score and detail, tool family...) are in `details`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from toolserver.formats.nemo_gym import parse_calls
from toolserver.profiles.nemo_gym_ops import bbox_iou, coerce_bbox
from toolserver.rewards.base import Episode, RewardInputError, RewardResult, RuleReward

CAP = 0.20  # tool_success_reward_cap of configs/image_tools_agent.yaml
PIVOT = "image_tools_pivot"
SHIPPED: Mapping[str, Any] = MappingProxyType({
    "reward_mode": "binary", "enable_target_match": True, "argument_threshold": 0.5, "numeric_tolerance": 1e-6,
    "penalize_extra_tool_calls": True, "unify_region_inspect_tools": True})
FAMILIES = {"image_zoom_in_tool": "bbox", "image_crop_tool": "bbox", "color_at_tool": "point",
            "find_color_tool": "color", "count_objects_tool": "color", "image_diff_tool": "pair",
            "image_overlay_tool": "pair", "image_side_by_side_tool": "multi", "image_rotate_tool": "scalar",
            "image_flip_tool": "scalar"}
REGION_TOOLS = frozenset({"image_zoom_in_tool", "image_crop_tool"})
FREE_TEXT = frozenset({"label", "labels"})  # never compared


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _json_of(value: Any) -> tuple[bool, Any]:
    """A string is read as JSON (False when it is not JSON); any other value is itself."""
    if not isinstance(value, str):
        return True, value
    try:
        return True, json.loads(value)
    except json.JSONDecodeError:
        return False, None


def _ints(values: Any) -> list[int] | None:
    out: list[int] = []
    for value in values:
        number = _int(value)
        if number is None:
            return None
        out.append(number)
    return out


def _point(value: Any) -> list[float] | None:
    ok, value = _json_of(value)
    if not ok or not isinstance(value, list | tuple) or len(value) != 2:
        return None
    x, y = _float(value[0]), _float(value[1])
    return None if x is None or y is None else [x, y]


def _indices(value: Any) -> list[int] | None:
    ok, value = _json_of(value)
    if not ok:
        return None
    if isinstance(value, int):
        return [value]
    if not isinstance(value, list | tuple):
        return None
    return _ints(value)


def _rgb(value: Any) -> list[int] | None:
    ok, value = _json_of(value)
    if not ok or not isinstance(value, list | tuple) or len(value) != 3:
        return None
    return _ints(value)


def _same_target(family: str, got: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Level 1: the same image(s); a side missing or unreadable cannot disprove it."""
    if family in ("bbox", "point", "color", "scalar"):
        a, b = _int(got.get("img_idx")), _int(want.get("img_idx"))
        return a is None or b is None or a == b
    if family == "pair":
        for key in ("img_idx_a", "img_idx_b"):
            a, b = _int(got.get(key)), _int(want.get(key))
            if a is not None and b is not None and a != b:
                return False
        return True
    if family == "multi":
        a_list, b_list = _indices(got.get("img_indices")), _indices(want.get("img_indices"))
        return a_list is None or b_list is None or sorted(a_list) == sorted(b_list)
    return True


def _scalar_score(got: Mapping[str, Any], want: Mapping[str, Any], tolerance: float) -> tuple[float, str]:
    for key in ("degrees", "axis"):
        if key not in want:
            continue
        a, b = _float(got.get(key)), _float(want.get(key))
        if a is not None and b is not None:
            if key == "degrees":
                delta = abs((a - b) % 360.0)
                return (1.0 if min(delta, 360.0 - delta) <= tolerance else 0.0), key
            return (1.0 if abs(a - b) <= tolerance else 0.0), key
        same = str(got.get(key)).strip().lower() == str(want.get(key)).strip().lower()
        return (1.0 if same else 0.0), key
    return 1.0, "scalar_no_key"


def _argument_score(family: str, got: Mapping[str, Any], want: Mapping[str, Any],
                    tolerance: float) -> tuple[float, str]:
    """Level 2: the primary argument's score in [0, 1] and how it was scored."""
    if family == "bbox":
        a, b = coerce_bbox(got.get("bbox_2d")), coerce_bbox(want.get("bbox_2d"))
        if b is None:
            return 1.0, "expected_bbox_unparseable"
        if a is None:
            return 0.0, "rollout_bbox_unparseable"
        return (1.0, "exact_bbox") if a == b else (bbox_iou(a, b), "iou")
    if family == "point":
        p, q = _point(got.get("point_2d")), _point(want.get("point_2d"))
        if q is None:
            return 1.0, "expected_point_unparseable"
        if p is None:
            return 0.0, "rollout_point_unparseable"
        distance = ((p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2) ** 0.5
        return max(0.0, 1.0 - distance / 1000.0), "point_distance"
    if family == "color":
        c, d = _rgb(got.get("color")), _rgb(want.get("color"))
        if c is None or d is None:
            return (1.0, "color_absent") if got.get("color") == want.get("color") else (0.0, "color_mismatch")
        return max(0.0, 1.0 - sum(abs(x - y) for x, y in zip(c, d, strict=True)) / (3 * 255.0)), "color_distance"
    if family == "scalar":
        return _scalar_score(got, want, tolerance)
    if family in ("pair", "multi"):
        a_alpha, b_alpha = _float(got.get("alpha")), _float(want.get("alpha"))
        if a_alpha is not None and b_alpha is not None:
            return (1.0 if abs(a_alpha - b_alpha) <= tolerance else 0.0), "alpha"
        return 1.0, "index_only"
    return 1.0, "unknown_family"


def expected_action(ground_truth: Any, metadata: Any) -> dict[str, Any] | None:
    """The demonstrated action: the row's `expected_action`, its metadata's, then its `expected_answer` as JSON."""
    candidates: list[Any] = []
    answer = None
    if isinstance(ground_truth, str):
        answer = ground_truth
    elif ground_truth:
        candidates.append(ground_truth)
    if metadata:
        candidates.append(metadata.get("expected_action"))
    if answer:
        ok, parsed = _json_of(answer)
        if ok:
            candidates.append(parsed)
    for candidate in candidates:
        if isinstance(candidate, dict) and candidate.get("name"):
            arguments = candidate.get("arguments")
            if isinstance(arguments, str):
                ok, arguments = _json_of(arguments)
                arguments = arguments if ok else {}
            return {"name": str(candidate["name"]), "arguments": arguments if isinstance(arguments, dict) else {}}
    return None


def _verify(text: str, expected: dict[str, Any] | None, settings: Mapping[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = {"reward": 0.0, "tool_name_match": False, "rollout_tool_name": None,
                             "expected_tool_name": None, "target_match": None, "argument_score": None,
                             "argument_detail": None, "tool_family": None, "num_rollout_tool_calls": 0,
                             "failure_reason": "none"}
    if expected is None:
        return {**state, "failure_reason": "expected_action_invalid"}
    calls = parse_calls(text)
    state["num_rollout_tool_calls"] = len(calls)
    if not calls:
        return {**state, "failure_reason": "no_tool_call_in_rollout"}
    try:
        _judge_first_call(state, calls, expected, settings)
    except Exception:  # the reference answers any error inside its check with 0 (its `unknown_error`)
        state["reward"], state["failure_reason"] = 0.0, "unknown_error"
    return state


def _judge_first_call(state: dict[str, Any], calls: list[tuple[str, Any, str]], expected: dict[str, Any],
                      settings: Mapping[str, Any]) -> None:
    name, arguments, _ = calls[0]
    got = {k: v for k, v in (arguments or {}).items() if k not in FREE_TEXT}
    want = {k: v for k, v in expected["arguments"].items() if k not in FREE_TEXT}
    state["rollout_tool_name"], state["expected_tool_name"] = str(name), expected["name"]
    family = state["tool_family"] = FAMILIES.get(expected["name"], "unknown")

    def canonical(tool: str) -> str:
        tool = tool.strip()
        return "<region>" if settings["unify_region_inspect_tools"] and tool in REGION_TOOLS else tool

    state["tool_name_match"] = canonical(str(name)) == canonical(expected["name"])
    if not state["tool_name_match"]:
        state["failure_reason"] = "tool_name_mismatch"
        return
    if settings["enable_target_match"]:
        state["target_match"] = _same_target(family, got, want)
        if not state["target_match"]:
            state["failure_reason"] = "target_mismatch"
            return
    score, detail = _argument_score(family, got, want, settings["numeric_tolerance"])
    state["argument_score"], state["argument_detail"] = score, detail
    below = score < settings["argument_threshold"]
    state["reward"] = (0.0 if below else 1.0) if settings["reward_mode"] == "binary" else score
    if below:
        state["failure_reason"] = "argument_below_threshold"
    if settings["penalize_extra_tool_calls"] and len(calls) > 1:
        state["reward"] = 0.0


def tools_reward(episode: Episode) -> float:
    """The agent's tool reward: each call's, in order, clipped to the cap after a call that returned images."""
    total = 0.0
    for step in episode.calls:
        total += float(step.meta.get("reward", 0.0))
        if step.images:
            total = min(total, CAP)
    return total


class NemoGymReward(RuleReward):
    profile = "nemo-gym"
    source = ("NVIDIA-NeMo/Gym/responses_api_agents/image_tools_agent/app.py@07d6b0d0:ImageToolsAgent.run, "
              "resources_servers/image_tools/app.py@07d6b0d0:ImageToolsPivotResourcesServer.verify")
    terms = ("base", "tools", "pivot")
    weights = MappingProxyType({"base": 1.0, "tools": 1.0})
    description = ("the image-tools agent's base + tool rewards (+0.02/−0.02/−0.05 a call, capped at 0.20); with "
                   "extra.verifier=image_tools_pivot, PivotRL's action match (IoU >= 0.5 for boxes)")

    def rule(self, episode: Episode) -> RewardResult:
        if episode.extra.get("verifier") == PIVOT:
            return self._pivot(episode)
        base = _float(episode.extra.get("base_reward", 0.0))
        if base is None:
            raise RewardInputError("extra.base_reward must be a number: the task's resources server's reward")
        tools = tools_reward(episode)
        return RewardResult(total=base + tools, terms={"base": base, "tools": tools}, weights=dict(self.weights))

    def _pivot(self, episode: Episode) -> RewardResult:
        settings = {**SHIPPED, **dict(episode.extra.get("settings") or {})}
        unknown = set(settings) - set(SHIPPED)
        if unknown:
            raise RewardInputError(f"unknown PivotRL settings: {sorted(unknown)}; known: {sorted(SHIPPED)}")
        metadata = episode.extra.get("metadata")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise RewardInputError("extra.metadata must be an object (the row's metadata)")
        expected = expected_action(episode.ground_truth, metadata)
        state = _verify(episode.final_turn, expected, settings)
        return RewardResult(total=state["reward"], terms={"pivot": state["reward"]}, weights={"pivot": 1.0},
                            violation=None if state["failure_reason"] == "none" else state["failure_reason"],
                            details=state)


REWARDS = (NemoGymReward(),)
