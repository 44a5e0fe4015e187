"""Load causal LMs and tokenizers safely: offline unless configured, safetensors only,
``trust_remote_code`` only when the model's own config asks for custom code."""

from __future__ import annotations

import json
import os
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
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch_dtype, use_safetensors=True, trust_remote_code=needs_remote_code(path)
    )
    return model.to(resolve_device(device)).eval()
