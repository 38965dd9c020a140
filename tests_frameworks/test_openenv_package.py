"""Profiles as OpenEnv environment packages (`toolserver openenv-package`), with `openenv` 0.10 itself (its
environment: requirements-openenv10.txt): `openenv validate` accepts every profile's package; the package's server
(OpenEnv's own app, what a Space runs) forwards episodes to a live toolserver, several at once, and passes
`openenv validate --url`; the episode it serves equals `/act`'s; `AutoEnv` finds the installed package."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests_frameworks.conftest import ROOT, data_uri, decode, free_port, need, picture, top_left_crop

ZOOM = '<tool_call>{"name": "zoom_in", "arguments": {"image": 0, "bbox_2d": [0, 0, 500, 500]}}</tool_call>'
TOOLSERVER_PYTHON = os.environ.get("TOOLSERVER_PYTHON", str(ROOT / ".venv" / "bin" / "python"))


def openenv_cli() -> str:
    need("openenv.cli")
    return str(Path(sys.executable).with_name("openenv"))


def package(profile: str, folder: Path, url: str = "") -> Path:
    """`toolserver openenv-package` (from the project's environment: this one holds openenv, not toolserver)."""
    subprocess.run([TOOLSERVER_PYTHON, "-m", "toolserver.cli", "openenv-package", profile, str(folder), "--url", url,
                    "--max-concurrent-envs", "8"], cwd=ROOT, check=True, capture_output=True)
    return folder


def test_openenv_validate_accepts_every_profile_package(toolserver, tmp_path):
    openenv = openenv_cli()
    from openenv.validation import Level, run_validation

    profiles = [p["name"] for p in httpx.get(f"{toolserver.url}/v1/profiles", timeout=30).json()]
    assert "nemo-gym" in profiles and "default" in profiles
    cli = subprocess.run([openenv, "validate", str(package("nemo-gym", tmp_path / "nemo_gym")), "--skip-build"],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "PASS  static.manifest" in cli.stdout and "Verdict: WARN" in cli.stdout  # runtime checks need Docker
    for profile in profiles:
        report = run_validation(package(profile, tmp_path / profile), max_level=Level.STATIC)
        assert report.verdict.value == "pass", (profile, [(r.check_id, r.evidence) for r in report.results])


@pytest.fixture(scope="module")
def space(toolserver, tmp_path_factory):
    """The package's server, as a Space runs it, forwarding to the live toolserver."""
    need("openenv.core")
    folder = package("default", tmp_path_factory.mktemp("space") / "toolserver_default_env", toolserver.url)
    port = free_port()
    log = folder.parent / "space.log"
    env = {**os.environ, "TOOLSERVER_URL": toolserver.url, "PYTHONPATH": str(folder)}
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "uvicorn", "server.app:app", "--port", str(port),
                                    "--log-level", "warning"], cwd=folder, env=env, stdout=out,
                                   stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the package's server did not start: {log.read_text()[-3000:]}")
        time.sleep(0.3)
    sys.path.insert(0, str(folder.parent))
    try:
        yield url, folder
    finally:
        sys.path.remove(str(folder.parent))
        process.terminate()
        process.wait(20)


def test_the_space_forwards_an_episode_as_act_runs_it(toolserver, space):
    url, _ = space
    module = importlib.import_module("toolserver_default_env")
    twin = httpx.post(f"{toolserver.url}/v1/sessions", json={"images": [{"data": data_uri(picture())}]},
                      timeout=30).json()["session_id"]
    expected = httpx.post(f"{toolserver.url}/v1/sessions/{twin}/act", json={"text": ZOOM}, timeout=60).json()
    with module.ToolserverDefaultEnv(base_url=url).sync() as env:
        reset = env.reset(images=[data_uri(picture())], question="What colour is the top left?")
        zoom = env.step(module.ToolserverDefaultAction(text=ZOOM))
        rotate = env.step(module.ToolserverDefaultAction(tool_name="rotate",
                                                         arguments={"image": "observation_1", "angle": 90}))
        state = env.state()
    assert reset.observation.messages == [] and reset.observation.metadata["columns"] == ["question"]
    session = reset.observation.metadata["session_id"]
    assert zoom.done == expected["done"] and zoom.reward is None
    assert [r["text"] for r in zoom.observation.metadata["results"]] == [r["text"] for r in expected["results"]]
    image = zoom.observation.messages[0]["content"][0]["image_url"]["url"]
    assert top_left_crop(decode(image))
    assert rotate.observation.metadata["results"][0]["ok"] and state.session_id == session
    assert state.columns == {"question": "What colour is the top left?"} and state.step_count == 2
    deadline = time.monotonic() + 10  # the Space's episode ended: so did its toolserver session
    while httpx.get(f"{toolserver.url}/v1/sessions/{session}").status_code != 404 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert httpx.get(f"{toolserver.url}/v1/sessions/{session}").status_code == 404


def test_concurrent_episodes_through_the_space_keep_their_own_images(space):
    url, _ = space
    module = importlib.import_module("toolserver_default_env")
    colours = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (220, 220, 40)]

    def episode(colour):
        from PIL import Image

        with module.ToolserverDefaultEnv(base_url=url).sync() as env:
            env.reset(images=[data_uri(Image.new("RGB", (64, 48), colour))])
            step = env.step(module.ToolserverDefaultAction(text=ZOOM))
        crop = decode(step.observation.messages[0]["content"][0]["image_url"]["url"])
        return crop.getcolors()

    with ThreadPoolExecutor(len(colours)) as pool:
        seen = list(pool.map(episode, colours))
    assert [found[0][1] for found in seen] == colours and all(len(found) == 1 for found in seen)


def test_the_space_passes_the_runtime_probe_and_declares_its_concurrency(space):
    url, _ = space
    probe = subprocess.run([openenv_cli(), "validate", "--url", url], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    app = importlib.import_module("toolserver_default_env.server.app")
    assert app.ToolserverDefaultEnvironment.SUPPORTS_CONCURRENT_SESSIONS is True
    assert app.MAX_CONCURRENT_ENVS == 8
    assert httpx.get(url + "/schema").json()["action"]["properties"]["tool_name"]["anyOf"][0]["enum"][0] == "zoom_in"


def test_autoenv_finds_the_installed_package(space, tmp_path):
    url, folder = space
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(folder)],
                   check=True, capture_output=True)
    script = "\n".join(["import json", "from openenv import AutoEnv",
                         f"env = AutoEnv.from_env('toolserver_default', base_url={url!r})",
                         "print(type(env).__name__)", "with env.sync() as episode:",
                         "    print(json.dumps(episode.reset().observation.metadata['profile']))"])
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(target), "XDG_CACHE_HOME": str(tmp_path / "cache"),
                                "HOME": str(tmp_path)})
    assert found.returncode == 0, found.stderr[-3000:]
    assert found.stdout.split() == ["ToolserverDefaultEnv", json.dumps("default")]


def test_toolservers_own_endpoint_passes_the_runtime_probe(toolserver):
    """`openenv validate --url` against `/openenv/<profile>` itself: OpenAPI version and routes, health, metadata,
    schema, MCP."""
    for profile in ("default", "nemo-gym", "deepeyes"):
        probe = subprocess.run([openenv_cli(), "validate", "--url", f"{toolserver.url}/openenv/{profile}", "--json"],
                               capture_output=True, text=True)
        report = json.loads(probe.stdout)
        assert probe.returncode == 0 and report["passed"], [c for c in report["criteria"] if not c["passed"]]
        assert report["standard_profile"] == "openenv-http/1.x" and report["mode"] == "simulation"
