"""What a job's work costs on a GPU: the work in units the throughput table prices, and its wall time.

Each method package says what one job of each of its GPU-capable rules computes (a ``cost.py`` beside its
plan, ``WORK``: rule -> function of the plan's facts and the job's model, dataset and wildcards, giving a
:class:`Work`); :func:`seconds` prices it with ``resources/throughputs.yaml`` (:class:`Throughputs`: every
figure with its GPU, date and source, measured or not). ``mialab.pipeline.sizing`` turns the estimate into
the job's runtime request and the GPU-hours a dry run prints.

The pricing, per job on ``gpus`` GPUs (one GPU's rates when ``gpus`` is 0, times ``cpu_slowdown``):

- fixed: the job's start, each model's weights read (bf16 bytes at ``model_load_gb_per_s``; a trained
  model's written out too), each vLLM engine's start;
- batched forward tokens at ``forward_tokens_per_s``; texts scored one a pass at ``score_tokens_per_s``, but
  no faster than one latency-bound pass each (``score_short_tokens_per_s``); latency-bound passes (decode
  steps of a small batch) at that pass time;
- generated tokens: vLLM at ``vllm_generate_tokens_per_s`` (in a training process:
  ``vllm_colocate_tokens_per_s``), split over the engine's GPUs; transformers ``generate`` at
  ``hf_generate_tokens_per_s`` times its batch's share of the measured batch;
- training FLOPs (:func:`train_flops`) at ``train_flops_per_s`` over the job's GPUs;
- CPU work (reconstruction metrics) over the job's worker processes.

Rates scale with the model: a model of ``p`` billion parameters runs at the reference model's rate x
``reference_params_b / p``; float32 work at ``fp32_flops_per_s / train_flops_per_s`` of it. Every text is
priced at the length the config bounds it by (a task's ``max_new_tokens``, scoring's ``max_length``), so the
estimate errs high for short texts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

from mialab.core.paths import RESOURCES

THROUGHPUTS = RESOURCES / "throughputs.yaml"
#: Keys every throughput row gives, so no figure comes without its GPU, date and source.
ROW_KEYS = ("value", "what", "gpu", "date", "source", "measured")
#: Keys every pool row gives.
POOL_KEYS = ("rows", "members", "tokens", "source")
FP32 = ("float32", "fp32")


@dataclass(frozen=True)
class PoolSize:
    """Rows, members (label 1) and mean tokens of a candidate pool's text, and where the figures come from."""

    rows: int
    members: int
    tokens: int
    source: str


@dataclass(frozen=True)
class Throughputs:
    """``resources/throughputs.yaml``: per-GPU rates for a model of ``reference_params_b`` billion parameters,
    and the pools' sizes."""

    reference_params_b: float
    rows: dict
    pools: dict

    def __getitem__(self, name: str) -> float:
        return float(self.rows[name]["value"])

    def pool(self, hub_id: str | None) -> PoolSize:
        """The size of the pool read from hub dataset ``hub_id`` (``default`` for one not listed, or none)."""
        row = self.pools.get(hub_id) or self.pools["default"]
        return PoolSize(int(row["rows"]), int(row["members"]), int(row["tokens"]), str(row["source"]))

    @property
    def pass_s(self) -> float:
        """One latency-bound forward pass: a short text scored alone."""
        row = self.rows["score_short_tokens_per_s"]
        return float(row["text_tokens"]) / float(row["value"])


@functools.lru_cache(maxsize=None)
def load_throughputs(path: str | Path = THROUGHPUTS) -> Throughputs:
    """The throughput table; a row without its value, GPU, date, source or ``measured`` is an error naming it."""
    doc = yaml.safe_load(Path(path).read_text())
    for name, row in doc["throughputs"].items():
        missing = [k for k in ROW_KEYS if k not in row]
        if missing:
            raise ValueError(f"{path}: throughput {name!r} lacks {missing} (every figure names its GPU, date and source)")
    for name, row in doc["pools"].items():
        missing = [k for k in POOL_KEYS if k not in row]
        if missing:
            raise ValueError(f"{path}: pool {name!r} lacks {missing}")
    return Throughputs(float(doc["reference_params_b"]), doc["throughputs"], doc["pools"])


@dataclass(frozen=True)
class Work:
    """What one job computes, in the units :func:`seconds` prices (module doc)."""

    params_b: float = 0.0           # the model that computes (rates scale with its size)
    dtype: str = "bfloat16"         # float32: fp32 rates
    loads_b: tuple[float, ...] = ()  # billions of parameters of every model read (and of every model written)
    engines: int = 0                # vLLM engine starts
    forward_tokens: float = 0.0     # tokens through batched forward passes (prefill, embeddings)
    scored_texts: float = 0.0       # texts scored one a pass ...
    scored_tokens: float = 0.0      # ... and their tokens
    passes: float = 0.0             # latency-bound passes (decode steps of a small batch, beam-search steps)
    vllm_tokens: float = 0.0        # tokens a vLLM engine generates
    colocate_tokens: float = 0.0    # tokens vLLM generates inside a training process
    hf_tokens: float = 0.0          # tokens transformers' generate generates ...
    hf_batch: int = 64              # ... this many sequences a batch
    train_flops: float = 0.0        # training FLOPs (train_flops)
    cpu_items: float = 0.0          # rollouts scored on the CPU ...
    workers: int = 1                # ... by this many worker processes


def train_flops(params_b: float, tokens: float, *, lora: bool = False, checkpointing: bool = False,
                reference: bool = False) -> float:
    """FLOPs of training on ``tokens``: forward 2N, backward 4N a token (2N without weight gradients: LoRA),
    a second forward with activation checkpointing, and one forward of a reference model (a KL term)."""
    per_token = 2 + (2 if lora else 4) + (2 if checkpointing else 0) + (2 if reference else 0)
    return per_token * params_b * 1e9 * tokens


def seconds(work: Work, gpus: int, table: Throughputs | None = None) -> float:
    """Estimated wall time of ``work`` on ``gpus`` GPUs (module doc)."""
    t = table or load_throughputs()
    size = max(work.params_b, 1e-3) / t.reference_params_b   # time scales with the model
    if work.dtype in FP32:
        size *= t["train_flops_per_s"] / t["fp32_flops_per_s"]
    devices = max(gpus, 1)
    slow = t["cpu_slowdown"] if gpus == 0 else 1.0
    fixed = t["job_start_s"] + sum(2 * p / t["model_load_gb_per_s"] for p in work.loads_b) + work.engines * t["vllm_start_s"]
    scored = max(work.scored_texts * t.pass_s, work.scored_tokens * size / t["score_tokens_per_s"])
    hf_rate = t["hf_generate_tokens_per_s"] * min(work.hf_batch, t.rows["hf_generate_tokens_per_s"]["batch"]) \
        / t.rows["hf_generate_tokens_per_s"]["batch"]
    gpu_work = (work.forward_tokens * size / t["forward_tokens_per_s"] + scored + work.passes * t.pass_s
                + work.vllm_tokens * size / t["vllm_generate_tokens_per_s"] / devices
                + work.colocate_tokens * size / t["vllm_colocate_tokens_per_s"] / devices
                + work.hf_tokens * size / hf_rate
                + work.train_flops / (t["train_flops_per_s"] if work.dtype not in FP32 else t["fp32_flops_per_s"])
                / devices)
    cpu = work.cpu_items / t["metric_rollouts_per_s"] / max(work.workers, 1)
    return fixed + gpu_work * slow + cpu
