"""Every registered profile, checked from the registry (`toolserver.profiles.PROFILES`): a profile added there is
covered here without editing this file, and a built-in profile module without its own test file
(`tests/profiles/test_<module>.py`) fails."""

import importlib
import pkgutil
from pathlib import Path

import pytest

import toolserver.profiles
from toolserver.arguments import ArgumentStyle
from toolserver.formats import FORMATS
from toolserver.geometry import Coords
from toolserver.profiles import BUILTIN_MODULES, PROFILES, Profile
from toolserver.profiles.base import Alpha
from toolserver.registry import BUILTIN
from toolserver.tools.base import Tool

HERE = Path(__file__).resolve().parent


def module_name(module) -> str:
    return module.__name__.rsplit(".", 1)[-1]


@pytest.fixture(params=list(PROFILES))
def profile(request) -> Profile:
    return PROFILES[request.param]


def test_the_registry_name_is_the_profiles_own(profile):
    assert isinstance(profile, Profile)
    assert PROFILES.get(profile.name) is profile


def test_the_format_is_a_registered_one(profile):
    assert FORMATS.get(profile.format.name) is profile.format
    assert profile.format_name == profile.format.name


def test_the_conventions_are_enum_members(profile):
    assert isinstance(profile.arguments, ArgumentStyle)
    assert isinstance(profile.alpha, Alpha)
    assert isinstance(profile.coords, Coords)


def test_tools_are_listed_under_their_own_names(profile):
    assert profile.tools
    for listed, tool in profile.tools.items():
        assert isinstance(tool, Tool)
        assert tool.name == listed
        assert profile.tool(listed) is tool


def test_every_alias_targets_a_listed_tool(profile):
    for alias, target in profile.aliases.items():
        assert target in profile.tools, f"{profile.name}: alias {alias!r} -> {target!r}"
        assert profile.tool(alias) is profile.tools[target]


@pytest.mark.parametrize("strict", [False, True])
def test_openai_tools_has_one_entry_per_tool(profile, strict):
    entries = profile.openai_tools(strict=strict)
    assert [entry["function"]["name"] for entry in entries] == list(profile.tools)
    for entry in entries:
        assert entry["type"] == "function"
        assert entry["function"]["parameters"]["type"] == "object"


def test_builtin_modules_are_exactly_the_builtin_profiles():
    from_modules = [p.name for module in BUILTIN_MODULES for p in module.PROFILES]
    assert from_modules == [name for name in PROFILES if PROFILES.source(name) == BUILTIN]
    for module in BUILTIN_MODULES:
        assert module.PROFILES, f"{module.__name__} defines no profile"
        for p in module.PROFILES:
            assert PROFILES.get(p.name) is p


def test_every_profile_module_is_a_builtin_module():
    """A module of toolserver/profiles/ that defines `PROFILES` but is left out of BUILTIN_MODULES fails here."""
    for info in pkgutil.iter_modules(toolserver.profiles.__path__):
        module = importlib.import_module(f"toolserver.profiles.{info.name}")
        if hasattr(module, "PROFILES"):
            assert module in BUILTIN_MODULES, f"{module.__name__} defines PROFILES but is not in BUILTIN_MODULES"


@pytest.mark.parametrize("module", BUILTIN_MODULES, ids=module_name)
def test_every_builtin_profile_module_has_its_test_file(module):
    path = HERE / f"test_{module_name(module)}.py"
    assert path.is_file(), f"profile module {module.__name__} has no tests: add {path.relative_to(HERE.parents[1])}"
