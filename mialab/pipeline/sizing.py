"""Cluster resources of each job from the plan: the GPUs its code uses, CPUs, host memory, runtime.

``rules/common.smk`` builds one :class:`Sizing` from the validated config and hands each GPU-capable
rule its ``resources:`` (:meth:`Sizing.rule_resources`); a profile's ``set-resources`` (or
``--set-resources``) still overrides any value per rule. The sizing function (:meth:`Sizing.job`):

- **GPUs** are what the job's code uses. Training through ``mialab.core.launch`` (``sft_contaminate``,
  ``rl_contaminate``, ``adra_train``): the launcher's world size, ``launch.nproc`` when it is a number,
  else (``auto``: one process per GPU the job gets) a full node (``MIALAB_SLURM_GPUS_PER_NODE``,
  default 8) for a model of at least :data:`LARGE_PARAMS_B` billion parameters and 1 below. vLLM
  generation (rollouts, CalibDCD outputs, paraphrases, ``lara_perturbations`` with a ``lara.llm``): its
  ``tensor_parallel_size``. The ``hf`` backend and forward passes (``score_baselines``, ``lara_features``,
  ``lara_baselines``): 1. CalibDCD's training stages (``calibdcd_reference``: DPDLLM's reference
  fine-tuning; ``calibdcd_veilprobe``: VeilProbe's mapping models) and VeilProbe's perturbation
  (``calibdcd_perturbation``: forward passes of its key-token and fill-mask models) run on the one
  device of ``calibdcd.lm.device``: 1, none when it is ``cpu``. Reconstruction metrics (``n_sampling_scores``,
  ``adra_scores``): 1 when the embedding model has at least :data:`LARGE_PARAMS_B` billion parameters (it
  then runs on the GPU), else none. Offline paraphrases, ``lara_perturbations`` without a ``lara.llm`` and
  every other rule: none.
- **CPUs**: the job's share of a GPU node's CPUs (``MIALAB_SLURM_GPU_CPUS``, default 32, x its GPUs /
  GPUs per node), and at least the job's own worker processes (``metrics.workers``,
  ``adra.reward.workers``), at most a node's CPUs; a CPU job: its worker processes.
- **Host memory** (MB): :data:`BASE_MEM_MB` + the bf16 weights (2 bytes per parameter) of the job's
  model once per process that loads them (a training job's world, else one) and once more while
  loading, x ``attempt``; at most ``MIALAB_SLURM_GPU_MEM_MB`` (a GPU node's memory, default 256000).
- **Runtime** (minutes): twice the longest earlier run of the rule (Snakemake benchmark files under
  ``results/benchmarks/<rule>/``), at least :data:`MIN_RUNTIME_MIN`; else :data:`RUNTIME_MIN` of the
  job's kind; x ``attempt``, at most ``MIALAB_SLURM_RUNTIME_CAP`` (default 1440: training checkpoints,
  so a retry after a time-out resumes).
- ``gpu_model`` ``MIALAB_SLURM_GPU_MODEL`` (default ``h200``; empty: any GPU) and ``constraint``
  ``MIALAB_SLURM_CONSTRAINT`` (unset: none) on GPU jobs.

A model's size: a local folder's safetensors files (bytes / the dtype's width in its config.json), a
``pretrain`` model's architecture, an ``sft`` / ``rl`` model's ``init``, else the ``params_b`` column
of ``resources/model_heads.tsv``; a hub model missing there counts as :data:`UNKNOWN_PARAMS_B`.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mialab.lm.embeddings import resolve_model_path
from mialab.pipeline.cluster_checks import Architecture, model_table

#: Models from this many billion parameters get a full node for training and a GPU for embeddings.
LARGE_PARAMS_B = 1.0
#: Size assumed for a hub model missing from resources/model_heads.tsv (the paper models' scale).
UNKNOWN_PARAMS_B = 8.0
#: Host memory of a job before its model's weights (Python, CUDA context, data), MB.
BASE_MEM_MB = 4000
#: Extra host memory of a GPU job (CUDA context, pinned buffers, NCCL), MB.
GPU_BASE_MEM_MB = 4000
#: Runtime of a job of each kind without benchmark files of earlier runs, minutes.
RUNTIME_MIN = {"train": 1440, "generate": 720, "forward": 240, "metrics": 240, "cpu": 120}
#: The shortest runtime asked for from benchmark files, minutes.
MIN_RUNTIME_MIN = 30
#: Rules that train through mialab.core.launch (world size = their GPUs); see :meth:`Sizing.job`.
TRAINING_RULES = ("sft_contaminate", "rl_contaminate", "adra_train")
#: CalibDCD's training stages on one device (mialab.calibdcd.reference, mialab.calibdcd.mapping).
CALIBDCD_TRAINING_RULES = ("calibdcd_reference", "calibdcd_veilprobe")
#: Every rule :meth:`Sizing.job` sizes (the others get the profile's default-resources).
SIZED_RULES = (*TRAINING_RULES, *CALIBDCD_TRAINING_RULES, "n_sampling_rollouts", "adra_eval", "calibdcd_features",
               "calibdcd_perturbation",
               "paraphrase", "paraphrase_pool", "score_baselines", "lara_perturbations", "lara_features",
               "lara_baselines", "n_sampling_scores", "adra_scores")
#: VeilProbe's mapping models' vocabulary (bert-base-uncased's), for their size.
BERT_VOCAB = 30522
DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}


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


def mapping_params_b(mapping: Mapping) -> float:
    """Billions of parameters of one of VeilProbe's mapping models (mialab.calibdcd.mapping; the two are
    trained one after the other): a BERT encoder and decoder of ``num_layers`` layers each
    (self-attention, feed-forward; the decoder's cross-attention too) with their embeddings."""
    h, inter, layers = mapping["hidden_size"], mapping["intermediate_size"], mapping["num_layers"]
    embeddings = (BERT_VOCAB + mapping["max_length"]) * h
    layer = 4 * h * h + 2 * h * inter
    return (2 * embeddings + layers * (2 * layer + 4 * h * h)) / 1e9


@dataclass
class Sizing:
    """The sizing function over one validated config (module doc)."""

    config: dict
    benchmarks: Path = Path("results/benchmarks")
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    table: Mapping[str, Architecture] | None = None

    _params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.table is None:
            self.table = model_table()
        self.benchmarks = Path(self.benchmarks)

    # -- site settings --------------------------------------------------------------------------
    def setting(self, name: str, default: str) -> str:
        return self.environ.get(f"MIALAB_SLURM_{name}", default)

    @property
    def gpus_per_node(self) -> int:
        return int(self.setting("GPUS_PER_NODE", "8"))

    # -- models ---------------------------------------------------------------------------------
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

    # -- the sizing function --------------------------------------------------------------------
    def job(self, rule: str, model: str | None = None, dataset: str | None = None) -> Job:
        """What a job of ``rule`` on ``model`` (and ``dataset``) uses (module doc)."""
        cfg = self.config
        if rule in TRAINING_RULES:
            p = self.params_b(model)
            world = self.world(p)
            workers = cfg["adra"]["reward"]["workers"] if rule == "adra_train" else 1
            return Job("train", world, p, processes=world, workers=workers)
        if rule in CALIBDCD_TRAINING_RULES:
            calib = cfg["calibdcd"]
            gpus = 0 if calib["lm"]["device"] == "cpu" else 1
            if rule == "calibdcd_reference":
                return Job("train", gpus, self.params_b(calib["detectors"]["dpdllm"]["reference_model"]))
            return Job("train", gpus, mapping_params_b(calib["detectors"]["veilprobe"]["mapping"]))
        if rule == "calibdcd_perturbation":
            calib = cfg["calibdcd"]
            vp = calib["detectors"]["veilprobe"]
            largest = max(self.params_b(m) for m in vp.get("key_token_models") or [vp["key_token_model"]])
            return Job("generate", 0 if calib["lm"]["device"] == "cpu" else 1, largest)  # beam searches per token
        if rule in ("n_sampling_rollouts", "adra_eval"):
            ns = cfg["n_sampling"]
            return Job("generate", self.engine_gpus(ns["backend"], ns["backend_options"]), self.params_b(model))
        if rule == "calibdcd_features":
            gen = cfg["calibdcd"]["generation"]
            return Job("generate", self.engine_gpus(gen["backend"], gen["backend_options"]), self.params_b(model))
        if rule in ("paraphrase", "paraphrase_pool"):
            para = cfg["datasets"][dataset]["paraphrase"]
            if para["backend"] == "offline":
                return Job("cpu", 0)
            return Job("generate", self.engine_gpus(para["backend"], para["options"]),
                       self.params_b(para["options"]["model"]))
        if rule == "lara_perturbations":
            llm = cfg["lara"].get("llm")  # the job starts its engine whenever the section is there
            if not llm:
                return Job("cpu", 0)
            return Job("generate", self.engine_gpus(llm["engine"], llm["backend_options"]), self.params_b(llm["model"]))
        if rule in ("score_baselines", "lara_features", "lara_baselines"):
            return Job("forward", 1, self.params_b(model))
        if rule in ("n_sampling_scores", "adra_scores"):
            metrics = cfg["n_sampling"]["metrics"]
            encoder = metrics["embedding_model"]
            p = self.params_b(resolve_model_path(encoder)) if encoder else 0.0
            return Job("metrics", 1 if p >= LARGE_PARAMS_B else 0, p, workers=metrics["workers"])
        raise KeyError(f"no sizing for rule {rule!r}")

    def gpus(self, rule: str, model: str | None = None, dataset: str | None = None) -> int | None:
        """GPUs of a job of ``rule`` for the plan-time checks; None where the rule is not sized or the
        count depends on a model / dataset not given."""
        if rule not in SIZED_RULES or (rule in TRAINING_RULES and model is None) or \
                (rule.startswith("paraphrase") and dataset is None):
            return None
        return self.job(rule, model, dataset).gpus

    @staticmethod
    def engine_gpus(backend: str, options: Mapping) -> int:
        """GPUs of a generation engine: vLLM's tensor_parallel_size, one device for hf."""
        return int(options.get("tensor_parallel_size", 1)) if backend == "vllm" else 1

    def runtime(self, rule: str, kind: str, attempt: int) -> int:
        """Minutes for attempt ``attempt`` of a job (module doc)."""
        longest = longest_benchmark_s(self.benchmarks / rule)
        base = max(MIN_RUNTIME_MIN, math.ceil(2 * longest / 60)) if longest is not None else RUNTIME_MIN[kind]
        return min(base * attempt, int(self.setting("RUNTIME_CAP", "1440")))

    def resources(self, job: Job, rule: str, attempt: int = 1) -> dict:
        """Snakemake resources of ``job`` (attempt ``attempt``): gpu, gpu_model, cpus_per_task, mem_mb,
        runtime, and constraint where set (GPU jobs only)."""
        weights_mb = job.params_b * 2e3  # bf16: 2 bytes per parameter
        node_mem = int(self.setting("GPU_MEM_MB", "256000"))
        mem = (BASE_MEM_MB + weights_mb * (job.processes + 1)) * attempt
        out = {"gpu": job.gpus, "gpu_model": "", "cpus_per_task": max(1, job.workers),
               "mem_mb": int(mem), "runtime": self.runtime(rule, job.kind, attempt)}
        if job.gpus:
            node_cpus = int(self.setting("GPU_CPUS", "32"))
            out["gpu_model"] = self.setting("GPU_MODEL", "h200")
            share = node_cpus * job.gpus // self.gpus_per_node
            out["cpus_per_task"] = max(1, min(node_cpus, max(share, job.workers)))
            out["mem_mb"] = int(min(mem + GPU_BASE_MEM_MB * attempt, node_mem))
            if self.setting("CONSTRAINT", ""):
                out["constraint"] = self.setting("CONSTRAINT", "")
        return out

    def rule_resources(self, rule: str, model: Callable | None = None, dataset: Callable | None = None) -> dict:
        """``resources:`` of ``rule`` for Snakemake: one function of (wildcards, attempt) per resource.
        ``model`` / ``dataset`` map a job's wildcards to its model / dataset (default: the wildcards
        of those names)."""
        model = model or (lambda wc: wc.get("model"))
        dataset = dataset or (lambda wc: wc.get("dataset"))

        def value(name):
            def of(wildcards, attempt):
                job = self.job(rule, model(wildcards), dataset(wildcards))
                return self.resources(job, rule, attempt).get(name)
            return of

        names = ["gpu", "gpu_model", "cpus_per_task", "mem_mb", "runtime"]
        if self.setting("CONSTRAINT", ""):
            names.append("constraint")
        return {name: value(name) for name in names}


@functools.lru_cache(maxsize=None)
def longest_benchmark_s(folder: Path) -> float | None:
    """The longest wall time (column ``s``) in the Snakemake benchmark files under ``folder``."""
    longest = None
    for path in sorted(folder.glob("**/*.tsv")):
        with open(path, newline="") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                s = float(row["s"])
                if math.isfinite(s):
                    longest = s if longest is None else max(longest, s)
    return longest
