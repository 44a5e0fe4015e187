"""LaRA as a method of the pipeline (:mod:`mialab.pipeline.methods`): its section ``lara``, stages, rules
(``rules/lara.smk``), job sizing, plan-time checks and rehearsal swaps.

Sizing (:mod:`mialab.pipeline.sizing`): ``lara_perturbations`` generates on its instruction model's engine
(``lara.llm``; without one it runs on the CPU), ``lara_features`` reads hidden states (forward passes, one GPU),
``lara_baselines`` generates every question's answers with transformers, then reads them (one GPU). Checks
(:mod:`mialab.pipeline.cluster_checks`): the feature and baseline lengths within each model's context.
"""

from __future__ import annotations

from mialab.lara.cost import WORK
from mialab.lara.plan import LaRAPlan
from mialab.pipeline.methods import Method, Swaps, register_method
from mialab.pipeline.sizing import Job


def perturbations_job(sizing, model: str | None = None, dataset: str | None = None) -> Job:
    llm = sizing.config["lara"].get("llm")  # the job starts its engine whenever the section is there
    if not llm:
        return Job("cpu", 0)
    return Job("generate", sizing.engine_gpus(llm["engine"], llm["backend_options"]), sizing.params_b(llm["model"]))


def features_job(sizing, model: str | None, dataset: str | None = None) -> Job:
    return Job("forward", 1, sizing.params_b(model))


def baselines_job(sizing, model: str | None, dataset: str | None = None) -> Job:
    """transformers' generate of every question's answers, then forward passes."""
    return Job("generate", 1, sizing.params_b(model))


def cluster_checks(checks) -> None:
    """The feature and baseline lengths within each LaRA model's context."""
    lara = checks.config["lara"]
    for m in dict.fromkeys(lara.get("models") or [t["model"] for t in lara["targets"]]):
        if lara["features"].get("max_length"):
            checks.length("lara.features.max_length", lara["features"]["max_length"], m)
        for part in ("cdd", "self_critique"):
            checks.length(f"lara.baselines.{part}.max_new_tokens", lara["baselines"][part]["max_new_tokens"], m)


METHOD = register_method("lara")(Method(
    name="lara",
    plan=LaRAPlan,
    layouts={
        "lara/perturbations": ("{dataset}",),
        "lara/features": ("{model}", "{dataset}"),
        "lara/baselines": ("{model}", "{dataset}"),
        "lara/scores": ("{model}", "{dataset}"),
    },
    versions={
        "lara/perturbations": 4,  # 3: retrieval embeddings and token_loss surprisals per text; 4: LLM paraphrases
        # as the code asks (a text's variants in one answer), vLLM seeds per prompt and per attempt, neighbours as
        # the code keeps them (asked 7 times, invalid ones dropped down to 2)
        "lara/features": 4,  # 4: each text its own forward pass
        "lara/baselines": 5,  # 5: ReCaLL's log-likelihoods per text
        "lara/scores": 3,
    },
    rules=("lara_perturbations", "lara_features", "lara_baselines", "lara_scores", "lara_report", "lara"),
    headline={"LaRA": "lara"},
    work=WORK,
    jobs={"lara_perturbations": perturbations_job, "lara_features": features_job, "lara_baselines": baselines_job},
    cluster_checks=cluster_checks,
    engines=("lara.llm.engine",),
    rehearsal=Swaps(
        shrink={
            "lara.controls.n_reference": 4,
            "lara.neighbours.n": 2,
            "lara.paraphrase.n_variants": 2,
            "lara.baselines.cdd.n_samples": 2,
            "lara.baselines.cdd.max_new_tokens": 8,
            "lara.baselines.self_critique.max_new_tokens": 8,
            "lara.llm.max_new_tokens": 16,
            "lara.paraphrase.max_new_tokens": 16,
        },
        devices=("lara.features.device", "lara.baselines.device"),
        backends={"lara.llm": ("engine", "backend_options")},
        model_keys=("lara.llm.model",),
        # LaRA's LLM perturbations fall back to offline backends where the instruction model's stand-in (random
        # weights) gives no valid answer
        settings={"lara.llm.fallback": True},
    ),
))
