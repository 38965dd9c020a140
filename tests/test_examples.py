"""The examples, end to end: a real toolserver, the scripted stand-in model, and the rollout loop per format."""

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import PHOTOS, free_port, start_server, stop_server

ROOT = Path(__file__).parent.parent
# format -> (tool calls per trajectory, of which ok): each script sends one malformed call on purpose.
EXPECTED = {"openai": (4, 3), "hermes": (3, 2), "groundlight": (2, 1), "mags-rl": (1, 1), "mgpo": (1, 1),
            "mini-o3": (3, 2), "deepeyes": (3, 2), "pixel-reasoner": (3, 2)}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    toolserver = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path_factory.mktemp("examples"))})
    port = free_port()
    model = subprocess.Popen([sys.executable, str(ROOT / "examples" / "scripted_model.py"), "--port", str(port)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    model_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.post(model_url + "/v1/chat/completions", json={"model": "scripted-openai", "messages": []})
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline or model.poll() is not None:
                raise RuntimeError("the scripted model did not start") from None
            time.sleep(0.1)
    yield toolserver.url, model_url + "/v1"
    model.terminate()
    model.wait(10)
    stop_server(toolserver)


@pytest.mark.parametrize("fmt", sorted(EXPECTED))
def test_rollout_example(servers, fmt):
    toolserver, model = servers
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "rollout.py"), "--toolserver", toolserver, "--model-url", model,
         "--format", fmt, "--image", str(PHOTOS / "TwoWings.jpg"), "--trajectories", "3"],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    calls, ok = EXPECTED[fmt]
    assert summary["answered"] == 3
    assert (summary["tool_calls"], summary["ok"]) == (3 * calls, 3 * ok), summary
    assert len(summary["first_errors"]) == (calls != ok)  # the deliberate malformed call, read back as text
