"""Records tests/data/code_alpha_golden.json: the image two code environments hand their model's code, made by
their own `process_raw_image` (the `origin_multi_modal_data` their environments read), taken as it is from
`verl/utils/dataset/vision_utils.py` of PyVision-RL (agents-x-project/PyVision-RL @ 62ca599d, `verl_agents/`) and
DeepEyesV2 (Visual-Agent/DeepEyesV2 @ 0373e6e0, `reinforcement_learning/`), on the RGBA, LA and
palette inputs of tests/profiles/alpha_inputs.py given as a parquet row holds them (`{"bytes": ...}`). Both are
`convert("RGB")`: alpha dropped, the colour underneath kept.

    <toolserver venv python> scripts/goldens/record_code_alpha.py <PyVision-RL checkout> <DeepEyesV2 checkout> <out>
"""

from __future__ import annotations

import ast
import hashlib
import json
import platform
import sys
from pathlib import Path
from typing import Any

import PIL

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "profiles"))
from alpha_inputs import png

INPUTS = {"rgba": ("rgba", 301, 203, 2), "la": ("la", 301, 203, 3), "palette": ("palette", 301, 203, 4)}
SOURCES = {"pyvision-rl": ("github agents-x-project/PyVision-RL@62ca599d",
                           "verl_agents/verl/utils/dataset/vision_utils.py"),
           "deepeyes-v2": ("github Visual-Agent/DeepEyesV2@0373e6e0",
                           "reinforcement_learning/verl/utils/dataset/vision_utils.py")}


def process_raw_image(root: Path, relative: str) -> Any:
    tree = ast.parse((root / relative).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "process_raw_image")
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module([node], []), relative, "exec"), namespace)
    return namespace["process_raw_image"]


def main(pyvision: Path, deepeyes_v2: Path, out: Path) -> None:
    roots = {"pyvision-rl": pyvision, "deepeyes-v2": deepeyes_v2}
    cases = {}
    for profile, (_, relative) in SOURCES.items():
        made = process_raw_image(roots[profile], relative)
        cases[profile] = {}
        for name, spec in INPUTS.items():
            image = made({"bytes": png(*spec)})
            cases[profile][name] = {"input": list(spec), "size": list(image.size), "mode": image.mode,
                                    "sha256": hashlib.sha256(image.tobytes()).hexdigest()}
    out.write_text(json.dumps({"source": {p: f"{s} ({r})" for p, (s, r) in SOURCES.items()},
                               "produced_by": f"their own process_raw_image; Python {platform.python_version()}, "
                                              f"Pillow {PIL.__version__}",
                               "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
