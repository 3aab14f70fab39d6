"""``Registry``: everything chosen by name (schedulers, routers, scenarios). With ``plugins``, the first lookup
imports the modules that entry point group names, which register their entries.

    SCHEDULERS = Registry("scheduler", plugins="llmsched.policies")
    SCHEDULERS.register("fcfs", FCFSPolicy)      # or as a decorator
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar, overload

T = TypeVar("T")


class Registry(Generic[T]):
    """Names to objects of one ``kind``, in registration order; names are unique."""

    def __init__(self, kind: str, plugins: str | None = None) -> None:
        self.kind = kind
        self.plugins = plugins
        self._entries: dict[str, T] = {}
        self._plugins_loaded = plugins is None

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...
    @overload
    def register(self, name: str, obj: T) -> T: ...

    def register(self, name: str, obj: T | None = None) -> T | Callable[[T], T]:
        """Register ``obj`` under ``name`` (without ``obj``: a decorator that does). Another object under a taken
        name is a ``ValueError``; the same object again is a no-op (a module imported twice)."""

        def add(value: T) -> T:
            if not isinstance(name, str) or not name:
                raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
            old = self._entries.get(name)
            if old is not None and old is not value:
                raise ValueError(f"{self.kind} {name!r} is already registered ({old!r})")
            self._entries[name] = value
            return value

        return add if obj is None else add(obj)

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=self.plugins or ""):
            ep.load()

    def get(self, name: str) -> T:
        """The entry called ``name``; ``ValueError`` listing the registered names otherwise."""
        if name not in self._entries:
            self._load_plugins()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise ValueError(f"unknown {self.kind} {name!r}; available {self.kind}s: {self._listing()}") from None

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        self._load_plugins()
        return list(self._entries)

    def _listing(self) -> str:
        if self._entries:
            return ", ".join(self._entries)
        hint = f" (install llmsched, whose entry points of {self.plugins!r} register them)" if self.plugins else ""
        return "none registered" + hint

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            self._load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"
