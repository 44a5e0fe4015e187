"""Cluster resources of each job from the plan: the GPUs its code uses, CPUs, host memory, a runtime from the
work it does, and the partition of its kind.

``rules/common.smk`` builds one :class:`Sizing` from the validated config and every method package's cost
model (``WORK``: rule -> what one job computes, :mod:`mialab.lm.cost`) and hands each GPU-capable rule its
``resources:`` (:meth:`Sizing.rule_resources`); a profile's ``set-resources`` (or ``--set-resources``) still
overrides any value per rule. The sizing function (:meth:`Sizing.job`, :meth:`Sizing.resources`):

- **GPUs** are what the job's code uses. Training through ``mialab.core.launch`` (``sft_contaminate``,
  ``rl_contaminate``, and a method's ``launched`` rules): the launcher's world size, ``launch.nproc`` when it is a
  number, else (``auto``: one process per GPU the job gets) a full node (``MIALAB_SLURM_GPUS_PER_NODE``,
  default 8) for a model of at least :data:`LARGE_PARAMS_B` billion parameters and 1 below. vLLM generation
  (paraphrases, a method's rollouts): its ``tensor_parallel_size``. The ``hf`` backend and forward passes
  (``score_baselines``, ``prepare_attack``): 1. Embedding with an encoder (:meth:`Sizing.encoder_job`): 1 when the
  encoder has at least :data:`LARGE_PARAMS_B` billion parameters (it then runs on the GPU), else none. Offline paraphrases and
  every other rule: none. A method's rules: the jobs its Method entry gives (``jobs``, :mod:`mialab.pipeline.methods`;
  each method's ``method`` module says what its jobs use).
- **CPUs**: the job's share of a GPU node's CPUs (``MIALAB_SLURM_GPU_CPUS``, default 32, x its GPUs /
  GPUs per node), and at least the job's own worker processes (e.g. a method's metric or reward workers),
  at most a node's CPUs; a CPU job: its worker processes.
- **Host memory** (MB): :data:`BASE_MEM_MB` + the bf16 weights (2 bytes per parameter) of the job's
  model once per process that loads them (a training job's world, else one) and once more while
  loading, x ``attempt``; at most ``MIALAB_SLURM_GPU_MEM_MB`` (a GPU node's memory, default 256000).
- **Runtime** (minutes): :data:`SAFETY` x the estimated wall time of the job's work (:meth:`Sizing.estimate`:
  the method's cost model priced by ``resources/throughputs.yaml``), at least :data:`MIN_RUNTIME_MIN`
  (a CPU job: :data:`CPU_RUNTIME_MIN`, its work mostly unpriced), x ``attempt``, at most
  ``MIALAB_SLURM_RUNTIME_CAP`` (default 1440: training checkpoints, so a retry after a time-out resumes).
- **Partition**: ``MIALAB_SLURM_PARTITION`` (and ``MIALAB_SLURM_QOS``) for a GPU job,
  ``MIALAB_SLURM_CPU_PARTITION`` (``MIALAB_SLURM_CPU_QOS``) for a CPU job, as the profile's default
  resources give every rule that is not sized; ``gpu_model`` ``MIALAB_SLURM_GPU_MODEL`` (default ``h200``;
  empty: any GPU) and ``constraint`` ``MIALAB_SLURM_CONSTRAINT`` (unset: none) on GPU jobs.

:meth:`Sizing.cost` totals a plan's GPU-hours per rule: requested at the first attempt and estimated; the run
prints it (rules/common.smk), dry runs included.

A model's size: a local folder's safetensors files (bytes / the dtype's width in its config.json), a
``pretrain`` model's architecture, an ``sft`` / ``rl`` model's ``init``, else the ``params_b`` column
of ``resources/model_heads.tsv``; a hub model missing there counts as :data:`UNKNOWN_PARAMS_B`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from mialab.lm.cost import PoolSize, Throughputs, Work, load_throughputs, seconds
from mialab.lm.embeddings import resolve_model_path
from mialab.pipeline.cluster_checks import Architecture, model_table
from mialab.pipeline.methods import method_items

#: Models from this many billion parameters get a full node for training and a GPU for embeddings.
LARGE_PARAMS_B = 1.0
#: Size assumed for a hub model missing from resources/model_heads.tsv (the paper models' scale).
UNKNOWN_PARAMS_B = 8.0
#: Host memory of a job before its model's weights (Python, CUDA context, data), MB.
BASE_MEM_MB = 4000
#: Extra host memory of a GPU job (CUDA context, pinned buffers, NCCL), MB.
GPU_BASE_MEM_MB = 4000
#: A job's first runtime request is this many times its estimated wall time.
SAFETY = 2.0
#: The shortest runtime a GPU job asks for, minutes.
MIN_RUNTIME_MIN = 4
#: The shortest runtime a CPU job asks for, minutes (its work is mostly not in the cost model; no GPU waits).
CPU_RUNTIME_MIN = 120
#: The pipeline's rules that train through mialab.core.launch (world size = their GPUs); see :meth:`Sizing.job`.
TRAINING_RULES = ("sft_contaminate", "rl_contaminate")
#: The pipeline's rules :meth:`Sizing.job` sizes (the others get the profile's default-resources).
OWN_SIZED_RULES = (*TRAINING_RULES, "paraphrase", "paraphrase_pool", "score_baselines", "prepare_attack")
DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
#: The site settings (``MIALAB_SLURM_<name>``) and their defaults, which fit the test SLURM of
#: tests/slurm/boot.sh; profiles/slurm reads them through :func:`site`. ``None``: unset, no default.
SITE = {"ACCOUNT": "mialab", "PARTITION": "mialab", "CPU_PARTITION": "mialab", "QOS": None, "CPU_QOS": None,
        "RUNTIME_CAP": "1440", "GPU_MODEL": "h200", "CONSTRAINT": None, "GPUS_PER_NODE": "8", "GPU_CPUS": "32",
        "GPU_MEM_MB": "256000"}
#: The site settings a SLURM run must be given (their defaults name the test SLURM's partition and account).
REQUIRED_SITE = ("ACCOUNT", "PARTITION", "CPU_PARTITION")


def training_rules() -> tuple[str, ...]:
    """Every rule that trains through mialab.core.launch: the pipeline's and each method's ``launched``."""
    return (*TRAINING_RULES, *(r for _, launched in method_items("launched") for r in launched))


def sized_rules() -> tuple[str, ...]:
    """Every rule :meth:`Sizing.job` sizes: the pipeline's and each method's (its ``jobs``)."""
    return (*OWN_SIZED_RULES, *(r for _, jobs in method_items("jobs") for r in jobs))


def site(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Site setting ``MIALAB_SLURM_<name>`` (:data:`SITE`): the environment's, else its default."""
    value = (os.environ if environ is None else environ).get(f"MIALAB_SLURM_{name}")
    return value if value is not None else SITE[name]


