"""vLLM's sampling semantics without vLLM, for tests: the ``vllm`` backend's worker is replaced by a function
of each request's prompt and per-request seed alone.

vLLM samples a request from its prompt and its seed: the same prompt under the same seed gives the same
answer, whatever else the call holds; the ``n`` samples of one request are successive draws of that seed's
generator (they differ). :func:`install` swaps the worker process (``mialab.lm.vllm_backend.WorkerProcess``) for
``answer(prompt_text, seed, k) -> text``: the ``k``-th sample of the request whose decoded prompt is
``prompt_text`` and whose seed is ``seed``. A request without per-request seeds (the worker before each
prompt had its own) gets the request's one ``seed`` for every prompt, as vLLM's ``SamplingParams(seed=...)``
shared by the whole call did.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

Answer = Callable[[str, int, int], str]


def install(monkeypatch, tmp_path: Path, tokenizer, answer: Answer) -> list[dict]:
    """Replace the vLLM worker by ``answer`` (module doc); returns the list the requests are appended to.
    ``tokenizer``: the model's (a byte-level BPE: any text round-trips), to read prompts and write answers."""
    import mialab.lm.vllm_backend as vllm_backend

    venv = tmp_path / "fake-vllm-venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin" / "python").touch()
    monkeypatch.setenv("MIALAB_VLLM_VENV", str(venv))
    requests: list[dict] = []

    class Worker:
        """The worker process of one backend (vllm_backend.WorkerProcess): every call answered by ``answer``."""

        def __init__(self, python, env):
            self.calls = 0

        def run(self, request: dict) -> dict:
            self.calls += 1
            requests.append(request)
            prompts = request["prompt_token_ids"]
            seeds = request.get("seeds") or [request["seed"]] * len(prompts)
            completions = [[{"token_ids": tokenizer.encode(answer(tokenizer.decode(ids), seed, k),
                                                           add_special_tokens=False)[:request["max_new_tokens"]],
                             "finish_reason": "length"} for k in range(request["n"])]
                           for ids, seed in zip(prompts, seeds, strict=True)]
            return {"vllm_version": "fake", "completions": completions}

    monkeypatch.setattr(vllm_backend, "WorkerProcess", Worker)
    return requests


def seeded_words(prompt: str, seed: int, k: int) -> str:
    """A generic answer: words drawn from the prompt under the seed and sample index (a function of them alone)."""
    import zlib

    import numpy as np

    words = prompt.split() or ["word"]
    rng = np.random.default_rng([seed, k, zlib.crc32(prompt.encode())])
    return " ".join(words[i] for i in rng.integers(len(words), size=6))
