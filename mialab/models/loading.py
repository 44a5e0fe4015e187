"""Load causal LMs and tokenizers safely: offline unless configured, safetensors only,
``trust_remote_code`` only when the model's own config asks for custom code."""

from __future__ import annotations

import functools
import json
import os
import warnings
from pathlib import Path

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}


def needs_remote_code(path: str) -> bool:
    """True when a local model directory's config declares custom code (``auto_map``)."""
    cfg = Path(path) / "config.json"
    if not cfg.exists():
        return False
    return "auto_map" in json.loads(cfg.read_text())


def resolve_device(device: str = "auto") -> str:
    """``auto`` picks CUDA when available, else CPU."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True when this CPU computes bf16 matrix products natively (AMX or AVX512-BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:  # not Linux: unknown, assume not
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def check_bf16_speed(dtype: str, device: str) -> None:
    """Warn when bf16 is asked for on a CPU that only emulates it (correct, but several times slower).

    The tiny world computes in bf16 because the CPUs it is measured on have AMX, where bf16 is
    ~3x faster than fp32; elsewhere set its ``dtype``/``precision`` keys to float32/fp32.
    """
    if DTYPES.get(dtype, dtype) == "bfloat16" and str(device).startswith("cpu") and not cpu_has_native_bf16():
        warnings.warn("bf16 on a CPU without AMX or AVX512-BF16 is emulated and slow; "
                      "set dtype float32 / precision fp32 in the config for this machine", stacklevel=2)


def load_tokenizer(path: str, *, padding_side: str = "right"):
    """Load a tokenizer; a missing pad token falls back to EOS."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=needs_remote_code(path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = padding_side
    return tok


def load_causal_lm(path: str, *, dtype: str = "float32", device: str = "auto"):
    """Load a causal LM for inference (eval mode) from safetensors weights."""
    import torch
    from transformers import AutoModelForCausalLM

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        torch_dtype = getattr(torch, DTYPES[dtype])
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; known: {sorted(DTYPES)}") from None
    device = resolve_device(device)
    check_bf16_speed(dtype, device)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch_dtype, use_safetensors=True, trust_remote_code=needs_remote_code(path)
    )
    return model.to(device).eval()
