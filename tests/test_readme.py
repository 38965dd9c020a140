"""The README's tables and layout section against the tree and the registries: a profile, tool, call format,
setting or module added without its line in the README fails here."""

from __future__ import annotations

import re
from pathlib import Path

from toolserver.config import Settings
from toolserver.formats import FORMATS
from toolserver.profiles import PROFILES
from toolserver.registry import BUILTIN

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
# Packages whose every module the layout section names: the ones that grow with environments and features.
NAMED_MODULES = ("core", "profiles", "formats", "tools", "stores", "api", "api/routers")


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def builtin_profiles() -> list[str]:
    return [name for name in PROFILES if PROFILES.source(name) == BUILTIN]


def test_the_profile_table_lists_every_builtin_profile_in_order():
    rows = [line for line in section("Profiles").splitlines() if line.startswith("| `")]
    assert [re.match(r"\| `([^`]+)`", row).group(1) for row in rows] == builtin_profiles()


def test_every_tool_alias_and_format_is_named():
    named = set(re.findall(r"`([A-Za-z0-9_.-]+)`", README))
    for name in builtin_profiles():
        profile = PROFILES[name]
        missing = (set(profile.tools) | set(profile.aliases)) - named
        assert not missing, f"README never names the tools {sorted(missing)} of profile {name!r}"
    for fmt in FORMATS:
        assert fmt in named or f'"format": "{fmt}"' in README, f"README never names the call format {fmt!r}"


def test_the_configuration_table_has_every_setting():
    table = section("Configuration")
    listed = set()
    for row in table.splitlines():
        if row.startswith("| `"):
            listed |= set(re.findall(r"`([A-Z0-9_]+)`", row.split("|")[1]))
    assert listed == {name.upper() for name in Settings.model_fields}


def test_the_layout_section_matches_the_tree():
    layout = section("Layout")
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
    """"Use it from your framework" shows each `examples/frameworks/*.py` whole, as tests_frameworks runs it,
    and names the framework version it was tested with (the pin in tests_frameworks' requirements)."""
    text = section("Use it from your framework")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    for path in sorted((ROOT / "examples" / "frameworks").glob("*.py")):
        assert path.read_text() in blocks, f"README's framework section does not show {path.name} as it is"
    assert len(blocks) == len(list((ROOT / "examples" / "frameworks").glob("*.py")))
    pins = [line.split("#")[0].strip() for name in ("requirements.txt", "requirements-mcp1.txt")
            for line in (ROOT / "tests_frameworks" / name).read_text().splitlines()]
    for pin in (pin for pin in pins if "==" in pin):
        package, version = re.sub(r"\[.*\]", "", pin).split("==")
        if package not in ("pillow", "numpy", "soundfile"):  # what the frameworks need, not frameworks
            assert f"{package} {version}" in text, f"README's framework section does not name {package} {version}"
    yaml = (ROOT / "examples" / "verl" / "toolserver_tool_config.yaml").read_text()
    assert yaml in text, "README's framework section does not show the verl tool config as it is"


def test_every_trainer_snippet_is_the_tested_code():
    """"Use it from OpenEnv, TRL, SkyRL" shows each `examples/trainers/*.py` whole, as tests_frameworks runs it,
    names the versions it was tested with, and has a row per trainer in its table of what connects how."""
    text = section("Use it from OpenEnv, TRL, SkyRL")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    snippets = sorted((ROOT / "examples" / "trainers").glob("*.py"))
    for path in snippets:
        assert path.read_text() in blocks, f"README's trainer section does not show {path.name} as it is"
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


def test_the_ray_and_kubernetes_sections_match_the_files_they_describe():
    import tomllib
    from importlib.metadata import version

    import yaml

    ray_text, k8s_text = section("Scale out on Ray"), section("Kubernetes")
    for path in re.findall(r"(deploy/[\w./-]+)", ray_text + k8s_text):
        assert (ROOT / path.rstrip(".")).exists(), f"the README names {path}, which does not exist"
    for directory in re.findall(r"kubectl apply -k (\S+)", k8s_text):
        assert (ROOT / directory / "kustomization.yaml").is_file(), directory
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "pip install -c constraints.txt 'toolserver[ray]'" in ray_text
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
