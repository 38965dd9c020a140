"""Records tests/data/openthinkimg_golden.json by running OpenThinkIMG's own code (zhaochen0110/OpenThinkIMG @
45d295f0) over the sessions and cases of tests/profiles/openthinkimg_sessions.py:

- the GRPO rollout, `vllm_generate_with_tool_calls` of `r1_v/open_r1/trainer/tool_generation.py` with its
  `parse_tool_config`, `handle_tool_result`, `append_conversation_fn` and image helpers, as they are;
- the tool manager's `call_tool` (`tool_server/tool_workers/tool_manager/base_manager.py`) and the workers it calls:
  `generate` of `DrawHorizontalLineByY_worker.py`, `DrawVerticalLineByX_worker.py`, `SelectSubplot_worker.py`
  (served as ZoomInSubfigure) with their module functions, `BaseToolWorker.generate_gate`, the offline
  `crop_worker.generate`, and `tool_server/utils/utils.py`'s image helpers.

Each function is taken from its file as written and compiled on its own (the modules import the trainer, FastAPI
apps and controllers). Stand-ins, and only these: the vLLM model (`chat` answers the session's scripted turns), the
tool manager's construction (its worker list: the six workers, offline `crop` and `drawline`), `requests.post` to a
worker (the worker's `generate_gate` on the JSON-decoded request; an exception escaping it is FastAPI's plain-text
500 page, which `response.json()` cannot read), Gemini (unreachable: `call_gemini`'s own answer after its retries,
without the sleeps), the loggers. `crop` is outside the rollout's name mapping, so its cases call the manager's
`call_tool("crop", ...)` and the rollout's `handle_tool_result` directly, as the rollout would if it mapped the name.

    PYTHONPATH=<toolserver checkout> <python with Pillow, numpy, opencv, matplotlib, requests, torch> \\
        scripts/goldens/record_openthinkimg.py <OpenThinkIMG checkout> <out.json>
"""

from __future__ import annotations

import ast
import base64
import copy
import hashlib
import io
import json
import logging
import os
import platform
import re
import subprocess
import sys
from contextlib import contextmanager
from io import BytesIO
from json import dumps, loads
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import cv2
import matplotlib
import numpy as np
import PIL
import requests
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.conftest import PHOTOS
from tests.profiles.openthinkimg_sessions import CROP_PHOTO, CROPS, POINT_PARAMS, SESSIONS, session_image

COMMIT = "45d295f0"
WORKERS = "tool_server/tool_workers/online_workers/"
GEMINI_UNREACHABLE = "Some thing wrong and there is nothing return"  # call_gemini's answer after five failures


