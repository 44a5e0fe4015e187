"""Feature extractors ``phi(query, target output) -> z`` of the two feature-based detectors.

Pure functions of already generated outputs and already computed scores; the model-driven parts
(generation, reference-LM scoring, key-token perturbation) live in :mod:`mialab.calibdcd.lm`.

DPDLLM (Zhou et al. 2024). The target continues the text's prefix; a reference language model
(in DPDLLM a GPT-2 fine-tuned to memorise the candidate texts, trained by another stage) scores the
continuation given the prefix. The membership features are the reference model's conditional
probabilities of the continuation tokens, position by position (DPDLLM's default ``cond_prob``
metric with the ``original`` processing: the raw probability sequence is the feature vector of a
Gaussian naive Bayes). We keep the first ``length`` continuation tokens (``d = length``); a
continuation shorter than that is padded with probability 0 (no generated token, so no evidence
that the target reproduced the text). Unlike the reference code we score only the continuation,
not the prompt tokens, whose probabilities do not depend on the target's output.

VeilProbe (Hu et al. 2025). Input-output mapping features from the target's outputs on the text
and on a key-token-perturbed copy of it. VeilProbe reads them from the hidden states of a
sequence-to-sequence mapping model trained on (input, target output) pairs; here a fixed sentence
encoder (``mialab.embeddings``, all-MiniLM-L6-v2, ``D`` = 384) plays that mapping model's role,
and the feature vector keeps VeilProbe's shape ``[features of the original pair, |perturbed -
original|]`` split into two blocks:

- input block (``D + 2``): the prefix embedding, the character similarity between the prefix and
  its perturbed copy (how much the perturbation changed the input), log(1 + prefix words);
- output block (``2D + 8``): the output embedding ``e(y)``, ``|e(y') - e(y)|`` (how the output
  moves when key tokens change), then :data:`OUTPUT_SCALARS`.

``d = 3D + 10``. CalibDCD corrects only the output block for VeilProbe (Sec. 5.1).
Similarities are cosines of the L2-normalised embeddings and rapidfuzz ``fuzz.ratio`` / 100.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from mialab.calibdcd.checks import require_finite

DPDLLM_LENGTH = 32

INPUT_SCALARS = ("input_perturbation_char_similarity", "input_log_words")
OUTPUT_SCALARS = (
    "output_perturbation_cosine",        # cos(e(y), e(y'))
    "output_perturbation_char_similarity",
    "output_suffix_cosine",              # cos(e(y), e(true suffix))
    "output_suffix_char_similarity",
    "perturbed_output_suffix_cosine",    # cos(e(y'), e(true suffix))
    "perturbed_output_suffix_char_similarity",
    "output_log_words",                  # log(1 + words in y)
    "output_log_length_ratio",           # log((1 + words in y') / (1 + words in y))
)


def dpdllm_features(continuation_logprobs: Sequence[np.ndarray], length: int = DPDLLM_LENGTH) -> np.ndarray:
    """DPDLLM features: probabilities of the first ``length`` continuation tokens, 0-padded.

    ``continuation_logprobs[i]`` holds the reference LM's log-probabilities of row ``i``'s
    continuation tokens in order (from :func:`mialab.calibdcd.lm.continuation_logprobs`).
    """
    z = np.zeros((len(continuation_logprobs), length), dtype=np.float64)
    for i, lp in enumerate(continuation_logprobs):
        lp = require_finite(f"continuation log-probabilities of row {i}", lp)[:length]
        if (lp > 0).any():
            raise ValueError(f"row {i}: log-probabilities must be <= 0")
        z[i, : len(lp)] = np.exp(lp)
    return z


def veilprobe_dim(embed_dim: int) -> int:
    """Length of a VeilProbe feature vector for sentence embeddings of size ``embed_dim``."""
    return 3 * embed_dim + len(INPUT_SCALARS) + len(OUTPUT_SCALARS)


def veilprobe_blocks(dim: int) -> dict[str, slice]:
    """The ``input`` and ``output`` block slices of a VeilProbe feature vector of length ``dim``."""
    embed_dim, rest = divmod(dim - len(INPUT_SCALARS) - len(OUTPUT_SCALARS), 3)
    if rest or embed_dim <= 0:
        raise ValueError(f"{dim} is not a VeilProbe feature length "
                         f"(3 * D + {len(INPUT_SCALARS) + len(OUTPUT_SCALARS)})")
    split = embed_dim + len(INPUT_SCALARS)
    return {"input": slice(0, split), "output": slice(split, dim)}


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    if (norms == 0).any():
        raise ValueError("cosine similarity of a zero embedding")
    return (a * b).sum(axis=1) / norms


def _char_similarity(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """Row-wise rapidfuzz ``fuzz.ratio`` (normalised Indel similarity) in [0, 1]."""
    from rapidfuzz import fuzz, process

    return process.cpdist(list(a), list(b), scorer=fuzz.ratio, dtype=np.float64) / 100.0


def _log_words(texts: Sequence[str]) -> np.ndarray:
    """log(1 + number of whitespace-separated words)."""
    return np.log1p(np.array([len(t.split()) for t in texts], dtype=np.float64))


def veilprobe_features(prefixes: Sequence[str], perturbed_prefixes: Sequence[str], suffixes: Sequence[str],
                       outputs: Sequence[str], perturbed_outputs: Sequence[str],
                       encode: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """VeilProbe features ``[input block | output block]`` (layout in the module docstring).

    ``outputs`` / ``perturbed_outputs`` are the target's outputs for the (view-wrapped) prefix and
    perturbed prefix; ``suffixes`` are the texts' true continuations; ``encode`` maps texts to
    embeddings (rows), e.g. :func:`mialab.embeddings.encode`.
    """
    n = len(prefixes)
    if not all(len(x) == n for x in (perturbed_prefixes, suffixes, outputs, perturbed_outputs)):
        raise ValueError("prefixes, perturbed prefixes, suffixes, outputs and perturbed outputs must align")
    emb = require_finite("embeddings",
                         encode(list(prefixes) + list(suffixes) + list(outputs) + list(perturbed_outputs)))
    e_prefix, e_suffix, e_out, e_pert = (emb[k * n:(k + 1) * n] for k in range(4))
    input_scalars = np.column_stack([_char_similarity(prefixes, perturbed_prefixes), _log_words(prefixes)])
    out_words, pert_words = _log_words(outputs), _log_words(perturbed_outputs)
    output_scalars = np.column_stack([
        _cosine(e_out, e_pert), _char_similarity(outputs, perturbed_outputs),
        _cosine(e_out, e_suffix), _char_similarity(outputs, suffixes),
        _cosine(e_pert, e_suffix), _char_similarity(perturbed_outputs, suffixes),
        out_words, pert_words - out_words,
    ])
    z = np.hstack([e_prefix, input_scalars, e_out, np.abs(e_pert - e_out), output_scalars])
    return require_finite("VeilProbe features", z)
