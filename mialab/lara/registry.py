"""A tiny named-backend registry shared by the perturbation builders."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """Backends of one kind by name; an unknown name fails listing the known ones."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: make ``fn`` available as backend ``name``."""

        def deco(fn: F) -> F:
            if name in self._items and self._items[name] is not fn:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = fn
            return fn

        return deco

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._items)

    def resolve(self, backend: str | F) -> F:
        """A callable passed as the backend is used as is; a name is looked up."""
        return backend if callable(backend) else self.get(backend)

    def get(self, name: str) -> F:
        """The backend called ``name``."""
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}") from None
