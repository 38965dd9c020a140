"""The server starts from the base install: no optional extra (rewards' graders, the document embeddings, Ray, the
dev tools) is imported by building the app (a newcomer's `pip install vlm-toolserver`, the wheel CI installs)."""

import subprocess
import sys

EXTRAS = ["mathruler", "math_verify", "pylatexenc", "chromadb", "sentence_transformers", "ray", "selenium",
          "reportlab", "yaml", "openai", "mkdocs", "schemathesis", "transformers", "huggingface_hub"]
PROGRAM = f"""
import sys
for name in {EXTRAS!r}:
    sys.modules[name] = None  # importing it raises ImportError, as where it is not installed
from toolserver.api import create_app
from toolserver.config import Settings
create_app(Settings(data_dir=sys.argv[1]))
print("built")
"""


def test_the_app_builds_without_any_extra(tmp_path):
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path / "data")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("built"), done.stderr[-3000:]
