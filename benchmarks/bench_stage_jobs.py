"""Benchmark: CPU seconds of one job's compute for the tiny world's model-driven stages (not a test).

Runs the package function behind one job of each stage on a finished tiny world's inputs (model
loads included, the ~7 s of torch / transformers imports not), on one torch thread as the rules do,
and prints CPU seconds; ``--save DIR`` also writes the outputs, to compare two code versions.

- ``lara_baselines``: :func:`mialab.lara.stages.baseline_scores` (sft, aime, seed 0);
- ``lara_features``: :func:`mialab.lara.features.extract_layer_features` of the job's distinct texts;
- ``calibdcd_features``: :func:`mialab.calibdcd.stages.extract_features` of scope ``original``
  (every wikimia pool text, the largest job, after its VeilProbe perturbation, rule
  ``calibdcd_perturbation``'s) or ``views`` (seed 0's D-cal under the ten views).

Measured on a shared 2-core machine (CPU seconds of one job, under cProfile except lara_features;
same inputs, outputs compared):

=================================  ======  =====  ==========================================
stage                              before  after  outputs
=================================  ======  =====  ==========================================
lara_baselines (sft/aime/seed-0)   43.8    38.9   identical
lara_features (sft/aime/seed-0)    22.0    17.8   identical (bit for bit)
calibdcd_features (base, original) 89.3    81.9   generations identical, features <= 2.2e-7
=================================  ======  =====  ==========================================

Usage: python benchmarks/bench_stage_jobs.py [--world /tmp/tw] [--stages ...] [--save DIR]
"""

from __future__ import annotations

import argparse
import glob
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

import numpy as np
import pandas as pd

VIEWS = ["cue_assistant", "cue_answer", "cue_reasoning", "cue_summary", "cue_response", "cue_output",
         "cue_explanation", "cue_continuation", "tiny_chat", "tiny_assistant_prefill"]


def default_config() -> dict:
    """config.yaml with the schema's defaults filled in, as the rules see it."""
    import yaml
    from snakemake.utils import validate

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    validate(config, str(REPO / "schemas" / "config.schema.yaml"))
    return config


def one(pattern: str) -> str:
    """The single path matching ``pattern``."""
    found = sorted(glob.glob(pattern))
    if len(found) != 1:
        raise FileNotFoundError(f"{len(found)} matches for {pattern}")
    return found[0]


def lara_table(world: str) -> pd.DataFrame:
    return pd.read_parquet(one(f"{world}/results/lara/perturbations/aime/seed-0/*/perturbations.parquet"))


def lara_baselines(world: str):
    from mialab.lara.stages import baseline_scores

    return baseline_scores(one(f"{world}/results/models/sft/*/model"), lara_table(world),
                           **default_config()["lara"]["baselines"])


def lara_features(world: str):
    from mialab.lara.features import extract_layer_features
    from mialab.lara.stages import distinct_texts

    texts = distinct_texts(lara_table(world))["text"].tolist()
    spec = {k: v for k, v in default_config()["lara"]["features"].items() if k != "shard_size"}  # the rule's sharding
    return extract_layer_features(one(f"{world}/results/models/sft/*/model"), texts, **spec)


def calibdcd_features(world: str, scope: str):
    from mialab.lm.engine import rollout_generator
    from mialab.calibdcd.plan import perturbation_options
    from mialab.calibdcd.stages import extract_features, perturb_pool, scope_texts

    model = lambda name: one(f"{world}/results/models/{name}/*/model")  # noqa: E731
    pool = pd.read_parquet(one(f"{world}/results/pools/wikimia/*/pool.parquet"), columns=["id", "text", "prefix", "suffix"])
    ids = None if scope == "original" else pd.read_parquet(
        one(f"{world}/results/calibdcd/partitions/wikimia/seed-0/*/calibration.parquet"))["id"].tolist()
    cfg = default_config()["calibdcd"]
    gen = cfg["generation"]
    generate = rollout_generator(model("base"), backend=gen["backend"], backend_options=gen["backend_options"])
    dpdllm = {k: v for k, v in cfg["detectors"]["dpdllm"].items() if k != "finetune"}
    vp = cfg["detectors"]["veilprobe"]
    detectors = {"dpdllm": {**dpdllm, "reference_model": one(f"{world}/results/calibdcd/references/wikimia/*/model")},
                 "veilprobe": {"temperature": vp["temperature"], "max_new_tokens": gen["max_new_tokens"]}}
    texts = scope_texts(pool, ids)
    if scope == "original":   # VeilProbe's prompts (rule calibdcd_perturbation's, once per pool)
        options = {**perturbation_options(vp), "key_token_models": [model("control")]}
        texts = texts.merge(perturb_pool(texts, options, cfg["lm"]), on="id")
    else:
        del detectors["veilprobe"]      # the views job asks the target for DPDLLM's prompts only
    return extract_features(texts, ["original"] if scope == "original" else VIEWS,
                            generate=generate, detectors=detectors, lm_options=cfg["lm"])


STAGES = {
    "lara_baselines": lara_baselines,
    "lara_features": lara_features,
    "calibdcd_original": lambda world: calibdcd_features(world, "original"),
    "calibdcd_views": lambda world: calibdcd_features(world, "views"),
}


def save(result, folder: Path, name: str) -> None:
    """Write a stage's output for comparison: tables as parquet, arrays as .npy (no pickles)."""
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(result, pd.DataFrame):
        result.to_parquet(folder / f"{name}.parquet")
    elif isinstance(result, np.ndarray):
        np.save(folder / f"{name}.npy", result, allow_pickle=False)
    else:  # calibdcd's FeatureRun
        for detector, table in result.features.items():
            table.to_parquet(folder / f"{name}-{detector}.parquet")
        result.generations.to_parquet(folder / f"{name}-generations.parquet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", default="/tmp/tw", help="a finished tiny world (read only)")
    parser.add_argument("--stages", nargs="+", choices=sorted(STAGES), default=sorted(STAGES))
    parser.add_argument("--save", help="folder for the outputs (<stage>[-<part>].parquet / .npy)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    import transformers  # noqa: F401  (import time is not the stage's compute)

    for name in args.stages:
        wall, cpu = time.perf_counter(), time.process_time()
        result = STAGES[name](args.world)
        print(f"{name:18s} cpu {time.process_time() - cpu:6.1f} s  wall {time.perf_counter() - wall:6.1f} s",
              flush=True)
        if args.save:
            save(result, Path(args.save), name)


if __name__ == "__main__":
    main()
