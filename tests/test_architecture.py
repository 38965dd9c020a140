"""Sizes that keep the code readable: no Python module in the repository above 400 lines, no function above 80.
(The import layers and the absence of cycles are checked by `lint-imports` in .ci/run, types by `mypy`.)"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def python_files() -> list[Path]:
    roots = ["toolserver", "tests", "bench", "examples", "scripts", "integrations"]
    return sorted(p for root in roots for p in (ROOT / root).rglob("*.py") if "__pycache__" not in p.parts)


def test_modules_are_short():
    long = {str(p.relative_to(ROOT)): n for p in python_files() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules above {MAX_MODULE_LINES} lines: {long}"


def test_functions_are_short():
    long = {}
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert not long, f"functions above {MAX_FUNCTION_LINES} lines: {long}"