def unset_site_settings(environ: Mapping[str, str] | None = None) -> list[str]:
    """The required site settings (:data:`REQUIRED_SITE`) not set in the environment, and a CPU QOS without the
    GPU jobs' own (a GPU job would take the CPU jobs' QOS from the profile's default resources)."""
    env = os.environ if environ is None else environ
    unset = [f"MIALAB_SLURM_{name}" for name in REQUIRED_SITE if not env.get(f"MIALAB_SLURM_{name}")]
    if env.get("MIALAB_SLURM_CPU_QOS") and not env.get("MIALAB_SLURM_QOS"):
        unset.append("MIALAB_SLURM_QOS (MIALAB_SLURM_CPU_QOS is set)")
    return unset


@dataclass(frozen=True)
class Job:
    """What one job needs: its kind, GPUs, the model whose weights it loads, worker processes."""

    kind: str  # train | generate | forward | metrics | cpu
    gpus: int
    params_b: float = 0.0
    processes: int = 1  # processes that each load the weights
    workers: int = 1  # CPU worker processes of the job's own code


def safetensors_params_b(folder: Path) -> float | None:
    """Billions of parameters of a local model folder (its safetensors bytes / the dtype's width)."""
    files = list(folder.glob("*.safetensors"))
    if not files:
        return None
    cfg = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    return sum(f.stat().st_size for f in files) / DTYPE_BYTES.get(str(dtype), 2) / 1e9


