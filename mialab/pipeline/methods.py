"""The method interface: what a detection method (a config section with its own stages, rules and score
columns) declares, so that the pipeline loops over the registered methods and names none of them.

A method package ``mialab/<package>/`` registers its :class:`Method` in its module ``method.py``
(``METHODS.register(name)(Method(...))``); :data:`METHODS` imports every such module before the first lookup
(:func:`_discover`), so the floors below the methods (``pipeline``, ``core``) find them without importing them
(``tests/test_layers.py``). A method declares:

- ``name``: its config section (absent: not run), and ``needs``: the sections it builds on (a config that has the
  section without them fails at validation; its plan is built after theirs);
- ``plan``: its plan class (:class:`MethodPlan`), which addresses its stages, checks its section's
  cross-references, and gives its score columns (with ``headline``: the headline families it stands for, as the
  schema's default ``evaluation.headline`` names them), score providers and report targets;
- ``layouts`` and ``versions``: its stages' folder parts and code versions (:data:`mialab.pipeline.plan.LAYOUTS`,
  :data:`mialab.pipeline.plan.STAGE_VERSIONS`);
- ``rules``: the rules of its rule file ``rules/<name>.smk``, ``wildcards``: the constraints of its own wildcards;
- ``work`` and ``jobs``: each sized rule's cost model (:mod:`mialab.lm.cost`) and job (GPUs, model, workers:
  :mod:`mialab.pipeline.sizing`), ``launched``: the rules that train through :mod:`mialab.core.launch`;
- ``cluster_checks``: its plan-time checks of the cluster arithmetic (:mod:`mialab.pipeline.cluster_checks`),
  ``engines``: the config keys naming a generation backend, ``trl_vllm``: the keys asking for vLLM beside TRL;
- ``lm_keys``: the keys naming a language model by path or hub id (checked like a model's path);
- ``rehearsal``: its CPU rehearsal swaps (:class:`Swaps`, :mod:`mialab.pipeline.rehearsal`).

Methods come in name order, each after the sections it needs (:func:`methods`): the order of their plans,
checks and score tables.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mialab.core.registry import Registry

if TYPE_CHECKING:
    from mialab.pipeline.plan import Plan

#: The module of a method package that registers its method.
METHOD_MODULE = "method"
#: The package every method package lives in (this module's top-level package).
ROOT_PACKAGE = __name__.split(".")[0]


@functools.cache
def _discover() -> None:
    """Import the ``method`` module of every sub-package of the top-level package that has one (once)."""
    root = Path(__file__).resolve().parents[1]
    for package in sorted(p.name for p in root.iterdir() if (p / f"{METHOD_MODULE}.py").is_file()):
        importlib.import_module(f"{ROOT_PACKAGE}.{package}.{METHOD_MODULE}")


@dataclass(frozen=True)
class Swaps:
    """What a CPU rehearsal (:mod:`mialab.pipeline.rehearsal`) changes in a method's section."""

    shrink: Mapping[str, int] = field(default_factory=dict)  # config keys (``*``: any name) capped at a CPU size
    devices: tuple[str, ...] = ()  # keys naming a device: the CPU
    backends: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # generation section -> (backend, options)
    model_keys: tuple[str, ...] = ()  # keys naming a hub model outside the models section: their stand-ins
    settings: Mapping[str, Any] = field(default_factory=dict)  # settings a rehearsal needs besides sizes
    rescale: Callable[[dict, dict], None] | None = None  # (paper config, shrunk config): ratios the caps must keep


@dataclass(frozen=True)
class Method:
    """One detection method, as the pipeline sees it (module doc)."""

    name: str
    plan: type[MethodPlan]
    needs: tuple[str, ...] = ()
    layouts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    versions: Mapping[str, int] = field(default_factory=dict)
    rules: tuple[str, ...] = ()
    wildcards: Mapping[str, str] = field(default_factory=dict)
    headline: Mapping[str, str] = field(default_factory=dict)
    work: Mapping[str, Callable] = field(default_factory=dict)
    jobs: Mapping[str, Callable] = field(default_factory=dict)
    launched: tuple[str, ...] = ()
    cluster_checks: Callable[[Any], None] | None = None
    engines: tuple[str, ...] = ()
    trl_vllm: Callable[[dict], list[str]] | None = None
    lm_keys: Callable[[dict], Iterable[tuple[str, str]]] | None = None
    rehearsal: Swaps = field(default_factory=Swaps)

    def runs(self, config: dict) -> bool:
        """Whether ``config`` runs the method: its section and the sections it needs are there."""
        return all(config.get(s) for s in (self.name, *self.needs))


