"""ADRA / ADRA+ as a method of the pipeline (:mod:`mialab.pipeline.methods`): its section ``adra`` (on
``n_sampling``, whose tasks, N and metrics it shares), stages, rules (``rules/adra.smk``), job sizing, plan-time
checks and rehearsal swaps.

Sizing (:mod:`mialab.pipeline.sizing`): ``adra_train`` trains through :mod:`mialab.core.launch` (the launcher's
world size, ``adra.reward.workers`` reward workers); ``adra_eval`` and ``adra_scores`` are N-Sampling's rollouts
and metrics jobs. Checks (:mod:`mialab.pipeline.cluster_checks`): a GRPO rollout batch against a seed's
candidates (one prompt per pair of a shared-prefix family), and TRL's vLLM's tensor parallelism.
"""

from __future__ import annotations

from mialab.adra import VARIANTS
from mialab.adra.cost import WORK
from mialab.adra.plan import POLICY_GRAMMAR, ADRAPlan
from mialab.n_sampling.method import metrics_job, rollouts_job
from mialab.pipeline.methods import Method, Swaps, register_method
from mialab.pipeline.plan import SEED_PART
from mialab.pipeline.sizing import Job

# families whose member and non-member share their prefix in pairs (mialab/data/families/s1.py):
# ADRA trains on one prompt per pair (mialab.adra.training.pair_rows)
SHARED_PREFIX_FAMILIES = ("s1", "s1_1")
GRPO_VARIANTS = ("adra", "adra_plus")  # ADRA's variants trained with GRPO (adra_sft is plain SFT)


def train_job(sizing, model: str | None, dataset: str | None = None) -> Job:
    """A training job through the launcher, with the reward's worker processes."""
    return sizing.training_job(model, workers=sizing.config["adra"]["reward"]["workers"])


def cluster_checks(checks) -> None:
    """GRPO's rollout batch against a seed's prompts; the colocated vLLM's tensor parallelism."""
    adra, ns = checks.config["adra"], checks.config["n_sampling"]
    targets = [(t["model"], t["dataset"]) for t in adra["targets"]]
    variants = [v for v in adra["variants"] if v in GRPO_VARIANTS]
    for m, d in dict.fromkeys(targets):
        ds = checks.config["datasets"][d]
        n = ds["split"]["n_per_class"]
        paired = ds["pool"]["family"] in SHARED_PREFIX_FAMILIES and "adra" in variants
        if variants:
            rows, what = (n, f"a seed of dataset {d} (prompts: one per shared-prefix pair)") if paired else \
                (2 * n, f"a seed of dataset {d} (candidates: 2 × split.n_per_class)")
            checks.grpo_step("adra.train", adra["train"], ns["n"], "adra_train", rows, what, m)
    vllm = adra["train"].get("vllm")
    if vllm and variants:
        for m in dict.fromkeys(m for m, _ in targets):
            world, _ = checks.world("adra_train", m)
            colocated = vllm.get("mode", "colocate") == "colocate" and checks.gpus("adra_train", m)
            checks.tensor_parallel("adra.train.vllm.tensor_parallel_size", vllm.get("tensor_parallel_size", 1),
                                   [m], "adra_train", world=world if colocated else None)


def trl_vllm(config: dict) -> list[str]:
    """``adra.train.vllm`` where a GRPO variant runs: its rollouts need vLLM beside TRL."""
    adra = config.get("adra") or {}
    if adra.get("train", {}).get("vllm") and set(adra.get("variants", GRPO_VARIANTS)) & set(GRPO_VARIANTS):
        return ["adra.train.vllm"]
    return []


def rescale(paper: dict, config: dict) -> None:
    """After the rehearsal's caps: LoRA keeps its alpha / r ratio, the evaluated steps their fractions of training."""
    adra = config.get("adra")
    if not adra:
        return
    lora, r_before = adra.get("train", {}).get("lora", {}), paper["adra"].get("train", {}).get("lora", {}).get("r")
    steps_before = paper["adra"].get("train", {}).get("max_steps")
    if r_before and "lora_alpha" in lora:
        alpha = lora["lora_alpha"] * lora["r"] / r_before
        lora["lora_alpha"] = int(alpha) if alpha == int(alpha) else alpha
    if steps_before and steps_before > 0 and "eval" in adra:
        new = adra["train"]["max_steps"]
        adra["eval"]["steps"] = sorted({s * new // steps_before for s in adra["eval"]["steps"]
                                        if s * new // steps_before < new})


METHOD = register_method("adra")(Method(
    name="adra",
    plan=ADRAPlan,
    needs=("n_sampling",),
    layouts={
        "adra/train": ("{model}", "{dataset}", "{variant}", SEED_PART),
        "adra/rollouts": ("{model}", "{dataset}", SEED_PART, "{policy}"),
        "adra/scores": ("{model}", "{dataset}", SEED_PART, "{policy}"),
    },
    versions={
        "adra/train": 4,  # 3: the judge's vLLM seeds per prompt; 4: the reward's whole-suffix reference
        # (adra.reward_reference), a paired article first among the random suffixes, verl's prompts
        "adra/rollouts": 4,  # 3: vLLM seeds per prompt; 4: verl's prompts
        "adra/scores": 2,
    },
    rules=("adra_train", "adra_eval", "adra_scores", "adra_report", "adra"),
    wildcards={"variant": "|".join(VARIANTS), "policy": POLICY_GRAMMAR},
    headline={"ADRA": "adra/lcs_ratio_ref@aon", "ADRA untrained": "adra_init/lcs_ratio_ref@aon",
              "ADRA+": "adra_plus/lcs_ratio_ref@aon"},
    work=WORK,
    jobs={"adra_train": train_job, "adra_eval": rollouts_job, "adra_scores": metrics_job},
    launched=("adra_train",),
    cluster_checks=cluster_checks,
    engines=("adra.reward.judge.engine",),
    trl_vllm=trl_vllm,
    rehearsal=Swaps(
        shrink={
            "adra.reward.workers": 1,
            "adra.contrastive.distractors": 2,
            "adra.train.max_steps": 2,
            "adra.train.batch_size": 4,
            "adra.train.grad_accum": 1,
            "adra.train.save_steps": 1,
            "adra.train.lora.r": 4,
            "adra.train.vllm.tensor_parallel_size": 1,
        },
        rescale=rescale,
    ),
))
