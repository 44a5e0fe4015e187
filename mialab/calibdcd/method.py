"""CalibDCD as a method of the pipeline (:mod:`mialab.pipeline.methods`): its section ``calibdcd``, stages, rules
(``rules/calibdcd.smk``), job sizing, plan-time checks, the language models it names and its rehearsal swaps.

Sizing (:mod:`mialab.pipeline.sizing`): the training stages (``calibdcd_reference``: DPDLLM's reference
fine-tuning; ``calibdcd_veilprobe``: VeilProbe's mapping models) and VeilProbe's perturbation
(``calibdcd_perturbation``: beam searches of its key-token models, a fill-mask model's passes) run on the one device
of ``calibdcd.lm.device``: one GPU, none when it is ``cpu``; ``calibdcd_features`` generates on its backend's GPUs.
Checks (:mod:`mialab.pipeline.cluster_checks`): the generation length within each model's context, the backend's
tensor parallelism.
"""

from __future__ import annotations

from mialab.calibdcd.cost import WORK, mapping_params_b
from mialab.calibdcd.plan import SCOPES, CalibDCDPlan
from mialab.pipeline.methods import Method, Swaps, register_method
from mialab.pipeline.plan import SEED_PART
from mialab.pipeline.sizing import Job


def device_gpus(sizing) -> int:
    """GPUs of a job on ``calibdcd.lm.device``: one, none on the CPU."""
    return 0 if sizing.config["calibdcd"]["lm"]["device"] == "cpu" else 1


def reference_job(sizing, model: str | None = None, dataset: str | None = None) -> Job:
    return Job("train", device_gpus(sizing),
               sizing.params_b(sizing.config["calibdcd"]["detectors"]["dpdllm"]["reference_model"]))


def veilprobe_job(sizing, model: str | None = None, dataset: str | None = None) -> Job:
    mapping = sizing.config["calibdcd"]["detectors"]["veilprobe"]["mapping"]
    return Job("train", device_gpus(sizing), mapping_params_b(mapping))


def perturbation_job(sizing, model: str | None = None, dataset: str | None = None) -> Job:
    vp = sizing.config["calibdcd"]["detectors"]["veilprobe"]
    largest = max(sizing.params_b(m) for m in vp.get("key_token_models") or [vp["key_token_model"]])
    return Job("generate", device_gpus(sizing), largest)  # beam searches per token


def features_job(sizing, model: str | None, dataset: str | None = None) -> Job:
    gen = sizing.config["calibdcd"]["generation"]
    return Job("generate", sizing.engine_gpus(gen["backend"], gen["backend_options"]), sizing.params_b(model))


def cluster_checks(checks) -> None:
    """The generation length within each model's context; the backend's tensor parallelism."""
    gen = checks.config["calibdcd"]["generation"]
    models = list(checks.config["calibdcd"]["models"])
    for m in models:
        checks.length("calibdcd.generation.max_new_tokens", gen["max_new_tokens"], m)
    if gen["backend"] == "vllm":
        checks.tensor_parallel("calibdcd.generation.backend_options.tensor_parallel_size",
                               gen["backend_options"].get("tensor_parallel_size", 1), models, "calibdcd_features")


def lm_keys(config: dict):
    """(config key, name) of every language model a detector names: a configured model, a folder or a hub id."""
    for det, spec in config.get("calibdcd", {}).get("detectors", {}).items():
        for key in ("reference_model", "key_token_model", "mlm_model"):
            if key in spec:
                yield f"calibdcd.detectors.{det}.{key}", spec[key]
        for i, name in enumerate(spec.get("key_token_models", [])):
            yield f"calibdcd.detectors.{det}.key_token_models[{i}]", name


METHOD = register_method("calibdcd")(Method(
    name="calibdcd",
    plan=CalibDCDPlan,
    layouts={
        "calibdcd/partitions": ("{dataset}", SEED_PART),
        "calibdcd/references": ("{dataset}",),
        "calibdcd/perturbations": ("{dataset}",),
        "calibdcd/features": ("{model}", "{dataset}", "{scope}"),
        "calibdcd/veilprobe": ("{model}", "{dataset}"),
        "calibdcd/scores": ("{model}", "{dataset}"),
    },
    versions={
        "calibdcd/partitions": 1,
        "calibdcd/references": 1,
        "calibdcd/perturbations": 4,  # 2: key-token surprisals per text; 3: the query beside its perturbation;
        # 4: surprisal swaps whole tokens only
        "calibdcd/features": 6,  # 4: DPDLLM's reference probabilities per text; 5: vLLM seeds per prompt; 6: samples
        "calibdcd/veilprobe": 3,  # 2: mapping features per text; 3: a pair per continuation
        "calibdcd/scores": 3,
    },
    rules=("calibdcd_partition", "calibdcd_reference", "calibdcd_perturbation", "calibdcd_features",
           "calibdcd_veilprobe", "calibdcd_calibrate", "calibdcd_report", "calibdcd"),
    wildcards={"scope": "|".join(SCOPES)},
    headline={"CalibDCD DPDLLM": "calibdcd/dpdllm/calibdcd", "CalibDCD VeilProbe": "calibdcd/veilprobe/calibdcd"},
    work=WORK,
    jobs={"calibdcd_reference": reference_job, "calibdcd_veilprobe": veilprobe_job,
          "calibdcd_perturbation": perturbation_job, "calibdcd_features": features_job},
    cluster_checks=cluster_checks,
    engines=("calibdcd.generation.backend",),
    lm_keys=lm_keys,
    rehearsal=Swaps(
        shrink={
            "calibdcd.partition.n_train_per_class": 10,
            "calibdcd.partition.n_calibration": 4,
            "calibdcd.detectors.dpdllm.length": 8,
            "calibdcd.detectors.dpdllm.max_new_tokens": 8,
            "calibdcd.detectors.dpdllm.finetune.epochs": 2,
            "calibdcd.detectors.veilprobe.max_new_tokens": 8,
            "calibdcd.detectors.veilprobe.beams": 2,
            "calibdcd.detectors.veilprobe.new_tokens": 2,
            "calibdcd.detectors.veilprobe.ot_topk": 8,
            "calibdcd.detectors.veilprobe.ot_iterations": 10,
            "calibdcd.detectors.veilprobe.mapping.hidden_size": 32,
            "calibdcd.detectors.veilprobe.mapping.num_layers": 1,
            "calibdcd.detectors.veilprobe.mapping.num_heads": 2,
            "calibdcd.detectors.veilprobe.mapping.intermediate_size": 64,
            "calibdcd.detectors.veilprobe.mapping.max_length": 64,
            "calibdcd.detectors.veilprobe.mapping.epochs": 1,
            "calibdcd.generation.max_new_tokens": 8,
            "calibdcd.generation.backend_options.tensor_parallel_size": 1,
        },
        devices=("calibdcd.lm.device",),
        backends={"calibdcd.generation": ("backend", "backend_options")},
        model_keys=("calibdcd.detectors.veilprobe.embedding_model", "calibdcd.detectors.dpdllm.reference_model",
                    "calibdcd.detectors.veilprobe.key_token_model", "calibdcd.detectors.veilprobe.mlm_model"),
    ),
))
