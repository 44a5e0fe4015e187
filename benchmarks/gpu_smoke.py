"""GPU smoke check of the paths the CPU tests cannot reach: bf16 scoring on CUDA, DeepSpeed ZeRO-2 SFT
over NCCL with bf16, TRL GRPO + LoRA in bf16 (ADRA), and CUDA rollouts from a trained ADRA adapter.

Run by ``benchmarks/gpu_smoke.sh`` on a GPU machine, over a copy of a tiny world (``results/``).
Each stage prints one ``SMOKE <stage> ok|FAIL ...`` line; the exit code is the number of failed stages.

    python benchmarks/gpu_smoke.py env|scoring|sft-check|rollouts [args]
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

PACKAGES = ("torch", "transformers", "tokenizers", "deepspeed", "trl", "peft", "accelerate", "datasets",
            "pyarrow", "rapidfuzz", "vllm", "flash-attn")
SPEC = {"methods": ["loss", "zlib", "min_k", "min_k_plus_plus"], "k": [0.2], "batch_size": 16, "max_length": 256,
        "truncation": "truncate", "truncation_warn": 0.05}


def env() -> None:
    import torch

    found = {}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    print("SMOKE versions", json.dumps(found))
    ok = torch.cuda.is_available()
    info = {"cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0) if ok else None,
            "bf16": bool(ok and torch.cuda.is_bf16_supported()), "count": torch.cuda.device_count()}
    print("SMOKE env", "ok" if ok else "FAIL", json.dumps(info))
    if not ok:
        sys.exit(1)


def _score(model: str, split: pd.DataFrame, dtype: str, device: str) -> tuple[pd.DataFrame, float]:
    from mialab.scoring.run import score_split

    start = time.perf_counter()
    scores = score_split(model, split, {**SPEC, "dtype": dtype, "device": device})
    return scores, time.perf_counter() - start


def scoring(model: str, split_path: str) -> None:
    """The same scores on CPU fp32, CUDA fp32 and CUDA bf16: differences, AUROCs and speed."""
    split = pd.read_parquet(split_path)
    _score(model, split.head(4), "float32", "cuda")  # CUDA context and kernels warm
    runs = {name: _score(model, split, dtype, device)
            for name, dtype, device in [("cpu_fp32", "float32", "cpu"), ("cuda_fp32", "float32", "cuda"),
                                        ("cuda_bf16", "bfloat16", "cuda")]}
    ref = runs["cpu_fp32"][0]
    failed = False
    for name, (scores, seconds) in runs.items():
        aucs = {m: round(100 * roc_auc_score(scores["label"], scores[f"{m}@0.2" if m.startswith("min_k") else m]), 1)
                for m in ("loss", "min_k", "min_k_plus_plus")}
        cols = [c for c in scores.columns if c not in ("id", "label", "n_tokens")]
        diff = float(np.max(np.abs(scores[cols].to_numpy() - ref[cols].to_numpy())))
        finite = bool(np.isfinite(scores[cols].to_numpy()).all())
        failed |= not finite or (name == "cuda_fp32" and diff > 1e-3)
        print("SMOKE scoring", name, json.dumps({"seconds": round(seconds, 2), "auroc": aucs,
                                                  "max_abs_diff_vs_cpu_fp32": round(diff, 5), "finite": finite}))
    print("SMOKE scoring", "FAIL" if failed else "ok")
    sys.exit(int(failed))


def sft_check(base: str, sft: str, split_path: str) -> None:
    """Contamination after the GPU SFT run: Min-K%++ of the SFT model minus the base model's, per candidate."""
    split = pd.read_parquet(split_path)
    after, _ = _score(sft, split, "bfloat16", "cuda")
    before, _ = _score(base, split, "bfloat16", "cuda")
    col = "min_k_plus_plus@0.2"
    res = {"sft_min_k_plus_plus": round(100 * roc_auc_score(after["label"], after[col]), 1),
           "base_min_k_plus_plus": round(100 * roc_auc_score(before["label"], before[col]), 1),
           "sft_minus_base": round(100 * roc_auc_score(after["label"], after[col] - before[col]), 1)}
    ok = res["sft_min_k_plus_plus"] > 60
    print("SMOKE sft-check", "ok" if ok else "FAIL", json.dumps(res))
    sys.exit(int(not ok))


def rollouts(model: str, adapters: str, split_path: str, manifest_path: str) -> None:
    """N rollouts per candidate from the trained ADRA policy (LoRA merged), on CUDA in bf16, transformers backend."""
    from pathlib import Path

    from mialab.adra.stages import policy_rollouts
    from mialab.n_sampling.tasks import Task

    config = json.loads(Path(manifest_path).read_text())["config"]
    snapshot = sorted(Path(adapters).iterdir())[-1]
    start = time.perf_counter()
    (frame,) = policy_rollouts(model, snapshot, [pd.read_parquet(split_path)], Task.from_config(config["task"]),
                               chat=False, samplings=[{"n": 4, "temperature": 0.7, "top_p": 0.95, "top_k": 50, "seed": 0}],
                               backend="hf", backend_options={"device": "cuda", "dtype": "bfloat16", "batch_size": 64})
    res = {"snapshot": snapshot.name, "rows": len(frame), "mean_tokens": round(float(frame["n_tokens"].mean()), 1),
           "seconds": round(time.perf_counter() - start, 1), "example": frame["text"].iloc[0][:80]}
    ok = len(frame) > 0 and frame["n_tokens"].gt(0).any()
    print("SMOKE rollouts", "ok" if ok else "FAIL", json.dumps(res))
    sys.exit(int(not ok))


if __name__ == "__main__":
    stage, *args = sys.argv[1:]
    {"env": env, "scoring": scoring, "sft-check": sft_check, "rollouts": rollouts}[stage](*args)
