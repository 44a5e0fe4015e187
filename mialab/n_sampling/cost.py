"""What one job of N-Sampling's rules computes (mialab.lm.cost, priced by mialab.pipeline.sizing); ADRA's
evaluation and scoring reuse it.

- ``n_sampling_rollouts`` (model, dataset): ``n`` rollouts of every candidate of every seed's split at the
  task's ``max_new_tokens``, after one prefill of each prompt (``max_prompt_tokens``); on vLLM one engine.
- ``n_sampling_scores`` (model, dataset): the encoder's forward pass over every rollout and its reference
  (on the GPU for a large encoder), and the reconstruction metrics of every rollout on the CPU workers.
"""

from __future__ import annotations

from mialab.lm.cost import Work
from mialab.lm.embeddings import resolve_model_path

#: Prompt tokens assumed for a task that does not bound its prompts (``max_prompt_tokens: null``).
PROMPT_TOKENS = 1024


def rollout_work(facts, model: str, dataset: str, candidates: float, *, loads: int = 1) -> Work:
    """``n`` rollouts of ``candidates`` candidates of ``dataset`` from ``model`` (read ``loads`` times: a merged
    policy is read, written and read again)."""
    ns = facts.config["n_sampling"]
    task = ns["tasks"][dataset]
    p = facts.params_b(model)
    new = candidates * ns["n"] * task["max_new_tokens"]
    prefill = candidates * (task.get("max_prompt_tokens") or PROMPT_TOKENS)
    generated = {"vllm_tokens": new} if ns["backend"] == "vllm" else \
        {"hf_tokens": new, "hf_batch": ns["backend_options"].get("batch_size", 64)}
    return Work(params_b=p, loads_b=(p,) * loads, engines=int(ns["backend"] == "vllm"), forward_tokens=prefill,
                **generated)


def scores_work(facts, dataset: str, candidates: float) -> Work:
    """The metrics of ``n`` rollouts of ``candidates`` candidates of ``dataset``."""
    ns = facts.config["n_sampling"]
    metrics = ns["metrics"]
    rollouts = candidates * ns["n"]
    encoder = metrics["embedding_model"]
    p = facts.params_b(resolve_model_path(encoder)) if encoder else 0.0
    tokens = (rollouts + candidates) * ns["tasks"][dataset]["max_new_tokens"] if encoder else 0.0   # and references
    return Work(params_b=p, dtype=metrics["embedding_dtype"], loads_b=(p,) if encoder else (),
                forward_tokens=tokens, cpu_items=rollouts, workers=metrics["workers"])


def n_sampling_rollouts(facts, model: str, dataset: str, **_) -> Work:
    return rollout_work(facts, model, dataset, facts.seeds * facts.candidates(dataset))


def n_sampling_scores(facts, model: str, dataset: str, **_) -> Work:
    return scores_work(facts, dataset, facts.seeds * facts.candidates(dataset))


WORK = {"n_sampling_rollouts": n_sampling_rollouts, "n_sampling_scores": n_sampling_scores}
