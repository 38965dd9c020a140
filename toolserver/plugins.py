"""Environments as plugins: a separately installed package adds profiles and call formats through the Python
entry-point group `toolserver.environments`.

An entry point names an `Environment` object, e.g. in the plugin's `pyproject.toml`:

    [project.entry-points."toolserver.environments"]
    grid = "toolserver_grid:ENVIRONMENT"

`load_plugins()` (called when a `Core` is built, so by `serve` at start-up) loads each one once, registers its
formats, then its profiles, remembering where each came from (`/v1/profiles` lists it). A plugin that fails to
load or register leaves nothing behind and raises `PluginError` naming it; `serve` stops with that message.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points

from toolserver.formats import FORMATS, CallFormat, register_format
from toolserver.profiles import PROFILES, Profile, register_profile

GROUP = "toolserver.environments"


@dataclass(frozen=True)
class Environment:
    """What one research environment adds: its call formats (registered first) and its profiles."""

    name: str
    profiles: Sequence[Profile] = ()
    formats: Sequence[CallFormat] = field(default_factory=tuple)


class PluginError(RuntimeError):
    """A plugin that could not be loaded or registered; the message names it."""


_lock = threading.Lock()
_loaded: dict[str, str] = {}  # entry point "name = value" -> source label, once registered


def load_plugins() -> dict[str, str]:
    """Register every installed environment not registered yet; returns what is loaded (entry point -> source)."""
    with _lock:
        for ep in entry_points(group=GROUP):
            ident = f"{ep.name} = {ep.value}"
            if ident not in _loaded:
                _loaded[ident] = _register(ep)
        return dict(_loaded)


def _source(ep: EntryPoint) -> str:
    dist = ep.dist
    where = f"{dist.name} {dist.version}" if dist is not None else "an unnamed distribution"
    return f"plugin {where} (entry point {ep.name} = {ep.value})"


def _register(ep: EntryPoint) -> str:
    source = _source(ep)
    done_formats: list[str] = []
    done_profiles: list[str] = []
    try:
        environment = ep.load()
        if not isinstance(environment, Environment):
            raise TypeError(f"it must name a toolserver.plugins.Environment, not {type(environment).__name__}")
        for fmt in environment.formats:
            register_format(fmt, source)
            done_formats.append(fmt.name)
        for profile in environment.profiles:
            register_profile(profile, source)
            done_profiles.append(profile.name)
    except Exception as exc:
        for name in done_profiles:
            PROFILES.unregister(name)
        for name in done_formats:
            FORMATS.unregister(name)
        raise PluginError(f"toolserver plugin {ep.name!r} ({source}) failed to load: "
                          f"{type(exc).__name__}: {exc}") from exc
    return source


def forget_plugins() -> None:
    """Unregister everything plugins added (tests that install a plugin leave the registries as they were)."""
    with _lock:
        for name in [n for n in PROFILES if PROFILES.source(n).startswith("plugin ")]:
            PROFILES.unregister(name)
        for name in [n for n in FORMATS if FORMATS.source(n).startswith("plugin ")]:
            FORMATS.unregister(name)
        _loaded.clear()
