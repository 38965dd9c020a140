"""Records tests/data/rewards/nemo_gym.json by running NeMo Gym's own PivotRL verifier for the image tools
(NVIDIA-NeMo/Gym @ 07d6b0d0, `resources_servers/image_tools/app.py`, `ImageToolsPivotResourcesServer.verify`, with
the parser and box helpers of `resources_servers/image_tools/base.py`) under its shipped config
(`resources_servers/image_tools/configs/image_tools_pivot.yaml`: binary, threshold 0.5, target match on, extra
calls penalized, zoom and crop one decision) over crafted rollouts, plus a `continuous` and a strict-name run.

Stand-ins, and only these: `nemo_gym.base_resources_server` (the server's base classes; the verifier reads only
`config` and the request's fields, so they are plain pydantic models here), and the Responses API payload of a
rollout (an object with `output[].content[].text`, what `extract_assistant_text` reads).

The image-tools agent's own reward (its `image_tools_aux_reward`, from running `_run_image_tools_loop` with the
tools) was recorded per session in tests/data/nemo_gym_golden.json by scripts/goldens/record_nemo_gym.py; its
sessions are copied here as episodes: one call per turn that ran or failed one (its reward, the images its
observation carried), the session's `aux_reward` as the total (the task's base reward 0).

    git -C <gym> archive 07d6b0d0 resources_servers/image_tools | tar -x -C <dir>
    <toolserver venv python> scripts/goldens/record_rewards_nemo_gym.py <dir> tests/data/nemo_gym_golden.json \
        tests/data/rewards/nemo_gym.json
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import types
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

APP = "resources_servers/image_tools/app.py"
CONFIG = "resources_servers/image_tools/configs/image_tools_pivot.yaml"


def _stand_ins() -> None:
    class BaseResourcesServerConfig(BaseModel):
        model_config = ConfigDict(extra="allow")

    class BaseRunRequest(BaseModel):
        model_config = ConfigDict(extra="allow")
        responses_create_params: Any = None

    class BaseVerifyRequest(BaseRunRequest):
        response: Any = None

    class BaseVerifyResponse(BaseVerifyRequest):
        reward: float

    class SimpleResourcesServer(BaseModel):
        model_config = ConfigDict(extra="allow")
        config: Any = None

    module = types.ModuleType("nemo_gym.base_resources_server")
    for cls in (BaseResourcesServerConfig, BaseRunRequest, BaseVerifyRequest, BaseVerifyResponse,
                SimpleResourcesServer):
        setattr(module, cls.__name__, cls)
    sys.modules["nemo_gym"] = types.ModuleType("nemo_gym")
    sys.modules["nemo_gym.base_resources_server"] = module


def call(name: str, **args: Any) -> str:
    params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
                     for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


ZOOM = {"name": "image_zoom_in_tool", "arguments": {"img_idx": 0, "bbox_2d": [100, 100, 500, 500], "label": "cat"}}
# (name, rollout text, expected action field(s) of the row)
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("bbox_exact", call("image_zoom_in_tool", img_idx=0, bbox_2d=[100, 100, 500, 500], label="x"),
     {"expected_action": ZOOM}),
    ("bbox_iou_above", call("image_zoom_in_tool", img_idx=0, bbox_2d=[150, 100, 500, 500]),
     {"expected_action": ZOOM}),
    ("bbox_iou_at_half", call("image_zoom_in_tool", img_idx=0, bbox_2d=[100, 100, 300, 500]),
     {"expected_action": ZOOM}),
    ("bbox_iou_below", call("image_zoom_in_tool", img_idx=0, bbox_2d=[300, 300, 700, 700]),
     {"expected_action": ZOOM}),
    ("bbox_disjoint", call("image_zoom_in_tool", img_idx=0, bbox_2d=[600, 600, 900, 900]),
     {"expected_action": ZOOM}),
    ("bbox_inverted_corners", call("image_zoom_in_tool", img_idx=0, bbox_2d=[500, 500, 100, 100]),
     {"expected_action": ZOOM}),
    ("bbox_as_text", call("image_zoom_in_tool", img_idx=0, bbox_2d="(100, 100), (500, 480)"),
     {"expected_action": ZOOM}),
    ("bbox_unparseable", call("image_zoom_in_tool", img_idx=0, bbox_2d="left half"), {"expected_action": ZOOM}),
    ("bbox_three_numbers", call("image_zoom_in_tool", img_idx=0, bbox_2d=[1, 2, 3]), {"expected_action": ZOOM}),
    ("crop_for_zoom_unified", call("image_crop_tool", img_idx=0, bbox_2d=[100, 100, 500, 500]),
     {"expected_action": ZOOM}),
    ("name_mismatch", call("image_rotate_tool", img_idx=0, degrees=90), {"expected_action": ZOOM}),
    ("image_mismatch", call("image_zoom_in_tool", img_idx=1, bbox_2d=[100, 100, 500, 500]),
     {"expected_action": ZOOM}),
    ("image_missing_in_rollout", call("image_zoom_in_tool", bbox_2d=[100, 100, 500, 500]),
     {"expected_action": ZOOM}),
    ("image_index_word", call("image_zoom_in_tool", img_idx="first", bbox_2d=[100, 100, 500, 500]),
     {"expected_action": ZOOM}),
    ("no_tool_call", "The answer is a cat.", {"expected_action": ZOOM}),
    ("malformed_call", "<tool_call><function=image_zoom_in_tool>", {"expected_action": ZOOM}),
    ("two_calls_first_right", call("image_zoom_in_tool", img_idx=0, bbox_2d=[100, 100, 500, 500])
     + call("image_rotate_tool", img_idx=0, degrees=90), {"expected_action": ZOOM}),
    ("json_call", '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"img_idx": 0, "bbox_2d": '
     '[100, 100, 500, 520]}}</tool_call>', {"expected_action": ZOOM}),
    ("expected_missing", call("image_zoom_in_tool", img_idx=0, bbox_2d=[1, 2, 3, 4]), {}),
    ("expected_in_metadata", call("image_zoom_in_tool", img_idx=0, bbox_2d=[100, 100, 500, 500]),
     {"metadata": {"expected_action": ZOOM}}),
    ("expected_as_answer_json", call("image_zoom_in_tool", img_idx=0, bbox_2d=[100, 100, 500, 500]),
     {"expected_answer": json.dumps({"name": "image_zoom_in_tool", "arguments": json.dumps(ZOOM["arguments"])})}),
    ("expected_answer_not_json", call("image_zoom_in_tool", img_idx=0, bbox_2d=[100, 100, 500, 500]),
     {"expected_answer": "a cat"}),
    ("expected_degenerate_box_exact", call("image_crop_tool", img_idx=0, bbox_2d=[167, 1000, 1000, 1000]),
     {"expected_action": {"name": "image_crop_tool", "arguments": {"img_idx": 0, "bbox_2d": [167, 1000, 1000, 1000]}}}),
    ("expected_box_unparseable", call("image_crop_tool", img_idx=0, bbox_2d=[1, 2, 3, 4]),
     {"expected_action": {"name": "image_crop_tool", "arguments": {"img_idx": 0, "bbox_2d": "nowhere"}}}),
    ("point_near", call("color_at_tool", img_idx=0, point_2d=[300, 400]),
     {"expected_action": {"name": "color_at_tool", "arguments": {"img_idx": 0, "point_2d": [0, 0]}}}),
    ("point_far", call("color_at_tool", img_idx=0, point_2d=[900, 900]),
     {"expected_action": {"name": "color_at_tool", "arguments": {"img_idx": 0, "point_2d": [0, 0]}}}),
    ("point_unparseable", call("color_at_tool", img_idx=0, point_2d="top"),
     {"expected_action": {"name": "color_at_tool", "arguments": {"img_idx": 0, "point_2d": [0, 0]}}}),
    ("color_close", call("find_color_tool", img_idx=0, color=[250, 10, 10]),
     {"expected_action": {"name": "find_color_tool", "arguments": {"img_idx": 0, "color": [255, 0, 0]}}}),
    ("color_named_equal", call("count_objects_tool", img_idx=0, color="red"),
     {"expected_action": {"name": "count_objects_tool", "arguments": {"img_idx": 0, "color": "red"}}}),
    ("color_named_differ", call("count_objects_tool", img_idx=0, color="blue"),
     {"expected_action": {"name": "count_objects_tool", "arguments": {"img_idx": 0, "color": "red"}}}),
    ("color_versus_locate", call("find_color_tool", img_idx=0, color=[255, 0, 0]),
     {"expected_action": {"name": "count_objects_tool", "arguments": {"img_idx": 0, "color": [255, 0, 0]}}}),
    ("rotate_modular", call("image_rotate_tool", img_idx=0, degrees=-10),
     {"expected_action": {"name": "image_rotate_tool", "arguments": {"img_idx": 0, "degrees": 350}}}),
    ("rotate_differ", call("image_rotate_tool", img_idx=0, degrees=90),
     {"expected_action": {"name": "image_rotate_tool", "arguments": {"img_idx": 0, "degrees": 180}}}),
    ("rotate_word", call("image_rotate_tool", img_idx=0, degrees="ninety"),
     {"expected_action": {"name": "image_rotate_tool", "arguments": {"img_idx": 0, "degrees": 90}}}),
    ("flip_axis_case", call("image_flip_tool", img_idx=0, axis="Horizontal"),
     {"expected_action": {"name": "image_flip_tool", "arguments": {"img_idx": 0, "axis": "horizontal"}}}),
    ("flip_axis_differ", call("image_flip_tool", img_idx=0, axis="vertical"),
     {"expected_action": {"name": "image_flip_tool", "arguments": {"img_idx": 0, "axis": "horizontal"}}}),
    ("scalar_no_key", call("image_flip_tool", img_idx=0, axis="vertical"),
     {"expected_action": {"name": "image_flip_tool", "arguments": {"img_idx": 0}}}),
    ("pair_same", call("image_diff_tool", img_idx_a=0, img_idx_b=1),
     {"expected_action": {"name": "image_diff_tool", "arguments": {"img_idx_a": 0, "img_idx_b": 1}}}),
    ("pair_swapped", call("image_diff_tool", img_idx_a=1, img_idx_b=0),
     {"expected_action": {"name": "image_diff_tool", "arguments": {"img_idx_a": 0, "img_idx_b": 1}}}),
    ("overlay_alpha_differ", call("image_overlay_tool", img_idx_a=0, img_idx_b=1, alpha=0.3),
     {"expected_action": {"name": "image_overlay_tool", "arguments": {"img_idx_a": 0, "img_idx_b": 1, "alpha": 0.5}}}),
    ("overlay_alpha_same", call("image_overlay_tool", img_idx_a=0, img_idx_b=1, alpha="0.5"),
     {"expected_action": {"name": "image_overlay_tool", "arguments": {"img_idx_a": 0, "img_idx_b": 1, "alpha": 0.5}}}),
    ("multi_reordered", call("image_side_by_side_tool", img_indices=[2, 0, 1]),
     {"expected_action": {"name": "image_side_by_side_tool", "arguments": {"img_indices": [0, 1, 2]}}}),
    ("multi_differ", call("image_side_by_side_tool", img_indices=[0, 1]),
     {"expected_action": {"name": "image_side_by_side_tool", "arguments": {"img_indices": [0, 1, 2]}}}),
    ("multi_single_int", call("image_side_by_side_tool", img_indices=1),
     {"expected_action": {"name": "image_side_by_side_tool", "arguments": {"img_indices": [1]}}}),
    ("unknown_tool_family", call("mystery_tool", img_idx=0),
     {"expected_action": {"name": "mystery_tool", "arguments": {"img_idx": 3}}}),
]
# Settings other than the shipped config's, each over every case.
VARIANTS: dict[str, dict[str, Any]] = {"continuous": {"reward_mode": "continuous"},
                                       "strict_names": {"unify_region_inspect_tools": False},
                                       "no_target_match": {"enable_target_match": False},
                                       "extra_calls_allowed": {"penalize_extra_tool_calls": False}}
FIELDS = ("reward", "tool_name_match", "rollout_tool_name", "expected_tool_name", "target_match", "argument_score",
          "argument_detail", "tool_family", "num_rollout_tool_calls", "failure_reason")


def response_of(text: str) -> Any:
    chunk = types.SimpleNamespace(text=text)
    return types.SimpleNamespace(output=[types.SimpleNamespace(content=[chunk])])


SOURCE = ("NVIDIA-NeMo/Gym/responses_api_agents/image_tools_agent/app.py@07d6b0d0:ImageToolsAgent.run, "
          "resources_servers/image_tools/app.py@07d6b0d0:ImageToolsPivotResourcesServer.verify")


def pivot_cases(gym_dir: str) -> list[dict[str, Any]]:
    _stand_ins()
    sys.path.insert(0, gym_dir)
    from resources_servers.image_tools import app

    shipped = yaml.safe_load((Path(gym_dir) / CONFIG).read_text())
    settings = shipped["image_tools_pivot"]["resources_servers"]["image_tools"]
    base_config = {k: v for k, v in settings.items() if k in app.ImageToolsPivotResourcesServerConfig.model_fields}
    runs: dict[str, dict[str, Any]] = {"shipped": {}, **VARIANTS}
    cases = []
    for run, extra in runs.items():
        server = app.ImageToolsPivotResourcesServer(
            config=app.ImageToolsPivotResourcesServerConfig(**{**base_config, **extra}))
        for name, text, row in CASES:
            body = app.ImageToolsPivotVerifyRequest(response=response_of(text), **row)
            result = asyncio.run(server.verify(body)).model_dump(mode="json", exclude={"response"})
            episode: dict[str, Any] = {"response": text, "extra": {"verifier": "image_tools_pivot"}}
            if "expected_action" in row or "expected_answer" in row:
                episode["ground_truth"] = row.get("expected_action", row.get("expected_answer"))
            if "metadata" in row:
                episode["extra"]["metadata"] = row["metadata"]
            if extra:
                episode["extra"]["settings"] = extra
            cases.append({"name": f"pivot/{run}/{name}", "episode": episode,
                          "expected": {"total": result["reward"], "terms": {"pivot": result["reward"]},
                                       "details": {k: result[k] for k in FIELDS}}})
    return cases


def agent_cases(tools_golden: str) -> list[dict[str, Any]]:
    cases = []
    for session in json.loads(Path(tools_golden).read_text())["sessions"]:
        calls = []
        for turn in session["turns"]:
            if "appended" in turn:
                images = sum(1 for part in turn["appended"] if isinstance(part, dict) and "image" in part)
                calls.append({"tool": "call", "ok": True, "images": images, "meta": {"reward": turn["reward"]}})
            elif turn["reward"]:
                calls.append({"tool": "call", "ok": False, "images": 0, "meta": {"reward": turn["reward"]}})
        cases.append({"name": f"agent/{session['name']}", "episode": {"calls": calls},
                      "expected": {"total": session["aux_reward"], "terms": {"tools": session["aux_reward"]}}})
    return cases


def main(gym_dir: str, tools_golden: str, out: str) -> None:
    golden = {"profile": "nemo-gym", "source": SOURCE,
              "recorded_with": "scripts/goldens/record_rewards_nemo_gym.py; app.py sha256 "
              + hashlib.sha256((Path(gym_dir) / APP).read_bytes()).hexdigest(),
              "cases": pivot_cases(gym_dir) + agent_cases(tools_golden)}
    Path(out).write_text(json.dumps(golden, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