@dataclass
class Sizing:
    """The sizing function over one validated config (module doc); ``work``: every sized rule's cost model
    (rule -> function of this object, the job's model and dataset, its wildcards and the rule's further
    getters' values, giving a :class:`mialab.lm.cost.Work`)."""

    config: dict
    work: Mapping[str, Callable[..., Work]] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    table: Mapping[str, Architecture] | None = None
    throughputs: Throughputs | None = None

    _params: dict = field(default_factory=dict)
    _getters: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.table is None:
            self.table = model_table()
        if self.throughputs is None:
            self.throughputs = load_throughputs()
        missing = sorted(set(sized_rules()) - set(self.work)) if self.work else []
        if missing:
            raise KeyError(f"no cost model for the sized rules {missing} (a method package's cost.WORK)")

    # -- site settings --------------------------------------------------------------------------
    def setting(self, name: str) -> str | None:
        return site(name, self.environ)

    @property
    def gpus_per_node(self) -> int:
        return int(self.setting("GPUS_PER_NODE"))

    # -- models and data: the facts the cost models read ------------------------------------------
    def params_b(self, model: str | None) -> float:
        """Billions of parameters of ``model`` (a configured name, a local folder or a hub id; None: 0)."""
        if not model:
            return 0.0
        if model not in self._params:
            self._params[model] = self._params_b(model)
        return self._params[model]

    def _params_b(self, model: str) -> float:
        spec = self.config["models"].get(model)
        if spec is not None:
            if spec["kind"] in ("pretrain", "mlm"):
                a = spec["architecture"]   # a masked LM has its own vocabulary, a pretrained one the tokenizer's
                vocab = spec.get("vocab_size") or self.config.get("tokenizer", {}).get("vocab_size", 0)
                h, inter = a["hidden_size"], a.get("intermediate_size") or 4 * a["hidden_size"]
                return (a["num_layers"] * (4 * h * h + 3 * h * inter) + 2 * vocab * h) / 1e9
            if spec["kind"] in ("sft", "rl"):
                return self.params_b(spec["init"])
            model = spec["path"]
        local = safetensors_params_b(Path(model)) if Path(model).is_dir() else None
        if local is not None:
            return local
        row = self.table.get(model)
        return row.params_b if row is not None and row.params_b is not None else UNKNOWN_PARAMS_B

    def world(self, params_b: float) -> int:
        """Processes (= GPUs) of a training job through mialab.core.launch."""
        nproc = self.config["launch"]["nproc"]
        if nproc != "auto":
            return int(nproc)
        return self.gpus_per_node if params_b >= LARGE_PARAMS_B else 1

    @property
    def seeds(self) -> int:
        return len(self.config["seeds"])

    def pool(self, dataset: str) -> PoolSize:
        """The size of ``dataset``'s pool (``resources/throughputs.yaml``, by its hub source)."""
        source = self.config["datasets"][dataset]["pool"]["source"]
        return self.throughputs.pool(source.get("hub") if isinstance(source, dict) else None)

    def candidates(self, dataset: str) -> int:
        """Candidates of one seed's split of ``dataset``."""
        return min(2 * self.config["datasets"][dataset]["split"]["n_per_class"], self.pool(dataset).rows)

    def texts(self, dataset: str) -> int:
        """Distinct candidates of every seed's split of ``dataset`` (the seeds draw from one pool)."""
        return min(self.seeds * self.candidates(dataset), self.pool(dataset).rows)

    # -- the sizing function --------------------------------------------------------------------
    def job(self, rule: str, model: str | None = None, dataset: str | None = None) -> Job:
        """What a job of ``rule`` on ``model`` (and ``dataset``) uses (module doc)."""
        cfg = self.config
        if rule in TRAINING_RULES:
            return self.training_job(model)
        if rule in ("paraphrase", "paraphrase_pool"):
            para = cfg["datasets"][dataset]["paraphrase"]
            if para["backend"] == "offline":
                return Job("cpu", 0)
            return Job("generate", self.engine_gpus(para["backend"], para["options"]),
                       self.params_b(para["options"]["model"]))
        if rule in ("score_baselines", "prepare_attack"):   # prepare_attack: its model, the attack's own
            return Job("forward", 1, self.params_b(model))
        for _, jobs in method_items("jobs"):
            if rule in jobs:
                return jobs[rule](self, model, dataset)
        raise KeyError(f"no sizing for rule {rule!r}")

    def training_job(self, model: str | None, workers: int = 1) -> Job:
        """A job that trains ``model`` through mialab.core.launch: a process per GPU of its world, each loading
        the weights; ``workers``: the CPU worker processes of its own code."""
        p = self.params_b(model)
        world = self.world(p)
        return Job("train", world, p, processes=world, workers=workers)

    def encoder_job(self, encoder: str | None, workers: int = 1) -> Job:
        """A job that embeds texts with ``encoder`` (None: none) beside CPU metrics in ``workers`` processes:
        on a GPU from :data:`LARGE_PARAMS_B` billion parameters."""
        p = self.params_b(resolve_model_path(encoder)) if encoder else 0.0
        return Job("metrics", 1 if p >= LARGE_PARAMS_B else 0, p, workers=workers)

    def gpus(self, rule: str, model: str | None = None, dataset: str | None = None) -> int | None:
        """GPUs of a job of ``rule`` for the plan-time checks; None where the rule is not sized or the
        count depends on a model / dataset not given."""
        if rule not in sized_rules() or (rule in training_rules() and model is None) or \
                (rule.startswith("paraphrase") and dataset is None):
            return None
        return self.job(rule, model, dataset).gpus

    @staticmethod
    def engine_gpus(backend: str, options: Mapping) -> int:
        """GPUs of a generation engine: vLLM's tensor_parallel_size, one device for hf."""
        return int(options.get("tensor_parallel_size", 1)) if backend == "vllm" else 1

    def estimate(self, rule: str, job: Job, model: str | None, dataset: str | None,
                 wildcards: Mapping[str, str], **extra) -> float:
        """Estimated wall seconds of a job of ``rule``: its cost model's work (``work[rule]``) priced on its GPUs."""
        if rule not in self.work:
            raise KeyError(f"no cost model for rule {rule!r} (a method package's cost.WORK)")
        return seconds(self.work[rule](self, model, dataset, wildcards=wildcards, **extra), job.gpus, self.throughputs)

    def runtime(self, job: Job, estimate_s: float, attempt: int) -> int:
        """Minutes for attempt ``attempt`` of a job estimated at ``estimate_s`` seconds (module doc)."""
        floor = MIN_RUNTIME_MIN if job.gpus else CPU_RUNTIME_MIN
        base = max(floor, math.ceil(SAFETY * estimate_s / 60))
        return min(base * attempt, int(self.setting("RUNTIME_CAP")))

    def resources(self, job: Job, estimate_s: float, attempt: int = 1) -> dict:
        """Snakemake resources of ``job`` estimated at ``estimate_s`` seconds (attempt ``attempt``): gpu, gpu_model,
        cpus_per_task, mem_mb, runtime, slurm_partition, and qos and constraint where set (module doc)."""
        weights_mb = job.params_b * 2e3  # bf16: 2 bytes per parameter
        node_mem = int(self.setting("GPU_MEM_MB"))
        mem = (BASE_MEM_MB + weights_mb * (job.processes + 1)) * attempt
        out = {"gpu": job.gpus, "gpu_model": "", "cpus_per_task": max(1, job.workers),
               "mem_mb": int(mem), "runtime": self.runtime(job, estimate_s, attempt),
               "slurm_partition": self.setting("CPU_PARTITION")}
        if self.setting("CPU_QOS") or self.setting("QOS"):
            out["qos"] = self.setting("CPU_QOS") or self.setting("QOS")
        if job.gpus:
            node_cpus = int(self.setting("GPU_CPUS"))
            out["gpu_model"] = self.setting("GPU_MODEL")
            share = node_cpus * job.gpus // self.gpus_per_node
            out["cpus_per_task"] = max(1, min(node_cpus, max(share, job.workers)))
            out["mem_mb"] = int(min(mem + GPU_BASE_MEM_MB * attempt, node_mem))
            out["slurm_partition"] = self.setting("PARTITION")
            if self.setting("QOS"):
                out["qos"] = self.setting("QOS")
            if self.setting("CONSTRAINT"):
                out["constraint"] = self.setting("CONSTRAINT")
        return out

    # -- Snakemake ------------------------------------------------------------------------------
    def sized_job(self, rule: str, wildcards: Mapping[str, str]) -> tuple[Job, float]:
        """The job of ``rule`` with ``wildcards`` and its estimated seconds, through the rule's getters."""
        model, dataset, extra = self._getters.get(rule) or self.getters(rule)
        job = self.job(rule, model(wildcards), dataset(wildcards))
        values = {name: get(wildcards) for name, get in extra.items()}
        return job, self.estimate(rule, job, model(wildcards), dataset(wildcards), wildcards, **values)

    def getters(self, rule: str, model: Callable | None = None, dataset: Callable | None = None,
                **extra: Callable) -> tuple:
        """Record how a job of ``rule`` names its model, dataset and the further values its cost model reads
        (functions of its wildcards; default: the wildcards ``model`` and ``dataset``)."""
        self._getters[rule] = (model or (lambda wc: wc.get("model")), dataset or (lambda wc: wc.get("dataset")),
                               extra)
        return self._getters[rule]

    def rule_resources(self, rule: str, model: Callable | None = None, dataset: Callable | None = None,
                       **extra: Callable) -> dict:
        """``resources:`` of ``rule`` for Snakemake: one function of (wildcards, attempt) per resource.
        ``model`` / ``dataset`` map a job's wildcards to its model / dataset (default: the wildcards
        of those names); ``extra`` further values the rule's cost model reads (:meth:`getters`)."""
        self.getters(rule, model, dataset, **extra)

        def value(name):
            def of(wildcards, attempt):
                job, estimate_s = self.sized_job(rule, wildcards)
                return self.resources(job, estimate_s, attempt).get(name)
            return of

        names = ["gpu", "gpu_model", "cpus_per_task", "mem_mb", "runtime", "slurm_partition"]
        names += ["qos"] if self.setting("QOS") or self.setting("CPU_QOS") else []
        names += ["constraint"] if self.setting("CONSTRAINT") else []
        return {name: value(name) for name in names}

    def cost(self, jobs: Iterable[tuple[str, Mapping[str, str]]]) -> pd.DataFrame:
        """GPU-hours of planned jobs ``(rule, wildcards)`` per sized rule: jobs, their kind, GPUs a job, the
        GPU-hours requested at the first attempt and the estimated ones (GPUs x estimated wall time), their
        ratio, and the jobs estimated to run longer than ``MIALAB_SLURM_RUNTIME_CAP`` (``over_cap``: they finish
        only by resuming over their retries); largest request first."""
        rows, cap_s = [], 60 * int(self.setting("RUNTIME_CAP"))
        for rule, wildcards in jobs:
            if rule not in self._getters:
                continue
            job, estimate_s = self.sized_job(rule, wildcards)
            runtime = self.resources(job, estimate_s)["runtime"]
            rows.append({"rule": rule, "kind": job.kind, "gpus": job.gpus, "requested_gpu_h": job.gpus * runtime / 60,
                         "estimated_gpu_h": job.gpus * estimate_s / 3600, "over_cap": estimate_s > cap_s})
        frame = pd.DataFrame(rows, columns=["rule", "kind", "gpus", "requested_gpu_h", "estimated_gpu_h", "over_cap"])
        out = frame.groupby("rule", sort=False).agg(
            jobs=("gpus", "size"), kind=("kind", "first"),
            gpus=("gpus", lambda g: "/".join(map(str, sorted(set(g))))),
            requested_gpu_h=("requested_gpu_h", "sum"), estimated_gpu_h=("estimated_gpu_h", "sum"),
            over_cap=("over_cap", "sum")).reset_index()
        out["ratio"] = (out["requested_gpu_h"] / out["estimated_gpu_h"]).where(out["estimated_gpu_h"] > 0)
        return out.sort_values(["requested_gpu_h", "rule"], ascending=[False, True]).reset_index(drop=True)


