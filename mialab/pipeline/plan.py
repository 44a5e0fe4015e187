"""Content-addressed stage plan: where every stage's output lives and what determined it.

Each stage instance (a pool, a split, the tokenizer, a model, a score table) gets a *key*: the
first 12 hex digits of the SHA-256 of a canonical JSON document holding exactly what determines
the output: the stage's config slice, the keys of its upstream stages (a key fully determines
its output, so the chain of keys is a Merkle chain of the DAG), the content hashes of the raw
local files it reads, and the stage's code version from :data:`STAGE_VERSIONS`. The output
folder is ``results/<stage>/<names...>/<key>/`` with ``manifest.json`` beside the output.

Consequences: changing one dataset's parameters changes only the keys downstream of it, so only
those jobs run; reverting the parameter points back at the folders that already exist, so
nothing is recomputed. Bump a stage's version when its code changes its output.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from mialab.core.integrity import HashCache, content_digest, model_fingerprint
from mialab.data.paraphrase_experiments import APPLY_TO, EXPERIMENTS
from mialab.pipeline.methods import WithMethods

SEED_PART = "seed-{seed}"  # a seed's folder: a part of a split's address, and inside a job over every seed
EPOCH_PART = "epoch-{epoch}"  # an RL run's epoch checkpoint, inside the run's folder
KEY_LENGTH = 12  # hex digits of a stage key

# The one grammar of each shared wildcard (rules/common.smk constrains the rules' wildcards with it).
WILDCARDS: dict[str, str] = {"seed": r"\d+", "key": rf"[0-9a-f]{{{KEY_LENGTH}}}", "epoch": r"[1-9]\d*"}

# Every stage's folder, ``results/<stage>/<parts...>/<key>/``: the parts as wildcard patterns, which a
# rule's output pattern keeps (:meth:`Plan.pattern`) and :meth:`Plan.stage` fills in, so the two cannot drift.
# The pipeline's own stages here; each method's (``<method>/<stage>``) from its Method entry (mialab.pipeline.methods).
OWN_LAYOUTS: dict[str, tuple[str, ...]] = {
    "pools": ("{dataset}",),
    "splits": ("{dataset}", SEED_PART),
    "paraphrases": ("{dataset}", "{of}"),  # of: a seed's split (SEED_PART) or the pool ("pool")
    "leakage": ("{dataset}",),
    "tokenizers": (),
    "models": ("{model}",),
    "rl": (),
    "scores": ("{model}", "{dataset}"),
    "attacks": ("{attack}", "{dataset}"),  # a scoring attack's work on a dataset that no target model changes
    "rehearsal": ("models", "{name}"),
}

# Every stage's code version, in its key: bump it when the stage's code changes its output. A stage
# whose instances differ in kind has one per kind (``models/<kind>``). The pipeline's own stages here; each
# method's from its Method entry (mialab.pipeline.methods).
OWN_VERSIONS: dict[str, int] = {
    "pools": 1,
    "splits": 1,
    "paraphrases": 3,  # 2: hf / vllm paraphrasers on the rollout engine (one generation path, its checks);
    # 3: vLLM seeds per prompt
    "leakage": 3,  # 3: each text embedded alone (no batch neighbours); n_shared, the seeds' overlap
    "tokenizers": 2,  # 2: table corpora read whatever the column dtype (pandas' str dtype read as none)
    "models/pretrain": 1,
    "models/sft": 3,  # 3: the data mixer's draws (models.<sft>.draw), a constant schedule
    "models/mlm": 1,
    "rl": 1,
    "scores": 4,  # 3: the `truncated` column, scoring.truncation; 4: each text its own forward pass
    "attacks": 1,  # a change here changes the scores that read it: bump scores with it
    "rehearsal": 3,  # rule rehearsal_model (bump when a stand-in's content changes); 3: tokenizer corpus read whole
}
LAYOUTS: Mapping[str, tuple[str, ...]] = WithMethods(OWN_LAYOUTS, "layouts", "stage layouts")
STAGE_VERSIONS: Mapping[str, int] = WithMethods(OWN_VERSIONS, "versions", "stage versions")

_FIELD = re.compile(r"\{(\w+)\}")


def fill(pattern: str, **values: Any) -> str:
    """``pattern`` with the wildcards named in ``values`` filled in, the others kept (one pass: a value's
    own wildcards stay wildcards)."""
    return _FIELD.sub(lambda m: str(values[m[1]]) if m[1] in values else m[0], pattern)


# keys of a model's entry that do not change what it trains into: the evaluation's wiring, and
# whether its folder's code may run (a model that loads at all loads the same way)
NOT_DETERMINING = ("reference", "datasets", "trust_remote_code")


def determining(spec: dict, *, also: tuple = ()) -> dict:
    """The keys of a model's entry that determine what it is: all but :data:`NOT_DETERMINING` (and ``also``);
    ``hub_kernels`` only where it is on (other kernels compute other numbers; an entry without it keeps the key
    it always had)."""
    return {k: v for k, v in spec.items() if k not in (*NOT_DETERMINING, *also) and not (k == "hub_kernels" and not v)}

#: datasets.<name>.paraphrase.apply_to -> the paraphrase experiment and what each part of it sees
#: (mialab.data.paraphrase_experiments, which loads no paraphraser)
PARAPHRASE_EXPERIMENTS: dict[str, dict] = {apply_to: {"experiment": experiment, "setting": dict(EXPERIMENTS[experiment])}
                                           for apply_to, experiment in APPLY_TO.items()}


def stable_hash(obj: Any, length: int = KEY_LENGTH) -> str:
    """Hash a JSON-serialisable object independently of dict order."""
    doc = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:length]


def source_fingerprint(source: Any, cache: HashCache | None = None) -> Any:
    """Content hash of a local file or folder named in the config; hub ids hash as their name.

    Paths appear as written in the config (never resolved) and files by their content alone (an
    mtime only decides when :mod:`mialab.core.integrity` hashes again), so a moved or copied checkout
    keeps its keys.
    """
    if isinstance(source, list):
        return [source_fingerprint(s, cache) for s in source]
    if isinstance(source, dict):
        return {k: source_fingerprint(v, cache) if k == "source" else v for k, v in source.items()}
    if not isinstance(source, str):
        return source
    p = Path(source)
    if p.is_file():
        return {"file": source, "sha256": content_digest(p, cache)[:16]}
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file())
        return {"dir": source, "files": {str(f.relative_to(p)): content_digest(f, cache)[:16] for f in files}}
    return {"hub": source}


@dataclass(frozen=True)
class Stage:
    """One stage instance: its key, output folder and the manifest that explains the key."""

    stage: str
    key: str
    dir: str
    manifest: dict = field(hash=False, compare=False)

    def path(self, name: str) -> str:
        """A file inside the stage's output folder."""
        return os.path.join(self.dir, name)


