"""N-Sampling as a method of the pipeline (:mod:`mialab.pipeline.methods`): its section ``n_sampling``, stages,
rules (``rules/n_sampling.smk``), job sizing, plan-time checks and rehearsal swaps.

Sizing (:mod:`mialab.pipeline.sizing`): ``n_sampling_rollouts`` generates on its backend's GPUs (vLLM's
``tensor_parallel_size``, one for hf); ``n_sampling_scores`` computes reconstruction metrics, on a GPU where the
embedding model has at least :data:`mialab.pipeline.sizing.LARGE_PARAMS_B` billion parameters, with
``metrics.workers`` worker processes. Checks (:mod:`mialab.pipeline.cluster_checks`): each target's prompt and
new tokens within its model's context and vLLM's ``max_model_len``; the backend's tensor parallelism.
"""

from __future__ import annotations

from mialab.n_sampling.cost import WORK
from mialab.n_sampling.plan import NSamplingPlan
from mialab.pipeline.methods import Method, Swaps, register_method
from mialab.pipeline.sizing import Job


def rollouts_job(sizing, model: str | None, dataset: str | None = None) -> Job:
    """A job that samples N-Sampling's rollouts (N-Sampling's, or ADRA's evaluation of its policies)."""
    ns = sizing.config["n_sampling"]
    return Job("generate", sizing.engine_gpus(ns["backend"], ns["backend_options"]), sizing.params_b(model))


def metrics_job(sizing, model: str | None = None, dataset: str | None = None) -> Job:
    """A job that scores rollouts with the reconstruction metrics of ``n_sampling.metrics``."""
    metrics = sizing.config["n_sampling"]["metrics"]
    return sizing.encoder_job(metrics["embedding_model"], metrics["workers"])


def cluster_checks(checks) -> None:
    """Lengths of every target's task within its model's context (and vLLM's ``max_model_len``); the backend's
    tensor parallelism on a rollouts job's GPUs."""
    ns = checks.config["n_sampling"]
    targets = [(t["model"], t["dataset"]) for t in ns["targets"]]
    opts = ns["backend_options"]
    for m, d in targets:
        task = ns["tasks"].get(d)
        if task is None:
            continue  # mialab.n_sampling.plan names the missing task
        prompt, new = task["max_prompt_tokens"], task["max_new_tokens"]
        total = (prompt or 0) + new
        checks.length(f"n_sampling.tasks.{d}.max_new_tokens", total, m,
                      f" (max_prompt_tokens {prompt} + max_new_tokens)" if prompt else "")
        if ns["backend"] == "vllm" and opts.get("max_model_len"):
            checks.length("n_sampling.backend_options.max_model_len", opts["max_model_len"], m)
            if total > opts["max_model_len"]:
                checks.errors.append(f"n_sampling.backend_options.max_model_len: {opts['max_model_len']} is less "
                                     f"than the {total} tokens of task {d} (max_prompt_tokens {prompt} + "
                                     f"max_new_tokens {new})")
    if ns["backend"] == "vllm":
        models = [m for m, _ in targets]
        checks.tensor_parallel("n_sampling.backend_options.tensor_parallel_size",
                               opts.get("tensor_parallel_size", 1), models, "n_sampling_rollouts")


METHOD = register_method("n_sampling")(Method(
    name="n_sampling",
    plan=NSamplingPlan,
    layouts={
        "n_sampling/rollouts": ("{model}", "{dataset}"),
        "n_sampling/scores": ("{model}", "{dataset}"),
    },
    versions={
        "n_sampling/rollouts": 5,  # 4: vLLM seeds per prompt (mialab.lm.engine: a prompt sent twice samples apart);
        # 5: prompts rendered as verl renders them (n_sampling.prompt_format)
        "n_sampling/scores": 4,  # 4: each text embedded alone
    },
    rules=("n_sampling_rollouts", "n_sampling_scores", "n_sampling"),
    headline={"N-Sampling": "n_sampling/lcs_ratio_ref@aon"},
    work=WORK,
    jobs={"n_sampling_rollouts": rollouts_job, "n_sampling_scores": metrics_job},
    cluster_checks=cluster_checks,
    engines=("n_sampling.backend",),
    rehearsal=Swaps(
        shrink={
            "n_sampling.n": 2,
            "n_sampling.tasks.*.max_new_tokens": 8,
            "n_sampling.tasks.*.max_prompt_tokens": 1000,  # the stand-ins' 1024 positions, less the new tokens
            "n_sampling.backend_options.tensor_parallel_size": 1,
            "n_sampling.backend_options.max_model_len": 1024,
            "n_sampling.metrics.workers": 1,
        },
        backends={"n_sampling": ("backend", "backend_options")},
        model_keys=("n_sampling.metrics.embedding_model",),
    ),
))
