"""Mean-pooled hidden states of every layer, for LaRA's metrics.

Layer 0 is the embedding-layer output and layers 1..L the transformer blocks' outputs, as in
``output_hidden_states=True`` (Hugging Face applies the final norm to the last one). Pooling
averages every token of the tokenised text, the special tokens the tokenizer adds (a BOS)
included, as the LaRA code does; ``special_tokens=False`` averages the text's own tokens only (a
BOS is the same vector for every text and, in many LLMs, an attention-sink outlier that dominates
the mean). Each text is a forward pass of its own tokens alone (no padding, no other text), so its
features do not depend on the texts it is extracted with (:mod:`mialab.lm.logprobs` says why a
padded batch's would).

The stage writes ``out_dir/shards/shard-NNNNN.safetensors`` (key ``features``, float32
``[rows, n_layers + 1, hidden]``) and finally ``out_dir/index.parquet`` (the input table plus
``shard`` and ``row``). A rerun keeps every shard whose fingerprint (model files' content, dtype,
truncation, texts) matches, so an interrupted extraction resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from mialab.core.finite import require_finite
from mialab.core.integrity import model_fingerprint
from mialab.core.io import atomic_path, write_parquet

FEATURES_KEY = "features"


def mean_pool(hidden, mask):
    """Average ``hidden [B, T, D]`` over the positions where ``mask [B, T]`` is 1 (float32)."""
    m = mask.to(hidden.device).float()
    counts = m.sum(dim=1, keepdim=True)
    if bool((counts == 0).any()):
        raise ValueError("a text has no token to pool (empty text?)")
    return (hidden.float() * m.unsqueeze(-1)).sum(dim=1) / counts


def layer_features(model, tokenizer, texts: list[str], *, max_length: int | None = None,
                   special_tokens: bool = True) -> np.ndarray:
    """``[n_texts, n_layers + 1, hidden]`` float32 mean-pooled hidden states, one forward pass per text."""
    import torch

    device = next(model.parameters()).device
    enc = tokenizer(texts, return_special_tokens_mask=True, truncation=max_length is not None, max_length=max_length)
    out = np.zeros((len(texts), model.config.num_hidden_layers + 1, model.config.hidden_size), dtype=np.float32)
    body = model.get_decoder()  # the transformer without the LM head: its logits are never read
    for i, (ids, special) in enumerate(zip(enc["input_ids"], enc["special_tokens_mask"])):
        with torch.inference_mode():
            hidden = body(input_ids=torch.tensor([ids], device=device), output_hidden_states=True).hidden_states
        pool_mask = torch.tensor([[1] * len(ids)]) if special_tokens else 1 - torch.tensor([special])
        out[i] = torch.stack([mean_pool(h, pool_mask) for h in hidden], dim=1)[0].cpu().numpy()
    require_finite("hidden states (overflow in this dtype?)", out)
    return out


def extract_layer_features(model_path: str, texts: list[str], *, device: str = "auto", dtype: str = "float32",
                           max_length: int | None = None, special_tokens: bool = True) -> np.ndarray:
    """Load ``model_path`` and return :func:`layer_features` of ``texts``."""
    from mialab.lm.loading import load_lm

    model, tok = load_lm(model_path, device=device, dtype=dtype)
    return layer_features(model, tok, list(texts), max_length=max_length, special_tokens=special_tokens)


def shard_fingerprint(model_path: str, dtype: str, max_length: int | None, texts: list[str],
                      special_tokens: bool = True) -> str:
    """What a shard depends on: changed weights, dtype, truncation, pooling or text invalidate it.

    The model counts by its files' content (mialab.core.integrity.model_fingerprint), never by where it
    lies or when it was written: a moved results tree keeps its shards.
    """
    payload = json.dumps([model_fingerprint(model_path), dtype, max_length, texts, special_tokens], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _shard_is_current(path: Path, fingerprint: str) -> bool:
    from safetensors import safe_open

    if not path.is_file():
        return False
    with safe_open(str(path), framework="np") as f:
        return (f.metadata() or {}).get("fingerprint") == fingerprint


def extract_features(table: pd.DataFrame, model_path: str, out_dir: str | os.PathLike, *, shard_size: int = 256,
                     device: str = "auto", dtype: str = "float32",
                     max_length: int | None = None, special_tokens: bool = True,
                     trust_remote_code: bool = False) -> pd.DataFrame:
    """Stage: features of every ``table["text"]`` as shards plus ``index.parquet``; resumable.

    Returns the index (``table`` with ``shard`` and ``row`` added). The model is loaded only
    when some shard is missing or stale.
    """
    import torch
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    texts = table["text"].astype(str).tolist()
    index = table.reset_index(drop=True).assign(shard=np.arange(len(texts)) // shard_size,
                                               row=np.arange(len(texts)) % shard_size)
    model = tok = None
    for shard in range(int(index["shard"].max()) + 1 if len(index) else 0):
        chunk = texts[shard * shard_size:(shard + 1) * shard_size]
        path = out_dir / "shards" / f"shard-{shard:05d}.safetensors"
        fingerprint = shard_fingerprint(model_path, dtype, max_length, chunk, special_tokens)
        if _shard_is_current(path, fingerprint):
            continue
        if model is None:
            from mialab.lm.loading import load_lm

            model, tok = load_lm(model_path, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
        feats = layer_features(model, tok, chunk, max_length=max_length, special_tokens=special_tokens)
        with atomic_path(path) as tmp:
            save_file({FEATURES_KEY: torch.from_numpy(feats)}, str(tmp),
                      metadata={"fingerprint": fingerprint, "model": str(model_path), "dtype": dtype})
    write_parquet(index, out_dir / "index.parquet")
    return index


def load_features(out_dir: str | os.PathLike) -> tuple[pd.DataFrame, np.ndarray]:
    """``(index, features [n_rows, n_layers + 1, hidden])`` written by :func:`extract_features`."""
    from safetensors.numpy import load_file

    out_dir = Path(out_dir)
    index = pd.read_parquet(out_dir / "index.parquet")
    shards = [load_file(str(out_dir / "shards" / f"shard-{s:05d}.safetensors"))[FEATURES_KEY]
              for s in range(int(index["shard"].max()) + 1)]
    feats = np.concatenate(shards)
    if len(feats) != len(index):
        raise ValueError(f"{out_dir}: {len(feats)} feature rows for {len(index)} index rows")
    return index, feats
