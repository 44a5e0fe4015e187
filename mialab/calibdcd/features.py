"""VeilProbe's feature vector from its two mapping models' features (:mod:`mialab.calibdcd.mapping`).

DPDLLM's features (reference-model token probabilities) are in :mod:`mialab.calibdcd.reference`.

VeilProbe (Hu et al. 2025, ``run_protonet_classifier.py``): the original mapping model reads the
query, the perturbed mapping model reads the key-token-perturbed query; each gives ``[encoder
part | decoder part]`` (``E`` coordinates each). The code's vector is ``[f_original, |f_perturbed
- f_original|]``; we order the same coordinates ``[encoder, |encoder difference|, decoder,
|decoder difference|]`` so that the two blocks are contiguous:

- input block (first half): what the encoders read from the query;
- output block (second half): the decoders' states, the mapping model's rendering of the target's
  output; CalibDCD corrects only this block for VeilProbe (Sec. 5.1).

The difference coordinates (second and fourth quarter) are the ones VeilProbe prunes by Welch's
t-test (:func:`difference_columns`). The protonet's first layer sees the same coordinates in
another order, so the order changes nothing but the seeded initialisation's assignment.
"""

from __future__ import annotations

import numpy as np

from mialab.calibdcd.checks import require_matrix


def veilprobe_vector(f_original: np.ndarray, f_perturbed: np.ndarray) -> np.ndarray:
    """``[enc, |enc' - enc|, dec, |dec' - dec|]`` of the two mapping models' features (rows)."""
    f_original = require_matrix("original mapping features", f_original)
    f_perturbed = require_matrix("perturbed mapping features", f_perturbed, n_cols=f_original.shape[1])
    if f_original.shape != f_perturbed.shape or f_original.shape[1] % 2:
        raise ValueError(f"mapping features must align and have an even width, got {f_original.shape}, "
                         f"{f_perturbed.shape}")
    e = f_original.shape[1] // 2
    diff = np.abs(f_perturbed - f_original)
    return np.hstack([f_original[:, :e], diff[:, :e], f_original[:, e:], diff[:, e:]])


def _quarter(dim: int) -> int:
    e, rest = divmod(dim, 4)
    if rest or e == 0:
        raise ValueError(f"{dim} is not a VeilProbe feature length (4 x the encoder part)")
    return e


def veilprobe_blocks(dim: int) -> dict[str, slice]:
    """The ``input`` (encoders) and ``output`` (decoders) block slices of a VeilProbe vector."""
    e = _quarter(dim)
    return {"input": slice(0, 2 * e), "output": slice(2 * e, dim)}


def difference_columns(dim: int) -> np.ndarray:
    """Boolean mask of the ``|f_perturbed - f_original|`` coordinates (VeilProbe's pruned features)."""
    e = _quarter(dim)
    mask = np.zeros(dim, dtype=bool)
    mask[e:2 * e] = mask[3 * e:] = True
    return mask
