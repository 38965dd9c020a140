"""Records tests/data/visionthink_alpha_golden.json by running VisionThink's own `process_image`
(dvlab-research/VisionThink @ 42afd8c3, `verl/utils/dataset/multimodal_dataset.py`, taken from that file as it is and
compiled on its own: the module imports the trainer) on the inputs of tests/profiles/alpha_inputs.py, each opened from
its PNG bytes as the dataset's image column hands it over (`PIL.Image.open`, its own mode):

- the first view, as the efficient-reasoning recipe makes it (`tool_call=True`, `use_tgt_size=True`, the default
  `max_pixels` 4194304 and `min_pixels` 262144);
- the image `resize_image` answers with under `use_raw_image=True`: `process_image` of the same row at twice the
  first view's size (`tgt_w * 2`, `tgt_h * 2`; `use_tool` absent from the row's info).

    <toolserver venv python> scripts/goldens/record_visionthink_alpha.py <visionthink checkout> <out.json>
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import math
import platform
import sys
from pathlib import Path
from typing import Any

import PIL
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "profiles"))
from alpha_inputs import png

COMMIT = "42afd8c34a4efffeb9811368469d3d890efdedf3"
INPUTS = {"rgba_large": ("rgba", 2500, 1800, 1), "rgba_small": ("rgba", 301, 203, 2), "la_small": ("la", 301, 203, 3),
          "palette_small": ("palette", 301, 203, 4), "palette_large": ("palette", 2300, 1900, 5)}


def reference_function(root: Path, relative: str, name: str) -> Any:
    tree = ast.parse((root / relative).read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {"math": math}
    exec(compile(ast.Module([node], []), relative, "exec"), namespace)
    return namespace[name]


def pixels_of(image: Image.Image) -> dict[str, Any]:
    return {"size": list(image.size), "mode": image.mode, "sha256": hashlib.sha256(image.tobytes()).hexdigest()}


def main(root: Path, out: Path) -> None:
    process_image = reference_function(root, "verl/utils/dataset/multimodal_dataset.py", "process_image")
    cases = []
    for name, spec in INPUTS.items():
        data = png(*spec)
        first = process_image(Image.open(io.BytesIO(data)), 4194304, 262144, True, True, None, None, None)
        tgt_w, tgt_h = first.size
        raw = process_image(Image.open(io.BytesIO(data)), 4194304, 262144, True, True, tgt_w * 2, tgt_h * 2, None)
        cases.append({"name": name, "input": list(spec), "input_mode": Image.open(io.BytesIO(data)).mode,
                      "png_sha256": hashlib.sha256(data).hexdigest(), "first_view": pixels_of(first),
                      "resized": pixels_of(raw)})
    out.write_text(json.dumps({
        "source": f"github dvlab-research/VisionThink@{COMMIT}",
        "produced_by": ("the reference's own process_image (verl/utils/dataset/multimodal_dataset.py) on each input "
                        f"opened from its PNG bytes; Python {platform.python_version()}, Pillow {PIL.__version__}"),
        "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
