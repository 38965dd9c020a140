"""A named registry that remembers where each entry came from: the profiles and the call formats are kept in
two of these, filled with the built-in ones at import and with plugins' at start-up (`toolserver.plugins`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

BUILTIN = "builtin"


class RegistryError(ValueError):
    """An entry that cannot be registered: a name taken already, or a definition that does not check."""


@dataclass(frozen=True)
class Registered(Generic[T]):
    item: T
    source: str  # "builtin", or the plugin's distribution and entry point


class Registry(Generic[T]):
    """Entries by name, in registration order; a name is registered once."""

    def __init__(self, kind: str, name_of: Callable[[T], str]):
        self.kind = kind
        self._name_of = name_of
        self._entries: dict[str, Registered[T]] = {}

    def register(self, item: T, source: str = BUILTIN) -> T:
        name = self._name_of(item)
        if name in self._entries:
            raise RegistryError(f"{self.kind} {name!r} is registered already (by {self._entries[name].source})")
        self._entries[name] = Registered(item, source)
        return item

    def unregister(self, name: str) -> None:
        """Forget an entry (tests that load a plugin, then leave the registry as they found it)."""
        self._entries.pop(name, None)

    def get(self, name: str) -> T | None:
        found = self._entries.get(name)
        return found.item if found is not None else None

    def source(self, name: str) -> str:
        return self._entries[name].source

    def names(self) -> list[str]:
        return list(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        return ((name, entry.item) for name, entry in self._entries.items())

    def values(self) -> Iterator[T]:
        return (entry.item for entry in self._entries.values())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, name: str) -> T:
        return self._entries[name].item
