"""Stage entries: a split (``mialab.data.schema``) and a view in, a feature table out.

The query is the view applied to the text's ``prefix``; ``generate(prompts) -> continuations`` is
any generation callable, e.g. :func:`mialab.calibdcd.lm.rollout_generator` (the project's rollout engine).
Generation is the caller's cost: outputs are not cached here.
"""

from __future__ import annotations

from typing import Callable, Sequence

import pandas as pd

from mialab.calibdcd.features import DPDLLM_LENGTH, dpdllm_features, veilprobe_features
from mialab.calibdcd.frames import feature_frame
from mialab.calibdcd.lm import continuation_logprobs, key_token_perturb
from mialab.calibdcd.views import apply_view
from mialab.embeddings import DEFAULT_MODEL, encode

Generate = Callable[[Sequence[str]], list[str]]


def _generate_checked(generate: Generate, prompts: list[str]) -> list[str]:
    """Call ``generate`` and check it returned one string per prompt."""
    outputs = generate(prompts)
    if len(outputs) != len(prompts) or not all(isinstance(o, str) for o in outputs):
        raise ValueError(f"generate returned {len(outputs)} outputs for {len(prompts)} prompts (strings expected)")
    return list(outputs)


def dpdllm_view_features(split: pd.DataFrame, view: str, *, generate: Generate, reference_model: str,
                         length: int = DPDLLM_LENGTH, batch_size: int = 8, device: str = "auto",
                         dtype: str = "float32") -> pd.DataFrame:
    """DPDLLM features of ``split`` under ``view``: the target continues the view-wrapped prefix, the
    reference model scores that continuation given the plain prefix (the text it memorised)."""
    prefixes = split["prefix"].astype(str).tolist()
    outputs = _generate_checked(generate, apply_view(view, prefixes))
    logprobs = continuation_logprobs(reference_model, prefixes, outputs, batch_size=batch_size, device=device,
                                     dtype=dtype)
    return feature_frame(split["id"].tolist(), view, dpdllm_features(logprobs, length))


def add_perturbed_prefix(split: pd.DataFrame, *, key_token_model: str, ratio: float = 0.15, batch_size: int = 8,
                         device: str = "auto", dtype: str = "float32") -> pd.DataFrame:
    """``split`` with a ``perturbed_prefix`` column (VeilProbe key-token perturbation, view-independent)."""
    perturbed = key_token_perturb(key_token_model, split["prefix"].astype(str).tolist(), ratio=ratio,
                                  batch_size=batch_size, device=device, dtype=dtype)
    return split.assign(perturbed_prefix=perturbed)


def veilprobe_view_features(split: pd.DataFrame, view: str, *, generate: Generate,
                            embedding_model: str = DEFAULT_MODEL) -> pd.DataFrame:
    """VeilProbe features of ``split`` (with ``perturbed_prefix``) under ``view``: the target answers the
    view-wrapped prefix and the view-wrapped perturbed prefix."""
    if "perturbed_prefix" not in split.columns:
        raise KeyError("split lacks 'perturbed_prefix'; run add_perturbed_prefix first")
    prefixes = split["prefix"].astype(str).tolist()
    perturbed = split["perturbed_prefix"].astype(str).tolist()
    outputs = _generate_checked(generate, apply_view(view, prefixes) + apply_view(view, perturbed))
    z = veilprobe_features(prefixes, perturbed, split["suffix"].astype(str).tolist(), outputs[:len(prefixes)],
                           outputs[len(prefixes):], lambda texts: encode(texts, model=embedding_model))
    return feature_frame(split["id"].tolist(), view, z)