def cost_report(table: pd.DataFrame, title: str) -> str:
    """The lines a run prints for :meth:`Sizing.cost`'s table: one per rule, then the totals."""
    lines = [f"mialab: GPU-hours of {title} (mialab/pipeline/sizing.py; throughputs: resources/throughputs.yaml):",
             f"  {'rule':<24}{'kind':<9}{'jobs':>5} {'GPUs':>5} {'requested':>11} {'estimated':>11} {'ratio':>6}"]
    for r in table.itertuples():
        ratio = f"{r.ratio:.1f}" if pd.notna(r.ratio) else "-"
        lines.append(f"  {r.rule:<24}{r.kind:<9}{r.jobs:>5} {r.gpus:>5} {r.requested_gpu_h:>11.1f} "
                     f"{r.estimated_gpu_h:>11.1f} {ratio:>6}")
    lines.append(f"mialab: GPU-hours requested at the first attempt: {table['requested_gpu_h'].sum():,.0f}; "
                 f"estimated: {table['estimated_gpu_h'].sum():,.0f}")
    lines += [f"mialab: warning: {r.over_cap} {r.rule} job(s) estimated to run longer than MIALAB_SLURM_RUNTIME_CAP: "
              "they finish only by resuming from their parts or checkpoints over their retries"
              for r in table.itertuples() if r.over_cap]
    return "\n".join(lines)
