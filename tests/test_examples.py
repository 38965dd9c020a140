"""The examples, end to end: a real toolserver, the scripted stand-in model, and the rollout loop in every format
it offers (one trajectory each, in one server)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from examples.rollout import main as rollout_main
from examples.scripted_model import SCRIPTS
from tests.conftest import PHOTOS, free_port, start_server, stop_server
from tests.profiles.vrag_sessions import DOCUMENT, LIBRARY_SETTINGS, make_corpus_pdf
from toolserver.formats import FORMATS
from toolserver.registry import BUILTIN

ROOT = Path(__file__).parent.parent
# format -> (tool calls per trajectory, of which ok, images they returned): where a script sends a malformed call on
# purpose, its error comes back as text the model reads.
EXPECTED = {"openai": (4, 3, 3), "hermes": (3, 2, 2), "groundlight": (2, 1, 1), "mags-rl": (1, 1, 2),
            "mgpo": (1, 1, 1), "mini-o3": (3, 2, 2), "deepeyes": (3, 2, 2), "pixel-reasoner": (3, 2, 2),
            "qwen-agent": (2, 1, 1), "nemo-gym": (1, 1, 1), "pyvision-rl": (1, 1, 1), "deepeyes-v2": (1, 1, 1),
            "thyme": (1, 1, 1), "chain-of-focus": (1, 1, 1), "visionthink": (1, 1, 1), "codedance": (1, 1, 1),
            "vrag": (2, 2, 2), "mmsearch-r1": (1, 0, 0)}


def rollout(capsys, toolserver: str, model: str, *extra: str) -> tuple[int, str, str]:
    """`examples/rollout.py` with these arguments, in this process (a process each would cost its imports):
    (exit status, stdout, stderr). An exception escaping it is the traceback a user would see."""
    try:
        status = rollout_main(["--toolserver", toolserver, "--model-url", model, "--image",
                               str(PHOTOS / "TwoWings.jpg"), *extra])
    except SystemExit as exc:  # argparse's refusal
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def test_every_format_the_rollout_offers_is_scripted_and_tested():
    builtin = {name for name in FORMATS if FORMATS.source(name) == BUILTIN}  # plugins' formats are theirs to script
    assert set(SCRIPTS) == set(EXPECTED) == {"openai", *builtin}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("examples")
    pdf = make_corpus_pdf(tmp / f"{DOCUMENT}.pdf", PHOTOS)  # VRAG-RL's rollout searches a document library
    toolserver = start_server({"TOOLSERVER_DATA_DIR": str(tmp / "data"), "TOOLSERVER_ALLOWED_ROOTS": f'["{tmp}"]',
                               **{f"TOOLSERVER_{k.upper()}": str(v) for k, v in LIBRARY_SETTINGS.items()}},
                              timeout=60)
    ingested = httpx.post(toolserver.url + "/v1/documents?wait=true", json={"path": str(pdf)}, timeout=300)
    assert ingested.status_code == 200, ingested.text
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
def test_rollout_example(servers, capsys, fmt):
    status, out, err = rollout(capsys, *servers, "--format", fmt)
    assert status == 0, out + err
    summary = json.loads(out)
    assert summary["answered"] == 1
    assert (summary["tool_calls"], summary["ok"], summary["images"]) == EXPECTED[fmt], summary
    assert len(summary["first_errors"]) == (EXPECTED[fmt][0] != EXPECTED[fmt][1])  # the malformed call's text


def test_rollout_says_what_failed_in_one_line(servers, capsys):
    toolserver, model = servers
    status, _, err = rollout(capsys, toolserver, model, "--format", "hermes", "--model", "not-scripted")
    assert status == 2 and err.startswith("rollout failed: the model at") and "answered 404" in err, err
    status, _, err = rollout(capsys, toolserver, model, "--format", "hermes", "--profile", "no-such-profile")
    assert status == 2 and "422 unknown_profile" in err, err
    status, _, err = rollout(capsys, f"http://127.0.0.1:{free_port()}", model, "--format", "hermes")
    assert status == 2 and "cannot connect" in err, err
    status, _, err = rollout(capsys, toolserver, model.replace("/v1", "/nowhere/v1"), "--format", "hermes")
    assert status == 2 and "answered 404" in err, err
    status, _, err = rollout(capsys, toolserver, model, "--format", "no-such-format")
    assert status == 2 and "invalid choice: 'no-such-format'" in err, err
