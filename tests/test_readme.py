"""The documentation against the tree and the registries: the README's quickstart run as written, and the docs
site's tables and layout (docs/*.md): a profile, tool, call format, setting or module added without its line in
the documentation fails here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import PHOTOS, free_port
from toolserver.config import Settings
from toolserver.formats import FORMATS
from toolserver.profiles import PROFILES
from toolserver.registry import BUILTIN

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
# Every page of the site: a tool, alias or format is named on one of them.
SITE = "\n".join(path.read_text() for path in sorted(DOCS.glob("*.md")))
# Packages whose every module the layout section names: the ones that grow with environments and features.
NAMED_MODULES = ("core", "profiles", "formats", "tools", "stores", "api", "api/routers")


def page(name: str) -> str:
    return (DOCS / name).read_text()


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def builtin_profiles() -> list[str]:
    return [name for name in PROFILES if PROFILES.source(name) == BUILTIN]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


QUICKSTART = section(README, "Quickstart")
INSTALL, SERVE = blocks(QUICKSTART, "bash")
PROGRAM = "\n".join(blocks(QUICKSTART, "python"))  # the zoom, then the /act turn: one script


def test_the_readme_starts_with_a_short_quickstart():
    assert README.index("\n## ") == README.index("\n## Quickstart\n"), "the quickstart is the README's first section"
    assert len(README.splitlines()) < 60
    assert INSTALL == "python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt .\n"
    assert SERVE.startswith(".venv/bin/toolserver serve ") and "--port 8000" in SERVE
    assert "/act" in PROGRAM and "zoom_in" in PROGRAM
    for link in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (ROOT / link).is_file(), f"the README links {link}, which does not exist"


def run_program(python: str, url: str, directory: Path) -> str:
    """The quickstart's Python, as written but for the port, beside a photo saved as `photo.jpg`."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(PHOTOS / "TwoWings.jpg", directory / "photo.jpg")
    (directory / "quickstart.py").write_text(PROGRAM.replace("http://127.0.0.1:8000", url))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([python, "quickstart.py"], cwd=directory, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def check_output(stdout: str) -> None:
    zoom, turn = stdout.splitlines()
    assert zoom.startswith("Zoomed in on `original_image` at [640, 400, 1920, 1200] (original pixels).")
    assert turn.startswith("hermes Zoomed in on `observation_1`"), turn


def serve(command: list[str], cwd: Path, data: Path) -> tuple[subprocess.Popen, str]:
    """The quickstart's serve command on a spare port instead of 8000, up once `/healthz` answers."""
    port = free_port()
    arguments = [str(port) if word == "8000" else word for word in command]
    env = {**os.environ, "TOOLSERVER_DATA_DIR": str(data)}
    process = subprocess.Popen(arguments, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        assert process.poll() is None, "the server exited"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError("the server did not answer /healthz")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()


def test_the_quickstart_serves_a_zoom_and_an_act_turn(tmp_path):
    # The serve command as written (but its port), with this checkout's package in this environment.
    command = SERVE.split()
    assert command[0] == ".venv/bin/toolserver"
    process, url = serve([sys.executable, "-m", "toolserver.cli", *command[1:]], ROOT, tmp_path / "data")
    try:
        check_output(run_program(sys.executable, url, tmp_path / "user"))
    finally:
        stop(process)


@pytest.mark.slow
def test_the_quickstart_as_pasted_in_a_fresh_copy_of_the_checkout(tmp_path):
    """The install command verbatim in a copy of the checkout's files, then `toolserver serve` and the Python from
    that environment: what a newcomer does, with the package installed (not editable) and its weights in it."""
    clone = tmp_path / "clone"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    subprocess.run(["bash", "-c", INSTALL], cwd=clone, check=True, timeout=1200)
    command = SERVE.split()
    env_before = os.environ.pop("PYTHONPATH", None)  # the installed package, not this checkout
    try:
        process, url = serve([str(clone / command[0]), *command[1:]], tmp_path, tmp_path / "data")
    finally:
        if env_before is not None:
            os.environ["PYTHONPATH"] = env_before
    try:
        check_output(run_program(str(clone / ".venv/bin/python"), url, tmp_path / "user"))
    finally:
        stop(process)


def test_the_profile_table_lists_every_builtin_profile_in_order():
    rows = [line for line in page("profiles.md").splitlines() if line.startswith("| `")]
    assert [re.match(r"\| `([^`]+)`", row).group(1) for row in rows] == builtin_profiles()


def test_every_tool_alias_and_format_is_named():
    named = set(re.findall(r"`([A-Za-z0-9_.-]+)`", SITE))
    for name in builtin_profiles():
        profile = PROFILES[name]
        missing = (set(profile.tools) | set(profile.aliases)) - named
        assert not missing, f"the docs never name the tools {sorted(missing)} of profile {name!r}"
    for fmt in FORMATS:
        assert fmt in named or f'"format": "{fmt}"' in SITE, f"the docs never name the call format {fmt!r}"


def test_the_configuration_table_has_every_setting():
    table = page("configuration.md")
    listed = set()
    for row in table.splitlines():
        if row.startswith("| `"):
            listed |= set(re.findall(r"`([A-Z0-9_]+)`", row.split("|")[1]))
    assert listed == {name.upper() for name in Settings.model_fields}


def test_the_layout_section_matches_the_tree():
    layout = section(page("architecture.md"), "Layout")
    for path in re.findall(r"`(toolserver/[^`]*)`", layout):
        assert (ROOT / path).exists(), f"the layout names {path}, which does not exist"
    package = ROOT / "toolserver"
    for entry in sorted(package.iterdir()):
        if entry.name.startswith(("_", ".")):
            continue
        shown = f"toolserver/{entry.name}" + ("/" if entry.is_dir() else "")
        assert f"`{shown}" in layout, f"the layout section does not mention {shown}"
    for sub in NAMED_MODULES:
        for module in sorted((package / sub).glob("*.py")):
            if module.name != "__init__.py":
                assert f"`{module.name}`" in layout, f"the layout section does not name toolserver/{sub}/{module.name}"


def test_every_framework_snippet_is_the_tested_code():
    """docs/frameworks.md shows each `examples/frameworks/*.py` whole, as tests_frameworks runs it,
    and names the framework version it was tested with (the pin in tests_frameworks' requirements)."""
    text = page("frameworks.md")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    for path in sorted((ROOT / "examples" / "frameworks").glob("*.py")):
        assert path.read_text() in blocks, f"docs/frameworks.md does not show {path.name} as it is"
    assert len(blocks) == len(list((ROOT / "examples" / "frameworks").glob("*.py")))
    pins = [line.split("#")[0].strip() for name in ("requirements.txt", "requirements-mcp1.txt")
            for line in (ROOT / "tests_frameworks" / name).read_text().splitlines()]
    for pin in (pin for pin in pins if "==" in pin):
        package, version = re.sub(r"\[.*\]", "", pin).split("==")
        if package not in ("pillow", "numpy", "soundfile"):  # what the frameworks need, not frameworks
            assert f"{package} {version}" in text, f"docs/frameworks.md does not name {package} {version}"
    yaml = (ROOT / "examples" / "verl" / "toolserver_tool_config.yaml").read_text()
    assert yaml in text, "docs/frameworks.md does not show the verl tool config as it is"


def test_every_trainer_snippet_is_the_tested_code():
    """docs/trainers.md shows each `examples/trainers/*.py` whole, as tests_frameworks runs it,
    names the versions it was tested with, and has a row per trainer in its table of what connects how."""
    text = page("trainers.md")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    snippets = sorted((ROOT / "examples" / "trainers").glob("*.py"))
    for path in snippets:
        assert path.read_text() in blocks, f"docs/trainers.md does not show {path.name} as it is"
    assert len(blocks) == len(snippets)
    openenv = (ROOT / "tests_frameworks" / "requirements-openenv.txt").read_text()
    pins = [re.search(r"openenv-core==([\d.]+)", openenv)]
    pins += [re.search(rf'"{package}==([\d.]+)"', (ROOT / "pyproject.toml").read_text())
             for package in ("trl", "transformers")]
    for pin, package in zip(pins, ("openenv-core", "trl", "transformers"), strict=True):
        assert pin is not None and f"{package} {pin.group(1)}" in text, f"the section does not name {package}'s pin"
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    for trainer in ("verl", "verl-tool", "TRL", "OpenEnv clients", "MCP clients", "OpenAI-compatible agents"):
        assert any(row.startswith(trainer) for row in rows), f"no row for {trainer}"


@pytest.mark.ray  # reads the installed Ray's version: the `ray` extra, installed for .ci/run's Ray leg
def test_the_ray_and_kubernetes_sections_match_the_files_they_describe():
    import tomllib
    from importlib.metadata import version

    import yaml

    deploy = page("deploy.md")
    ray_text, k8s_text = section(deploy, "Scale out on Ray"), section(deploy, "Kubernetes")
    for path in re.findall(r"(deploy/[\w./-]+)", ray_text + k8s_text):
        assert (ROOT / path.rstrip(".")).exists(), f"docs/deploy.md names {path}, which does not exist"
    for directory in re.findall(r"kubectl apply -k (\S+)", k8s_text):
        assert (ROOT / directory / "kustomization.yaml").is_file(), directory
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "pip install -c constraints.txt 'vlm-toolserver[ray]'" in ray_text
    assert "pip install -c constraints.txt '.[ray]'" in ray_text
    assert extras["ray"] == [f"ray[serve]=={version('ray')}"]  # pinned, and what the tests ran
    config = yaml.safe_load((ROOT / "deploy" / "ray" / "toolserver.yaml").read_text())
    deployments = {d["name"]: d for d in config["applications"][0]["deployments"]}
    advertised = {json_key for line in re.findall(r"--resources='(\{.*?\})'", ray_text)
                  for json_key in yaml.safe_load(line)}
    assert advertised == {r for d in deployments.values() for r in d["ray_actor_options"]["resources"]}
    ingress = deployments["toolserver"]
    assert f"`max_ongoing_requests` {ingress['max_ongoing_requests']}" in ray_text
    assert f"a bounded queue of {ingress['max_queued_requests']:,}" in ray_text
    bounds = ingress["autoscaling_config"]
    assert f"{bounds['min_replicas']} to {bounds['max_replicas']} by autoscaling" in ray_text
    for name in ("smfanet", "clip", "text"):
        assert f"`{name}` {deployments[name]['ray_actor_options']['num_gpus']:g}" in ray_text
    for setting in re.findall(r"`((?:SR|ENCODER|SESSION|MCP)_[A-Z_]+?)`", ray_text):
        if not setting.endswith("_"):
            assert setting.lower() in Settings.model_fields, setting


def test_the_verifiers_snippet_is_the_tested_code():
    """docs/verifiers.md shows examples/verifiers/rollout.py whole (tests_frameworks/test_verifiers.py runs it) and
    names the verifiers version the leg pins."""
    text = page("verifiers.md")
    assert (ROOT / "examples" / "verifiers" / "rollout.py").read_text() in re.findall(r"```python\n(.*?)```", text,
                                                                                    flags=re.S)
    pin = re.search(r"^verifiers==([\d.]+)", (ROOT / "tests_frameworks" / "requirements-verifiers.txt").read_text(),
                    flags=re.M)
    assert pin is not None and f"`verifiers` {pin.group(1)}" in text
