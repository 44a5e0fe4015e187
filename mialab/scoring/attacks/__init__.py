"""Scoring attacks: membership scores of one model on each text that need more than the shared forward pass
of the passive baselines (:mod:`mialab.scoring.baselines`) — a backward pass, a second forward with other
tokens, or data besides the text. They run in the same ``score_baselines`` job, as columns of its tables.

An attack is one module of this package that registers an :class:`Attack` in :data:`ATTACKS` (the MIMIR model:
one base class, each attack a short module, chosen by name in ``scoring.methods``). It declares its settings
section ``scoring.<name>`` (the schema holds its defaults), the files it reads besides the splits
(:meth:`Attack.inputs`, rule inputs), the extra forward and backward passes a text costs
(:mod:`mialab.scoring.cost`; other work, such as a model the attack trains, :meth:`Attack.work`), and
:meth:`Attack.score`. A configured model its settings name as ``model`` joins the score job's key
(:meth:`mialab.pipeline.plan.Plan.score_run`). Convention, as for every score: higher = more likely a
member; an attack whose peer implementation reports the opposite says so.

An attack whose work on a text depends on the text and its settings but on no target model (the neighbourhood
attack's neighbours) declares the settings that work reads (:attr:`Attack.prepared_by`) and does it in
:meth:`Attack.prepare`: rule ``prepare_attack`` runs it once per dataset (every distinct text of every seed's
split: :meth:`mialab.pipeline.plan.Plan.attack_run`) into a table every score job of the dataset reads
(:meth:`Texts.prepared`), instead of each (model, dataset) job redoing it.

A sub-section of ``scoring`` named after a method the config does not run decides nothing
(:meth:`mialab.pipeline.plan.Plan.scoring`): adding an attack leaves other configs' keys and results alone.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mialab.core.registry import Registry
from mialab.lm.logprobs import TokenStats


@dataclass
class Texts:
    """What an attack scores: the distinct ``texts`` of one (model, dataset) job (ids ``ids``), with the
    shared pass's :class:`TokenStats` (``stats``), the loaded ``model`` and ``tokenizer``, the ``scoring``
    section and the attack's input files by name (``inputs``: :meth:`Attack.inputs`). ``split_ids``: every id
    of every seed's split (data an attack reads besides them must hold none)."""

    model: Any
    tokenizer: Any
    texts: list[str]
    ids: list[str]
    stats: list[TokenStats]
    scoring: dict
    inputs: dict[str, Any] = field(default_factory=dict)
    split_ids: frozenset = frozenset()

    def settings(self, name: str) -> dict:
        return self.scoring[name]

    def known_nonmembers(self, key: str = "pool") -> pd.DataFrame:
        """The non-members of the pool file ``inputs[key]`` that are in no seed's split (``id``, ``text``, in pool
        order): data an attack may learn from, never an evaluated candidate nor its label."""
        pool = pd.read_parquet(self.inputs[key], columns=["id", "text", "label"])
        outside = ~pool["id"].astype(str).isin(set(map(str, self.split_ids)))
        return pool[(pool["label"] == 0) & outside][["id", "text"]].reset_index(drop=True)

    def prepared(self, name: str) -> pd.DataFrame:
        """Attack ``name``'s prepared table (:meth:`Attack.prepare`, input ``prepared``), one row per text of
        this job in its order; a text it lacks, or holds with another text, is an error naming the file."""
        path = self.inputs.get("prepared")
        if path is None:
            raise ValueError(f"method {name}: no prepared table among its inputs (rule prepare_attack writes it)")
        table = pd.read_parquet(path).set_index("id")
        missing = [i for i in self.ids if i not in table.index]
        if missing:
            raise ValueError(f"{path}: no row for {len(missing)} text(s) of this job, e.g. id {missing[0]!r}")
        table = table.loc[list(self.ids)]
        changed = [i for i, a, b in zip(self.ids, table["text"], self.texts) if a != b]
        if changed:
            raise ValueError(f"{path}: id {changed[0]!r} holds another text than this job's split")
        return table.reset_index()

    @functools.cached_property
    def rows(self) -> list[list[int]]:
        """Each text's scored tokens (tokenized once, for every attack of the job): its first ``max_length`` under
        ``truncation: truncate``, all of them else."""
        if self.scoring["truncation"] == "truncate":
            return self.tokenizer(self.texts, truncation=True, max_length=self.scoring["max_length"])["input_ids"]
        return self.tokenizer(self.texts)["input_ids"]


class Attack:
    """A scoring attack (module doc). ``name``: its ``scoring.methods`` entry and settings section;
    ``forwards``: forward passes a text costs beyond the shared one; ``backward``: whether it backpropagates."""

    name: str = ""
    forwards: int = 0
    backward: bool = False

    def passes(self, scoring: dict) -> int:
        """Forward passes a text costs beyond the shared one under the ``scoring`` section (default ``forwards``;
        an attack whose count is a setting reads it here)."""
        return self.forwards

    def check(self, scoring: dict) -> str | None:
        """What is wrong with the ``scoring`` section for this attack (naming the key), or None."""
        return None

    def inputs(self, plan, dataset: str) -> dict[str, str | list[str]]:
        """Files the job reads besides the splits and the model (rule inputs, by name)."""
        return {}

    #: keys of its settings that its per-dataset work reads (module doc); empty: it has none
    prepared_by: tuple[str, ...] = ()

    def prepare_inputs(self, plan, dataset: str) -> dict[str, str]:
        """Files :meth:`prepare` reads besides the splits (rule inputs, by name)."""
        return {}

    def prepare_model(self, settings: dict) -> str | None:
        """The model :meth:`prepare` runs (a configured name, a folder or a hub id; sizes its job), or None."""
        return None

    def prepare_work(self, facts, dataset: str) -> dict:
        """The work of :meth:`prepare` on ``dataset``'s texts: :class:`mialab.lm.cost.Work` fields (its model's
        ``params_b`` and ``dtype`` among them)."""
        return {}

    def prepare(self, texts: list[str], ids: list[str], settings: dict, inputs: dict,
                device: str = "cpu") -> pd.DataFrame:
        """The per-dataset table (``id``, ``text`` and the attack's own columns) of ``texts`` under ``settings``
        (``scoring.<name>``), reading ``inputs`` (:meth:`prepare_inputs`), on ``device``."""
        raise NotImplementedError(f"scoring attack {self.name} prepares nothing")

    def prepared_run(self, plan, dataset: str):
        """The ``prepare_attack`` job of ``dataset`` (:meth:`mialab.pipeline.plan.Plan.attack_run`)."""
        return plan.attack_run(self.name, dataset, self.prepared_by)

    def work(self, facts, dataset: str) -> dict:
        """Work a job does for the attack beyond its ``forwards`` and ``backward`` (a model of its own loaded,
        trained and run): :class:`mialab.lm.cost.Work` fields to add (:mod:`mialab.scoring.cost`)."""
        return {}

    def score(self, texts: Texts) -> np.ndarray:
        raise NotImplementedError


@functools.cache
def _discover() -> None:
    for module in sorted(p.stem for p in Path(__file__).parent.glob("*.py") if p.stem != "__init__"):
        importlib.import_module(f"{__name__}.{module}")


#: Every scoring attack, by name.
ATTACKS: Registry[Attack] = Registry("scoring attack", load=_discover, plural="attacks")


def register(cls: type[Attack]) -> type[Attack]:
    """Class decorator: register an instance of ``cls`` under its ``name``."""
    ATTACKS.register(cls.name)(cls())
    return cls
