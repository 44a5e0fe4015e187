"""Per-view entries: a split (``mialab.data.schema``) and a view in, DPDLLM's feature table out; and
VeilProbe's key-token perturbation of a split (its features: :func:`mialab.calibdcd.stages.veilprobe_tables`).

The query is the view applied to the detector's prompt (DPDLLM: :func:`dpdllm_prompts`; VeilProbe: its
query, :func:`veilprobe_queries`, and that query's perturbation); ``generate(prompts) -> continuations`` is
any generation callable with the detector's sampling settings bound, e.g.
:func:`mialab.lm.engine.rollout_generator` (the project's rollout engine) with
``functools.partial``.
Generation is the caller's cost: outputs are not cached here.
"""

from __future__ import annotations

from typing import Callable, Sequence

import pandas as pd

from mialab.calibdcd.frames import feature_frame
from mialab.calibdcd.perturb import key_token_perturb, original_key_token_perturb
from mialab.calibdcd.reference import reference_probabilities
from mialab.calibdcd.views import apply_view

Generate = Callable[[Sequence[str]], list[str]]


def _generate_checked(generate: Generate, prompts: list[str]) -> list[str]:
    """Call ``generate`` and check it returned one string per prompt."""
    outputs = generate(prompts)
    if len(outputs) != len(prompts) or not all(isinstance(o, str) for o in outputs):
        raise ValueError(f"generate returned {len(outputs)} outputs for {len(prompts)} prompts (strings expected)")
    return list(outputs)


#: DPDLLM's prompt of a text: ``first_words`` (the code) or ``prefix`` (the split's prefix)
DPDLLM_PROMPTS = ("first_words", "prefix")


def dpdllm_prompts(split: pd.DataFrame, *, length: int, prompt: str) -> list[str]:
    """DPDLLM's prompt of each text: ``first_words``, the code's (``generate_by_llm.py``: the text's first
    ``length // 2`` words, split and joined on single spaces), or ``prefix``, the split's prefix.

    The reference model reads only the first ``length`` packed tokens of prompt + continuation, so a
    prompt of ``length`` tokens or more leaves the target's continuation out of every feature."""
    if prompt == "first_words":
        return [" ".join(t.split(" ")[:length // 2]) for t in split["text"].astype(str)]
    if prompt == "prefix":
        return split["prefix"].astype(str).tolist()
    raise ValueError(f"unknown DPDLLM prompt {prompt!r}; known: {list(DPDLLM_PROMPTS)}")


def dpdllm_view_features(split: pd.DataFrame, view: str, *, generate: Generate, reference_model: str,
                         length: int, prompt: str, device: str = "auto", dtype: str = "float32") -> pd.DataFrame:
    """DPDLLM features of ``split`` under ``view``: the target continues the view-wrapped prompt
    (:func:`dpdllm_prompts`); the fine-tuned reference model
    (:func:`mialab.calibdcd.reference.finetune_reference`) reads the prompt followed by that
    continuation (DPDLLM's prompt + response)."""
    prompts = dpdllm_prompts(split, length=length, prompt=prompt)
    outputs = _generate_checked(generate, apply_view(view, prompts))
    z = reference_probabilities(reference_model, list(zip(prompts, outputs, strict=True)), length=length, device=device,
                                dtype=dtype)
    return feature_frame(split["id"].tolist(), view, z)


#: VeilProbe's query of a text: ``text`` (the code: the whole text, the ``Item`` its sampler stores as
#: ``Prefix``) or ``prefix`` (the split's prefix, as the other detectors read)
VEILPROBE_QUERIES = ("text", "prefix")


def veilprobe_queries(split: pd.DataFrame, query: str) -> list[str]:
    """VeilProbe's query of each text of ``split`` (:data:`VEILPROBE_QUERIES`)."""
    if query not in VEILPROBE_QUERIES:
        raise ValueError(f"unknown VeilProbe query {query!r}; known: {list(VEILPROBE_QUERIES)}")
    return split[query].astype(str).tolist()


def add_perturbed_query(split: pd.DataFrame, *, query: str, key_token_models: Sequence[str], ratio: float,
                        perturbation: str, beams: int, new_tokens: int, seed: int, mlm_model: str | None = None,
                        ot_topk: int = 1000, ot_iterations: int = 1000, first_index: int = 0, batch_size: int = 8,
                        device: str = "auto", dtype: str = "float32") -> pd.DataFrame:
    """``split`` with VeilProbe's ``query`` (:func:`veilprobe_queries`) and ``perturbed_query`` columns (its
    key-token perturbation, view-independent): ``original`` (OT attribution on every key-token model,
    ``mlm_model``'s fill; ``first_index``: the first row's index in the list it was sliced from) or
    ``surprisal`` (``ratio``, one key-token model)."""
    queries = veilprobe_queries(split, query)
    if perturbation == "original":
        if mlm_model is None:
            raise ValueError("VeilProbe's original perturbation needs an mlm_model (the code: bert-base-cased)")
        perturbed = original_key_token_perturb(key_token_models, mlm_model, queries, beams=beams,
                                               new_tokens=new_tokens, ot_topk=ot_topk, ot_iterations=ot_iterations,
                                               seed=seed, first_index=first_index, batch_size=batch_size,
                                               device=device, dtype=dtype)
    elif perturbation == "surprisal":
        if len(key_token_models) != 1:
            raise ValueError(f"the surprisal perturbation reads one key-token model, got {len(key_token_models)}")
        perturbed = key_token_perturb(key_token_models[0], queries, ratio=ratio, device=device, dtype=dtype)
    else:
        raise ValueError(f"unknown VeilProbe perturbation {perturbation!r}; known: original, surprisal")
    return split.assign(query=queries, perturbed_query=perturbed)
