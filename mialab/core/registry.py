"""One small registry type for everything chosen by name from the config (dataset families,
rewards, rollout backends, ...): register with a decorator, list the known names, and fail on an
unknown name with the list of known ones."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> objects of one ``kind`` (used in messages, e.g. "dataset family").

    ``load`` (optional) imports the modules that register entries, before any lookup; ``plural``
    (optional) names them in the error ("known families: ..." instead of "known: ...")."""

    def __init__(self, kind: str, load: Callable[[], None] | None = None, plural: str | None = None):
        self.kind = kind
        self.plural = plural
        self._load = load
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: make the decorated object available as ``name``; a second, different one fails."""

        def deco(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._entries[name] = obj
            return obj

        return deco

    def known(self) -> list[str]:
        """Every registered name, sorted."""
        if self._load is not None:
            self._load()
        return sorted(self._entries)

    def get(self, name: str) -> T:
        """The entry called ``name``; an unknown name fails with the list of known ones."""
        known = self.known()
        try:
            return self._entries[name]
        except KeyError:
            listed = f"known {self.plural}" if self.plural else "known"
            raise KeyError(f"unknown {self.kind} {name!r}; {listed}: {', '.join(known)}") from None

    def resolve(self, entry: str | T) -> T:
        """A callable passed as the entry is used as is; a name is looked up."""
        return entry if callable(entry) else self.get(entry)
