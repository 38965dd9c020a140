"""Records tests/data/zoom_alpha_golden.json: two zoom tools that crop and resize an image in its own mode (alpha
premultiplied, a palette resized NEAREST, as Pillow does) and leave the RGB conversion to the model's side, run as
their own code on the RGBA, LA and palette inputs of tests/profiles/alpha_inputs.py (each opened from its PNG bytes,
in its own mode):

- `qwen3-vl`: Qwen-Agent's `ImageZoomInToolQwen3VL.call` (QwenLM/Qwen-Agent @ d04611b,
  `qwen_agent/tools/image_zoom_in_qwen3vl.py`), the class compiled from that file as it is; stand-ins for what it
  imports from the rest of Qwen-Agent, and only these: `BaseToolWithFileAccess` (a `work_dir`, arguments already a
  dict), `register_tool` (no registry), `ContentItem` (a dict), `extract_images_from_messages` (the messages' image
  paths), `logger`. Its result is the PNG it saves.
- `groundlight`: r1_vlm's `zoom` and `calculate_crop_coordinates` (groundlight/r1_vlm @ d87e650,
  `src/r1_vlm/tools/zoom.py`) on the image its dataset hands over (`resize_image` of
  `src/r1_vlm/datasets/text_vqa/text_vqa_tool_use_r1.py`: long side at most 1024, Pillow's default filter), the
  functions compiled from those files as they are.

Each result is recorded as the tool made it (mode, pixels) and as the model is shown it: the profile's documented
alpha rule, composited on white (`toolserver.imaging.to_rgb(..., "white")`, what qwen-vl-utils does for RGBA).

    PYTHONPATH=<toolserver checkout> <toolserver venv python> scripts/goldens/record_zoom_alpha.py \\
        <qwen-agent checkout> <r1_vlm checkout> <out.json>
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import math
import os
import platform
import sys
import tempfile
import uuid
from io import BytesIO
from math import ceil, floor
from pathlib import Path
from typing import Any

import PIL
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "profiles"))
from alpha_inputs import png

from toolserver.imaging import to_rgb

INPUTS = {"rgba": ("rgba", 301, 203, 2), "la": ("la", 301, 203, 3), "palette": ("palette", 301, 203, 4),
          "rgba_large": ("rgba", 1500, 1100, 6), "palette_large": ("palette", 1300, 1400, 7)}
QWEN3_CALLS = [{"bbox_2d": [100, 150, 620, 700], "label": "a", "img_idx": 0},
               {"bbox_2d": [400, 400, 430, 420], "label": "small", "img_idx": 0}]
GROUNDLIGHT_KEYPOINTS = [[150, 100], [20, 30]]


class StandIn:
    """What the Qwen-Agent tool reads from its base class."""

    def __init__(self, work_dir: str):
        self.work_dir = work_dir

    def _verify_json_format_args(self, params: dict[str, Any]) -> dict[str, Any]:
        return params


def compiled(path: Path, names: list[str], namespace: dict[str, Any]) -> dict[str, Any]:
    tree = ast.parse(path.read_text())
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name in names]
    exec(compile(ast.Module(nodes, []), str(path), "exec"), namespace)
    return namespace


def qwen3_tool(root: Path, work_dir: str) -> Any:
    namespace = {"BaseToolWithFileAccess": StandIn, "register_tool": lambda name: (lambda cls: cls),
                 "ContentItem": lambda **kw: kw, "logger": None, "Image": Image, "BytesIO": BytesIO, "os": os,
                 "uuid": uuid, "math": math, "ceil": ceil, "floor": floor, "List": list, "Union": Any,
                 "extract_images_from_messages": lambda messages: [m["image"] for m in messages],
                 "requests": None}
    classes = compiled(root / "qwen_agent/tools/image_zoom_in_qwen3vl.py", ["ImageZoomInToolQwen3VL"], namespace)
    return classes["ImageZoomInToolQwen3VL"](work_dir)


def groundlight_functions(root: Path) -> tuple[Any, Any]:
    namespace: dict[str, Any] = {"Image": Image, "math": math, "List": list, "Tuple": tuple}
    compiled(root / "src/r1_vlm/tools/zoom.py", ["calculate_crop_coordinates", "zoom"], namespace)
    compiled(root / "src/r1_vlm/datasets/text_vqa/text_vqa_tool_use_r1.py", ["resize_image"], namespace)
    return namespace["zoom"], namespace["resize_image"]


def pixels_of(image: Image.Image) -> dict[str, Any]:
    return {"size": list(image.size), "mode": image.mode, "sha256": hashlib.sha256(image.tobytes()).hexdigest()}


def shown(image: Image.Image) -> dict[str, Any]:
    return {"made": pixels_of(image), "shown": pixels_of(to_rgb(image, "white"))}


def main(qwen_agent: Path, r1_vlm: Path, out: Path) -> None:
    work_dir = tempfile.mkdtemp()
    tool = qwen3_tool(qwen_agent, work_dir)
    zoom, resize_image = groundlight_functions(r1_vlm)
    cases = []
    for name, spec in INPUTS.items():
        data = png(*spec)
        path = os.path.join(work_dir, f"input_{name}.png")
        Path(path).write_bytes(data)
        qwen3 = []
        for params in QWEN3_CALLS:
            [item] = tool.call(dict(params), messages=[{"image": path}])
            qwen3.append({"params": params, **shown(Image.open(item["image"]))})
        dataset_image = resize_image(Image.open(io.BytesIO(data)))
        groundlight = [{"keypoint": point, **shown(zoom(point, images={"input_image": dataset_image}))}
                       for point in GROUNDLIGHT_KEYPOINTS]
        cases.append({"name": name, "input": list(spec), "png_sha256": hashlib.sha256(data).hexdigest(),
                      "qwen3_vl": qwen3, "groundlight": groundlight})
    out.write_text(json.dumps({
        "source": "github QwenLM/Qwen-Agent@d04611b (qwen_agent/tools/image_zoom_in_qwen3vl.py), groundlight/r1_vlm@"
                  "d87e650 (src/r1_vlm/tools/zoom.py, src/r1_vlm/datasets/text_vqa/text_vqa_tool_use_r1.py)",
        "produced_by": f"their own code on each input opened from its PNG bytes; Python {platform.python_version()}, "
                       f"Pillow {PIL.__version__}",
        "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
