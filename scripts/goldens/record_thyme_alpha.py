"""Records tests/data/thyme_alpha_golden.json: what Thyme's model code reads when it opens its image, by Thyme's own
executor (yfzhang114/Thyme @ b9285b7a, `swift/trainers/sandbox.py`'s `execute_code_in_sandbox`, the file imported as
it is, with `timeout_decorator` and `autopep8` from PyPI) running `READ_BACK` against the RGBA, LA and palette PNGs
of tests/profiles/alpha_inputs.py as `image_path` (the trainer hands the code the dataset's file).

    PYTHONPATH=<dir holding sandbox.py as thyme_sandbox.py>:<timeout_decorator, autopep8, pycodestyle> \\
        <toolserver venv python> scripts/goldens/record_thyme_alpha.py <out.json>
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import PIL
import thyme_sandbox

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "profiles"))
from alpha_inputs import png

INPUTS = {"rgba": ("rgba", 301, 203, 2), "la": ("la", 301, 203, 3), "palette": ("palette", 301, 203, 4)}
READ_BACK = ("from PIL import Image\nimport hashlib\nimg = Image.open(image_path)\nprint(img.mode, img.size, "
             "hashlib.sha256(img.tobytes()).hexdigest(), hashlib.sha256(img.convert('RGBA').tobytes()).hexdigest())")


def main(out: Path) -> None:
    directory = tempfile.mkdtemp()
    cases = {}
    for name, spec in INPUTS.items():
        path = os.path.join(directory, f"{name}.png")
        Path(path).write_bytes(png(*spec))
        _, printed, error, _ = thyme_sandbox.execute_code_in_sandbox(READ_BACK, path,
                                                                     temp_output_dir=os.path.join(directory, "out"))
        assert error is None, error
        mode, width, height, pixels, rgba = printed.replace("(", "").replace(")", "").replace(",", "").split()
        cases[name] = {"input": list(spec), "printed": printed, "mode": mode, "size": [int(width), int(height)],
                       "sha256": pixels, "rgba_sha256": rgba}
    out.write_text(json.dumps({"source": "github yfzhang114/Thyme@b9285b7a (swift/trainers/sandbox.py)",
                               "produced_by": f"its own execute_code_in_sandbox; Python {platform.python_version()}, "
                                              f"Pillow {PIL.__version__}",
                               "read_back": READ_BACK, "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
