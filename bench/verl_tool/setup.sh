#!/usr/bin/env bash
# Sets up verl-tool's own tool server (TIGER-AI-Lab/verl-tool @ 980962b) next to this project, for
# side-by-side benchmarks and for recording tests/data/verl_tool_exchanges.json.
#
#   bench/verl_tool/setup.sh [GIT_DIR]
#
# GIT_DIR: a git directory holding commit 980962b (default: the bare mirror below).
# Creates (idempotently; a second run only checks):
#   .bench/verl-tool/venv  a python3.11 venv with ONLY what its server + the pixel_reasoner tool import
#                          (plus aiohttp for its client code and psutil for the probe); NO torch, NO verl:
#                          bench/verl_tool/shim/sitecustomize.py stands in for the imports never used on
#                          the crop path.
#   .bench/verl-tool/src   `git archive 980962b` of verl-tool (no file of it is edited).
set -euo pipefail

COMMIT=980962b
GIT_DIR="${1:-/work/.mirror/TIGER-AI-Lab+verl-tool/repo}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BASE="$ROOT/.bench/verl-tool"
VENV="$BASE/venv"
SRC="$BASE/src"
PY="${PYTHON:-python3.11}"

# Pillow is pinned to the version /work/main/.venv has (13.0.0), NOT verl-tool's pin (11.2.1): the two
# differ by up to 18 levels on bicubic resizes (their JPEG encoders write identical bytes), so only the same
# Pillow makes pixels comparable between the two servers.
PILLOW_VERSION=13.0.0

# The server's own imports (tool_server.py, serve.py, tools/{base,finish,pixel_reasoner}.py,
# agent_loop/{vision_utils,vision_process}.py) + aiohttp (verltool_agent_loop's client) + psutil (probe).
PACKAGES=(fastapi starlette uvicorn uvloop httptools pydantic pillow regex tqdm fire httpx numpy requests
          packaging aiohttp psutil)

mkdir -p "$BASE"

# 1. verl-tool's tree at $COMMIT (re-exported only when the stamp names another commit).
want="$(git -C "$GIT_DIR" rev-parse --verify "$COMMIT^{commit}")"
if [[ "$(cat "$SRC/.verl_tool_commit" 2>/dev/null || true)" != "$want" ]]; then
    rm -rf "$SRC.tmp" && mkdir -p "$SRC.tmp"
    git -C "$GIT_DIR" archive "$want" | tar -x -C "$SRC.tmp"
    echo "$want" > "$SRC.tmp/.verl_tool_commit"
    rm -rf "$SRC" && mv "$SRC.tmp" "$SRC"
    echo "exported verl-tool $want to $SRC"
fi

# 2. The venv.
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PY" -m venv "$VENV"
fi

# 3. Versions: verl-tool's own requirements.txt pins (every "name==version" line, transitive deps included),
#    with Pillow overridden as explained above. Installed only when this list changed.
CONSTRAINTS="$BASE/constraints.txt"
{
    grep -E '^[A-Za-z0-9_.-]+==' "$SRC/requirements.txt" | grep -viE '^pillow=='
    echo "pillow==$PILLOW_VERSION"
} > "$CONSTRAINTS.new"
stamp="$(cat "$CONSTRAINTS.new" <(printf '%s\n' "${PACKAGES[@]}") | sha256sum | cut -d' ' -f1)"
if [[ "$(cat "$VENV/.installed" 2>/dev/null || true)" != "$stamp" ]]; then
    mv "$CONSTRAINTS.new" "$CONSTRAINTS"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -c "$CONSTRAINTS" "${PACKAGES[@]}"
    echo "$stamp" > "$VENV/.installed"
else
    rm -f "$CONSTRAINTS.new"
fi

# 4. Check: the shim + tree import the server and the tool, and nothing heavy is installed.
PYTHONPATH="$ROOT/bench/verl_tool/shim:$SRC" "$VENV/bin/python" - <<'PY'
import importlib.util, PIL
for heavy in ("torch", "torchvision", "ray", "vllm", "verl"):
    assert importlib.util.find_spec(heavy) is None or importlib.util.find_spec(heavy).origin == "verl-tool shim", heavy
import verl_tool.servers.tool_server, verl_tool.servers.serve, verl_tool.servers.tools.pixel_reasoner  # noqa
import verl_tool.servers.tools.finish  # noqa
print(f"verl-tool server importable (Pillow {PIL.__version__}, stand-ins: shim)")
PY
echo "ready: $VENV (python), $SRC (verl-tool @ $COMMIT)"