def seed_part(run: Stage, seed: int) -> Stage:
    """Seed ``seed``'s part of a job over every seed: the job's key, ``<run>/seed-<s>/`` as its folder."""
    if int(seed) not in run.manifest["seeds"]:
        raise KeyError(f"seed {seed} is not in {run.dir}; its seeds are {run.manifest['seeds']}")
    return Stage(run.stage, run.key, os.path.join(run.dir, fill(SEED_PART, seed=int(seed))), run.manifest)


class Plan:
    """All stage instances of a config. Pure: reads the config and raw-file hashes, runs nothing."""

    def __init__(self, config: dict, results: str = "results", hash_cache: str | None = None):
        """``hash_cache``: a JSON file that keeps content hashes of large local files between runs
        (:class:`mialab.core.integrity.HashCache`); without one they are kept for this process only."""
        self.config = config
        self.results = results.rstrip("/")
        self.hash_cache = HashCache(hash_cache) if hash_cache else None
        self.built: dict[str, Stage] = {}  # every stage instance with a folder a job builds, by folder

    def stage(self, stage: str, values: dict, determinants: dict, notes: dict | None = None,
              kind: str | None = None) -> Stage:
        """A content-addressed stage instance: ``results/<stage>/<parts...>/<key>/``.

        ``values`` fill the wildcards of the stage's parts (:data:`LAYOUTS`); ``determinants`` must hold
        everything that determines the output (config slice, upstream keys, raw-file fingerprints); the
        stage's code version comes from :data:`STAGE_VERSIONS` (``<stage>/<kind>`` with a ``kind``).
        A method's stages (mialab.pipeline.methods) build their keys with this too. ``notes`` go into
        the manifest but not the key (what the key cannot see, e.g. an unpinned hub revision).
        """
        manifest = {"stage": stage, "version": STAGE_VERSIONS[f"{stage}/{kind}" if kind else stage], **determinants}
        key = stable_hash(manifest)
        folder = self.pattern(stage, **values, key=key)
        if _FIELD.search(folder):
            raise ValueError(f"stage {stage}: {folder} has wildcards left; parts: {LAYOUTS[stage]}")
        return self._built(Stage(stage, key, folder, {**manifest, **(notes or {}), "key": key}))

    def pattern(self, stage: str, *inner: str, **values: Any) -> str:
        """The path pattern of ``inner`` (folders, then a file) in ``stage``'s folders,
        ``results/<stage>/<parts...>/{key}/<inner...>``, the wildcards named in ``values`` filled in:
        a rule's ``output:`` (and what :meth:`stage` builds, so the two cannot drift)."""
        return fill(os.path.join(self.results, stage, *LAYOUTS[stage], "{key}", *inner), **values)

    def seed_patterns(self, stage: str, *inner: str) -> list[str]:
        """:meth:`pattern` of ``inner`` in each seed's folder of a job over every seed (:func:`seed_part`)."""
        return [self.pattern(stage, SEED_PART, *inner, seed=s) for s in self.seeds()]

    def stage_log(self, rule: str, stage: str, *inner: str, suffix: str = ".log", logs: str = "logs",
                  **values: Any) -> str:
        """``rule``'s log pattern: ``results/logs/<rule>/<the wildcard parts of the stage's folder>/{key}<suffix>``
        (a part without wildcards, e.g. ``pool``, is left out; ``inner`` folders after the key, e.g. the epoch)."""
        parts = [p for p in (*LAYOUTS[stage], "{key}", *inner) if _FIELD.search(fill(p, **values))]
        return fill(os.path.join(self.results, logs, rule, *parts), **values) + suffix

    def stage_benchmark(self, rule: str, stage: str, *inner: str, **values: Any) -> str:
        """``rule``'s benchmark pattern, as :meth:`stage_log` under ``results/benchmarks/``."""
        return self.stage_log(rule, stage, *inner, suffix=".tsv", logs="benchmarks", **values)

    def log(self, rule: str, *parts: str) -> str:
        """The log of a rule whose outputs no key addresses: ``results/logs/<rule>[/<parts...>].log``."""
        return os.path.join(self.results, "logs", rule, *parts) + ".log"

    def output(self, *parts: str) -> str:
        """A path no key addresses (tables across stages, reports): ``results/<parts...>``."""
        return os.path.join(self.results, *parts)

    def _built(self, stage: Stage) -> Stage:
        self.built[stage.dir] = stage
        return stage

    # -- data ---------------------------------------------------------------------------------
    def dataset_names(self) -> list[str]:
        return list(self.config["datasets"])

    def seeds(self) -> list[int]:
        """The config's evaluation seeds (a job over every seed covers these)."""
        return [int(s) for s in self.config["seeds"]]

    @functools.lru_cache(maxsize=None)
    def pool(self, dataset: str) -> Stage:
        """The candidate pool: keyed by the content of its local sources, a hub source by its ``revision`` (given,
        or from the config's lock file: mialab.pipeline.lock), a fetched file by its ``sha256``."""
        spec = self.config["datasets"][dataset]["pool"]
        extra = {}
        if "nonmember_source" in spec:
            extra["nonmember_sources"] = source_fingerprint(spec["nonmember_source"], self.hash_cache)
        return self.stage("pools", {"dataset": dataset}, {
            "dataset": dataset, "config": spec, "sources": source_fingerprint(spec["source"], self.hash_cache),
            **extra,
        })

    @functools.lru_cache(maxsize=None)
    def split(self, dataset: str, seed: int) -> Stage:
        """The drawn split. A dataset with a ``paraphrase`` entry records it here (so the split's
        manifest names the setting and every stage keyed on the split follows it); without one
        the key is what it always was."""
        spec = self.config["datasets"][dataset].get("split", {})
        extra = {}
        para = self.paraphrase_spec(dataset)
        if para is not None:
            experiment = PARAPHRASE_EXPERIMENTS[para["apply_to"]]
            extra = {"paraphrase": {**para, **experiment}}
        return self.stage("splits", {"dataset": dataset, "seed": int(seed)}, {
            "dataset": dataset, "seed": int(seed), "config": spec, "upstream": {"pool": self.pool(dataset).key},
            **extra,
        })

    # -- the paraphrased setting (rules/paraphrase.smk) ----------------------------------------
    def paraphrase_spec(self, dataset: str) -> dict | None:
        """``datasets.<dataset>.paraphrase`` with defaults (None: the verbatim setting)."""
        spec = self.config["datasets"][dataset].get("paraphrase")
        if not spec:
            return None
        spec = {"apply_to": "evaluation", "options": {}, **spec}
        if spec["apply_to"] not in PARAPHRASE_EXPERIMENTS:
            raise ValueError(f"datasets.{dataset}.paraphrase.apply_to: {spec['apply_to']!r}; "
                             f"known: {', '.join(PARAPHRASE_EXPERIMENTS)}")
        return spec

    def paraphrase_applies_to(self, dataset: str) -> str | None:
        spec = self.paraphrase_spec(dataset)
        return spec["apply_to"] if spec else None

    @functools.lru_cache(maxsize=None)
    def paraphrased_split(self, dataset: str, seed: int) -> Stage:
        """The split with its texts paraphrased, ids aligned (``apply_to: evaluation``)."""
        spec = self.paraphrase_spec(dataset)
        if spec is None or spec["apply_to"] != "evaluation":
            raise KeyError(f"dataset {dataset!r} asks for no paraphrased evaluation split")
        return self.stage("paraphrases", {"dataset": dataset, "of": fill(SEED_PART, seed=int(seed))}, {
            "dataset": dataset, "seed": int(seed), "config": spec,
            "family": self.config["datasets"][dataset]["pool"]["family"],
            "upstream": {"split": self.split(dataset, seed).key},
        })

    def evaluated_split(self, dataset: str, seed: int) -> Stage:
        """The split every scoring stage reads: the paraphrased one for ``apply_to: evaluation``."""
        if self.paraphrase_applies_to(dataset) == "evaluation":
            return self.paraphrased_split(dataset, seed)
        return self.split(dataset, seed)

    @functools.lru_cache(maxsize=None)
    def paraphrased_pool(self, dataset: str) -> Stage:
        """The pool with its members paraphrased (``apply_to: training``): what models train on."""
        spec = self.paraphrase_spec(dataset)
        if spec is None or spec["apply_to"] != "training":
            raise KeyError(f"dataset {dataset!r} asks for no paraphrased training pool")
        return self.stage("paraphrases", {"dataset": dataset, "of": "pool"}, {
            "dataset": dataset, "config": spec, "family": self.config["datasets"][dataset]["pool"]["family"],
            "upstream": {"pool": self.pool(dataset).key},
        })

    def member_pool(self, dataset: str) -> Stage:
        """The pool whose label-1 rows a contaminating model trains on."""
        if self.paraphrase_applies_to(dataset) == "training":
            return self.paraphrased_pool(dataset)
        return self.pool(dataset)

    # -- leakage and shift checks (rules/leakage.smk) -------------------------------------------
    def leakage_options(self, dataset: str) -> dict:
        from mialab.checks.leakage import leakage_options

        return leakage_options(self.config.get("leakage"), dataset, self.dataset_names())

    @functools.lru_cache(maxsize=None)
    def leakage_run(self, dataset: str) -> Stage:
        """One ``leakage_check`` job: duplicate, blind-baseline and length checks of every seed's
        evaluated split of ``dataset`` (the encoder is loaded once, each distinct text embedded once)."""
        seeds = self.seeds()
        return self.stage("leakage", {"dataset": dataset}, {
            "dataset": dataset, "seeds": seeds, "config": self.leakage_options(dataset),
            "upstream": {"splits": {str(s): self.evaluated_split(dataset, s).key for s in seeds}},
        })

    def leakage(self, dataset: str, seed: int) -> Stage:
        """Seed ``seed``'s part of :meth:`leakage_run` (its tables in ``seed-<s>/``)."""
        return seed_part(self.leakage_run(dataset), seed)

    # -- models -------------------------------------------------------------------------------
    @functools.lru_cache(maxsize=None)
    def tokenizer(self) -> Stage:
        spec = self.config["tokenizer"]
        return self.stage("tokenizers", {}, {
            "config": spec, "sources": source_fingerprint(spec["corpora"], self.hash_cache),
        })

    def model_spec(self, name: str) -> dict:
        try:
            return self.config["models"][name]
        except KeyError:
            raise KeyError(f"unknown model {name!r}; configured models: {', '.join(self.config['models'])}") from None

    @functools.lru_cache(maxsize=None)
    def model(self, name: str) -> Stage:
        """A trained model's folder, or for ``kind: hf`` the given path / hub id (nothing to build)."""
        spec = self.model_spec(name)
        kind = spec["kind"]
        if kind == "hf":
            return self._given_model(spec)
        members = {m["dataset"]: self.member_pool(m["dataset"]).key for m in _as_list(spec.get("members"))}
        if kind == "pretrain":
            upstream = {"tokenizer": self.tokenizer().key, "member_pools": members}
            extra = {"filler": source_fingerprint(spec["filler"], self.hash_cache)}
        elif kind == "sft":
            upstream = {"init": self.model(spec["init"]).key, "member_pools": members}
            extra = {"filler": source_fingerprint(spec["filler"]["source"], self.hash_cache)}
        elif kind == "mlm":
            upstream, extra = {}, {"corpora": source_fingerprint(spec["corpora"], self.hash_cache)}
        elif kind == "rl":
            run, epoch = self.rl_run(name), int(spec["epoch"])
            return self._built(Stage("models", stable_hash({"run": run.key, "epoch": epoch}),
                                     os.path.join(run.dir, fill(EPOCH_PART, epoch=epoch)),
                                     {"kind": "rl", "model": name, "run": run.key, "epoch": epoch}))
        else:
            raise ValueError(f"model {name!r}: unknown kind {kind!r}; known: pretrain, sft, rl, hf, mlm")
        config = determining(spec)
        if "train" in config:  # how often a job checkpoints does not change what it trains into
            config["train"] = {k: v for k, v in config["train"].items() if k != "checkpoint_every"}
        return self.stage("models", {"model": name}, {"model": name, "config": config,
                                                      "upstream": upstream, **extra}, kind=kind)

    def _given_model(self, spec: dict) -> Stage:
        """A ``kind: hf`` model: a local folder keyed by its files' content (config, tokenizer,
        weights: swapped weights change the key), a hub id by its ``revision`` (``unpinned`` in the
        manifest without one)."""
        path = spec["path"]
        kernels = {"hub_kernels": True} if spec.get("hub_kernels") else {}   # what it computes with (determining)
        if os.path.isdir(path):
            files = model_fingerprint(path, self.hash_cache)["files"]
            return Stage("models", stable_hash({"hf": path, "files": files, **kernels}), path,
                         {"kind": "hf", "path": path, "files": files, **kernels})
        return Stage("models", stable_hash({"hf": path, "revision": spec.get("revision"), **kernels}), path,
                     {"kind": "hf", "path": path, "revision": spec.get("revision", "unpinned"), **kernels})

    def unpinned(self) -> list[str]:
        """A warning for every hub model of the config without a ``revision``: its key cannot see a change on the
        hub. (A hub dataset without one stops the run instead, unless its lock entry pins it:
        mialab.pipeline.lock.)"""
        return [f"models.{name}.path: hub model {spec['path']!r} has no revision, so its key cannot see a "
                f"change on the hub; pin it with models.{name}.revision: <commit>"
                for name, spec in self.config["models"].items()
                if spec["kind"] == "hf" and "revision" not in spec and not os.path.isdir(spec["path"])]

    @functools.lru_cache(maxsize=None)
    def rl_run(self, name: str) -> Stage:
        """The GRPO run whose epoch-``epoch`` checkpoint ``kind: rl`` model ``name`` is.

        Everything in the model's entry but ``epoch`` and :data:`NOT_DETERMINING` determines
        the run, so models that differ only in ``epoch`` are checkpoints of one run
        (``results/rl/<key>/epoch-<e>/``).
        """
        spec = self.model_spec(name)
        members = {m["dataset"]: self.member_pool(m["dataset"]).key for m in _as_list(spec.get("members"))}
        run = determining(spec, also=("epoch",))
        upstream = {"init": self.model(spec["init"]).key, "member_pools": members}
        if "split_seed" in spec["members"]:  # only that split's members (absent: the key is what it always was)
            upstream["member_split"] = self.split(spec["members"]["dataset"], spec["members"]["split_seed"]).key
        return self.stage("rl", {}, {
            "config": run, "filler": source_fingerprint(spec["filler"]["source"], self.hash_cache),
            "upstream": upstream,
        })

    def model_path(self, name: str) -> str:
        """What ``from_pretrained`` is given for model ``name``."""
        st = self.model(name)
        return st.dir if st.manifest.get("kind") == "hf" else st.path("model")

    def hub_kernel_paths(self) -> list[str]:
        """What ``from_pretrained`` is given for each model whose config lets it use hub kernels."""
        return [self.model_path(name) for name, spec in self.config["models"].items() if spec.get("hub_kernels")]

    def is_built(self, name: str) -> bool:
        return self.model_spec(name)["kind"] != "hf"

    # -- scores -------------------------------------------------------------------------------
    def reference_of(self, model: str) -> str | None:
        return self.model_spec(model).get("reference")

    @functools.lru_cache(maxsize=None)
    def score_run(self, model: str, dataset: str) -> Stage:
        """One ``score_baselines`` job: ``model`` on every seed's split of ``dataset`` at once.

        Seeds draw from the same pool, so their splits share texts; one job scores each distinct
        text once and writes a table per seed (``seed-<s>/scores.parquet``), instead of one job
        per seed paying the model load and the shared texts again.
        """
        ref = self.reference_of(model)
        seeds = self.seeds()
        upstream = {"model": self.model(model).key,
                    "splits": {str(s): self.evaluated_split(dataset, s).key for s in seeds}}
        if ref is not None:
            upstream["reference_scores"] = self.score_run(ref, dataset).key
        named = {k: self.named_inputs(v) for k, v in self.scoring().items() if isinstance(v, dict)}
        named = {k: v for k, v in named.items() if v}
        return self.stage("scores", {"model": model, "dataset": dataset}, {
            "model": model, "dataset": dataset, "seeds": seeds,
            "config": self.scoring(), "upstream": upstream, **({"inputs": named} if named else {}),
        })

    @functools.lru_cache(maxsize=None)
    def attack_run(self, attack: str, dataset: str, settings: tuple[str, ...]) -> Stage:
        """One ``prepare_attack`` job: scoring attack ``attack``'s work on every distinct text of every seed's
        split of ``dataset`` that depends on the texts and its ``settings`` (keys of ``scoring.<attack>``) but
        on no target model, done once for the dataset's score jobs to read (e.g. a fill-mask model's neighbours
        of each text), on ``scoring.device`` (its rounding is the device's). The scoring code's version is in the
        key, so a bump of ``scores`` redoes it too; every determinant is also one of the score jobs' (the
        ``scoring`` section, the splits, the models and files it names), so their keys change with it. The job
        reads its settings and device from the manifest, so it computes with nothing its key lacks."""
        section = self.scoring()[attack]
        config = {k: section[k] for k in settings}
        named = self.named_inputs(config)
        return self.stage("attacks", {"attack": attack, "dataset": dataset}, {
            "attack": attack, "dataset": dataset, "seeds": self.seeds(), "config": config,
            "device": self.scoring()["device"],
            "upstream": {"splits": {str(s): self.evaluated_split(dataset, s).key for s in self.seeds()}},
            "scores_version": STAGE_VERSIONS["scores"], **({"inputs": named} if named else {}),
        })

    def named_inputs(self, section: Any) -> Any:
        """What the models and files a settings section names hold: a configured model's key, a local file's
        content (:func:`source_fingerprint`: a path, or a corpus's ``source``), None for the rest, so that a
        retrained model or an edited file changes the key of the outputs that read it."""
        if isinstance(section, dict):
            if "source" in section:
                return source_fingerprint(section["source"], self.hash_cache)
            found = {k: self.named_inputs(v) for k, v in section.items()}
            return {k: v for k, v in found.items() if v} or None
        if isinstance(section, list):
            found = [self.named_inputs(v) for v in section]
            return found if any(found) else None
        if isinstance(section, str):
            if section in self.config["models"]:
                return self.model(section).key
            if Path(section).exists():
                return source_fingerprint(section, self.hash_cache)
        return None

    def scoring(self) -> dict:
        """The ``scoring`` section as score jobs read it: a settings sub-section of a method that
        ``scoring.methods`` does not list is left out (it decides nothing, so adding a method leaves the keys
        and parameters of configs that do not run it as they were)."""
        section = self.config["scoring"]
        return {k: v for k, v in section.items() if not isinstance(v, dict) or k in section["methods"]}

    def scores(self, model: str, dataset: str, seed: int) -> Stage:
        """Seed ``seed``'s part of :meth:`score_run`: its key, and ``seed-<s>/`` as its folder."""
        return seed_part(self.score_run(model, dataset), seed)

    def evaluated_pairs(self, datasets: list[str] | None = None) -> list[tuple[str, str]]:
        """(model, dataset) pairs in the results table: each model's ``datasets`` (default all)."""
        wanted = datasets or self.dataset_names()
        pairs = []
        for model, spec in self.config["models"].items():
            for ds in spec.get("datasets", self.dataset_names()):
                if ds in wanted:
                    pairs.append((model, ds))
        return pairs


def _as_list(x: Any) -> list:
    if x is None:
        return []
    return x if isinstance(x, list) else [x]


def no_member_models(models: dict) -> list[str]:
    """The configured models no member of any dataset reached, in config order: a ``pretrain`` model without
    members (the tiny world's ``control``), and an ``sft`` model without members or an ``rl`` model whose
    ``members.repeats`` is 0, started from such a model. Their AUROC should be 50% on every split; a given
    (``hf``) model is never one, since what it was trained on is not known here."""
    def clean(name: str) -> bool:
        spec = models[name]
        if spec["kind"] == "pretrain":
            return not _as_list(spec.get("members"))
        if spec["kind"] == "sft":
            return not spec.get("members") and clean(spec["init"])
        if spec["kind"] == "rl":
            return spec["members"].get("repeats", 1) == 0 and clean(spec["init"])
        return False

    return [name for name in models if clean(name)]