def source(root: Path, path: str) -> str:
    return subprocess.run(["git", "-C", str(root), "show", f"{COMMIT}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def functions(root: Path, path: str, names: list[str], cls: str | None = None) -> list[ast.stmt]:
    body = ast.parse(source(root, path)).body
    if cls is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
    found = {n.name: n for n in body if isinstance(n, ast.FunctionDef)}
    return [found[name] for name in names]


def compiled(nodes: list[ast.stmt], namespace: dict[str, Any], label: str) -> dict[str, Any]:
    exec(compile(ast.Module(nodes, []), label, "exec"), namespace)
    return namespace


def base_namespace() -> dict[str, Any]:
    logger = logging.getLogger("openthinkimg-reference")
    return {"re": re, "json": json, "io": io, "base64": base64, "BytesIO": BytesIO, "Image": Image, "np": np,
            "cv2": cv2, "os": os, "torch": torch, "logger": logger, "logging": logging, "copy": copy,
            "Optional": Optional, "Dict": dict, "List": list, "Any": Any}


def utils(root: Path) -> dict[str, Any]:
    names = ["load_image_from_base64", "b64_encode", "pil_to_base64", "base64_to_pil", "load_image"]
    return compiled(functions(root, "tool_server/utils/utils.py", names), base_namespace(), "utils.py")


def worker(root: Path, path: str, cls: str, module_functions: list[str]) -> Any:
    """The worker class's `generate` and the base class's `generate_gate`, bound to a bare instance."""
    import matplotlib.pyplot as plt

    namespace = {**base_namespace(), **utils(root), "plt": plt, "requests": requests}
    compiled(functions(root, path, module_functions), namespace, path)
    namespace["call_gemini"] = lambda data: GEMINI_UNREACHABLE
    methods = functions(root, path, ["generate"], cls)
    methods += functions(root, WORKERS + "base_tool_worker.py", ["generate_gate"], "BaseToolWorker")
    namespace["SERVER_ERROR_MSG"] = "**NETWORK ERROR DUE TO HIGH TRAFFIC. PLEASE REGENERATE OR REFRESH THIS PAGE.**"
    namespace["ErrorCode"] = SimpleNamespace(CUDA_OUT_OF_MEMORY=50002, INTERNAL_ERROR=50001)
    compiled(methods, namespace, path)
    instance = SimpleNamespace()
    instance.generate = namespace["generate"].__get__(instance)
    instance.generate_gate = namespace["generate_gate"].__get__(instance)
    return instance


class Response:
    """What `requests.post` hands back from a worker's FastAPI app: its JSON answer, or the plain-text 500 page."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def json(self) -> Any:
        if self.answer is None:
            raise requests.exceptions.JSONDecodeError("Expecting value", "Internal Server Error", 0)
        return json.loads(json.dumps(self.answer))


def tool_manager_class(root: Path) -> type:
    online = {
        "DrawHorizontalLineByY": worker(root, WORKERS + "DrawHorizontalLineByY_worker.py",
                                        "DrawHorizontalLineToolWorker", ["extract_points", "DrawHorizontalLine"]),
        "DrawVerticalLineByX": worker(root, WORKERS + "DrawVerticalLineByX_worker.py", "DrawVerticalLineToolWorker",
                                      ["extract_points", "DrawVerticalLine"]),
        "ZoomInSubfigure": worker(root, WORKERS + "SelectSubplot_worker.py", "SelectSubplotToolWorker",
                                  ["encode_image_to_base64", "get_sorted_bbox", "get_subplot_images",
                                   "create_gemini_json", "extract_image_ids"]),
    }
    crop_namespace = {**base_namespace(), **utils(root)}
    crop = compiled(functions(root, "tool_server/tool_workers/offline_workers/crop_worker.py", ["generate"]),
                    crop_namespace, "crop_worker.py")["generate"]

    def post(url: str, headers: Any = None, json: Any = None) -> Response:
        name, route = url.rsplit("/", 1)
        assert route == "worker_generate"
        try:
            return Response(online[name].generate_gate(loads(dumps(json))))
        except Exception:  # escaped the worker: FastAPI's 500 page
            return Response(None)

    namespace = {**base_namespace(), "requests": SimpleNamespace(post=post), "os": os,
                 "get_tool_generate_fn": lambda name: crop if name == "crop" else None}
    nodes = functions(root, "tool_server/tool_workers/tool_manager/base_manager.py", ["call_tool", "disable_proxy"],
                      "ToolManager")
    namespace["contextmanager"] = contextmanager
    compiled(nodes, namespace, "base_manager.py")

    class ToolManager:
        call_tool = namespace["call_tool"]
        disable_proxy = namespace["disable_proxy"]

        def __init__(self, controller_addr: Any = None) -> None:
            self.available_offline_tools = ["crop", "drawline"]
            self.available_online_tools = [*online, "OCR", "Point", "SegmentRegionAroundPoint"]
            self.online_tool_addr_dict = {name: name for name in online}
            self.available_tools = self.available_offline_tools + self.available_online_tools
            self.headers = {"User-Agent": "LLaVA-Plus Client"}

    return ToolManager


def rollout(root: Path) -> dict[str, Any]:
    names = ["pil_to_base64", "base64_to_pil", "load_image_from_base64", "parse_tool_config", "handle_tool_result",
             "append_conversation_fn", "vllm_generate_with_tool_calls"]
    namespace = {**base_namespace(), "ToolManager": tool_manager_class(root)}
    return compiled(functions(root, "r1_v/open_r1/trainer/tool_generation.py", names), namespace, "tool_generation.py")


class ScriptedModel:
    """vLLM's `chat` for one trajectory: the session's next turn each round; the conversations it is handed kept."""

    def __init__(self, turns: list[str]) -> None:
        self.turns, self.seen = list(turns), []

    def chat(self, conversations: list[Any], **kwargs: Any) -> list[Any]:
        if not conversations:
            return []
        text = self.turns.pop(0)
        return [SimpleNamespace(outputs=[SimpleNamespace(text=text, token_ids=(0,))])]


def pixels(image: Image.Image) -> dict[str, Any]:
    return {"size": [*image.size], "sha256": hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()}


def message(entry: dict[str, Any]) -> dict[str, Any]:
    texts = [part["text"] for part in entry["content"] if part["type"] == "text"]
    images = [pixels(Image.open(BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1]))))
              for part in entry["content"] if part["type"] == "image_url"]
    return {"role": entry["role"], "texts": texts, "images": images}


def run_session(reference: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
    image = session_image(session["photo"])
    model = ScriptedModel(session["turns"])
    out = reference["vllm_generate_with_tool_calls"](model, [session["question"]], [image], max_rounds=len(
        session["turns"]), model_mode="general")[0]
    conversation = out["conversations"][1:]
    turns, i = [], 0
    for text in out["model_outputs"]:
        assert conversation[i]["role"] == "assistant" and conversation[i]["content"][0]["text"] == text
        i += 1
        appended = []
        while i < len(conversation) and not (conversation[i]["role"] == "assistant"
                                             and conversation[i]["content"][0]["text"] in session["turns"]):
            appended.append(message(conversation[i]))
            i += 1
        turns.append({"action": text, "done": "Terminate" in text, "appended": appended})
    return {"name": session["name"], "turns": turns, "kept": [pixels(img) for img in out["images"]]}


def crop_cases(reference: dict[str, Any]) -> list[dict[str, Any]]:
    manager = reference["ToolManager"]()
    with Image.open(PHOTOS / CROP_PHOTO) as photo:
        image = photo.convert("RGB")
    sent = reference["pil_to_base64"](image, url_format=False)  # as `parse_tool_config` sends the newest image
    cases = []
    for param in CROPS:
        answer = manager.call_tool("crop", {"image": sent, "param": param})
        data = {"input_data_item": {"images": [image]}}
        conversation = reference["handle_tool_result"]({"API_name": "crop"}, copy.deepcopy(answer), [],
                                                       original_prompt="QUESTION", **data)
        cases.append({"param": param, "text": answer["text"], "edited": "edited_image" in answer,
                      "appended": message(conversation[-1]),
                      "kept": pixels(data["input_data_item"]["images"][-1])})
    return cases


def main(root: Path, out: Path) -> None:
    reference = rollout(root)
    points_ns = compiled(functions(root, WORKERS + "DrawHorizontalLineByY_worker.py", ["extract_points"]),
                         base_namespace(), "extract_points")
    subplot_ns = compiled(functions(root, WORKERS + "SelectSubplot_worker.py", ["get_sorted_bbox"]), base_namespace(),
                          "get_sorted_bbox")
    subplots = {}
    for photo in sorted(p.name for p in PHOTOS.iterdir() if p.suffix in {".jpg", ".png"}):
        with Image.open(PHOTOS / photo) as image:
            try:
                subplots[photo] = json.loads(subplot_ns["get_sorted_bbox"](image.convert("RGB")))
            except Exception as exc:  # the worker reports it as its error text
                subplots[photo] = {"error": f"{type(exc).__name__}: {exc}"}
    golden = {
        "reference": f"zhaochen0110/OpenThinkIMG@{COMMIT}",
        "versions": {"python": platform.python_version(), "Pillow": PIL.__version__, "numpy": np.__version__,
                     "opencv": cv2.__version__, "matplotlib": matplotlib.__version__},
        "sessions": [run_session(reference, session) for session in SESSIONS],
        "crops": crop_cases(reference),
        "points": [{"param": p, "points": [[float(v) for v in pt] for pt in points_ns["extract_points"](p, 640, 480)]}
                   for p in POINT_PARAMS],
        "subplots": subplots,
    }
    out.write_text(json.dumps(golden, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