#: Every registered method, by name (its config section).
METHODS: Registry[Method] = Registry("method", load=_discover, plural="methods")
register_method = METHODS.register


def methods() -> list[Method]:
    """Every registered method, in name order, each after the methods it needs."""
    return list(_ordered(tuple(METHODS.known())))


@functools.lru_cache(maxsize=None)
def _ordered(names: tuple[str, ...]) -> tuple[Method, ...]:
    pending = {name: METHODS.get(name) for name in names}
    misnamed = [f"{name} (declared {m.name})" for name, m in pending.items() if m.name != name]
    if misnamed:
        raise ValueError(f"methods registered under another name than their section's: {', '.join(misnamed)}")
    ordered: list[Method] = []
    while pending:
        ready = [n for n, m in pending.items() if all(need not in pending for need in m.needs)]
        if not ready:
            raise ValueError(f"methods that need each other: {', '.join(sorted(pending))}")
        ordered.append(pending.pop(min(ready)))
    return tuple(ordered)


def value_at(config: Any, key: str) -> Any:
    """The value at dotted ``key`` of ``config`` (None where a part is absent or null)."""
    node = config
    for part in key.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def rule_file(method: Method) -> str:
    """A method's rule file, relative to the workflow's folder."""
    return f"rules/{method.name}.smk"


class MethodPlan:
    """The base of a method's plan: the pipeline's plan, the config and the method's section (``spec``; None:
    not run), and :meth:`check` of a present section when it is built.

    A plan gives the method's score columns (:meth:`columns`, :class:`mialab.pipeline.columns.Columns`), its
    score providers (:meth:`score_providers`: functions ``(model, dataset, seed) -> path or None`` of a table
    with ``id``, ``label`` and its columns, joined into the results table) and the reports ``rule all`` builds
    (:meth:`targets`)."""

    section: str = ""

    def __init__(self, plan: Plan, config: dict):
        self.plan = plan
        self.config = config
        self.spec = config.get(self.section)
        if self.spec:
            self.check()

    @classmethod
    def build(cls, plan: Plan, config: dict, plans: Mapping[str, MethodPlan]) -> MethodPlan:
        """The plan of ``config``, given the plans already built (those of the sections it needs)."""
        return cls(plan, config)

    def check(self) -> None:
        """Cross-references of the present section (errors name the key); nothing by default."""

    def columns(self) -> list:
        return []

    def score_providers(self) -> list[Callable[[str, str, int], str | None]]:
        return []

    def targets(self) -> list[str]:
        return []


def method_plans(plan: Plan, config: dict) -> dict[str, MethodPlan]:
    """Every method's plan of ``config``, by name, in :func:`methods` order."""
    plans: dict[str, MethodPlan] = {}
    for m in methods():
        plans[m.name] = m.plan.build(plan, config, plans)
    return plans


def method_items(attribute: str) -> Iterator[tuple[Method, Any]]:
    """(method, its ``attribute``) of every method, in :func:`methods` order."""
    for m in methods():
        yield m, getattr(m, attribute)


class WithMethods(Mapping):
    """A table of the pipeline's own entries and every method's (its ``attribute``, a mapping), read as one.
    A lookup of the pipeline's own entry loads no method (a module importing this one may be loading)."""

    def __init__(self, own: Mapping, attribute: str, what: str):
        self.own, self.attribute, self.what = dict(own), attribute, what

    def merged(self) -> dict:
        out = dict(self.own)
        for m, entries in method_items(self.attribute):
            clash = sorted(set(entries) & set(out))
            if clash:
                raise ValueError(f"method {m.name}: {self.what} {clash} declared twice")
            out.update(entries)
        return out

    def __getitem__(self, key):
        if key in self.own:
            return self.own[key]
        return self.merged()[key]

    def __iter__(self):
        return iter(self.merged())

    def __len__(self) -> int:
        return len(self.merged())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.merged()!r})"
