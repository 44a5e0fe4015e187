"""What one job of CalibDCD's rules computes (mialab.lm.cost, priced by mialab.pipeline.sizing), on a pool's
texts (their number and mean tokens: ``resources/throughputs.yaml``, ``pools``); the LM passes in ``lm.dtype``.

- ``calibdcd_reference`` (dataset): DPDLLM's reference model fine-tuned ``finetune.epochs`` on every pool text.
- ``calibdcd_perturbation`` (dataset): VeilProbe's original perturbation of every text's query (``query``:
  the whole text, or its prefix, half its tokens), ``n`` tokens: for each attribution model, a beam search
  (``beams`` beams, ``new_tokens`` steps) of the query and of the query without each of its tokens,
  ``lm.batch_size`` at a time, so ``(n + 1) x beams x n`` tokens of prefill and ``new_tokens`` latency-bound
  steps per batch; the surprisal substitute: one batched pass.
- ``calibdcd_features`` (model, dataset, scope): the target's answers (``generation.max_new_tokens``; VeilProbe:
  ``continuations`` of each) to every prompt: each pool text's inputs of every detector in the original scope,
  the ten views of every seed's D-cal in the views scope (DPDLLM's alone); the reference model's pass over
  the answers.
- ``calibdcd_veilprobe`` (model, dataset): the two mapping models trained ``mapping.epochs`` on the
  original scope's answers (one pair per continuation) at ``mapping.max_length`` tokens.
"""

from __future__ import annotations

import math

from mialab.calibdcd.plan import ORIGINAL_SCOPE
from mialab.calibdcd.stages import DETECTOR_INPUTS
from mialab.calibdcd.views import controlled_views
from mialab.lm.cost import Work, train_flops

#: Tokens of a text GPT-2-style reference models read at most (their context).
REFERENCE_CONTEXT = 1024
#: VeilProbe's mapping models' vocabulary (bert-base-uncased's), for their size, unless ``mapping.vocab_size`` sets one.
BERT_VOCAB = 30522


def mapping_params_b(mapping) -> float:
    """Billions of parameters of one of VeilProbe's mapping models (mialab.calibdcd.mapping; the two are
    trained one after the other): a BERT encoder and decoder of ``num_layers`` layers each
    (self-attention, feed-forward; the decoder's cross-attention too) with their embeddings."""
    h, inter, layers = mapping["hidden_size"], mapping["intermediate_size"], mapping["num_layers"]
    embeddings = ((mapping.get("vocab_size") or BERT_VOCAB) + mapping["max_length"]) * h
    layer = 4 * h * h + 2 * h * inter
    return (2 * embeddings + layers * (2 * layer + 4 * h * h)) / 1e9


def calibdcd_reference(facts, model: str | None, dataset: str, **_) -> Work:
    calib = facts.config["calibdcd"]
    dp = calib["detectors"]["dpdllm"]
    pool = facts.pool(dataset)
    p = facts.params_b(dp["reference_model"])
    tokens = pool.rows * min(pool.tokens, REFERENCE_CONTEXT) * dp["finetune"]["epochs"]
    return Work(params_b=p, dtype=calib["lm"]["dtype"], loads_b=(p, p), train_flops=train_flops(p, tokens))


def calibdcd_perturbation(facts, model: str | None, dataset: str, **_) -> Work:
    calib = facts.config["calibdcd"]
    vp, lm = calib["detectors"]["veilprobe"], calib["lm"]
    models = vp.get("key_token_models") or [vp["key_token_model"]]
    sizes = [facts.params_b(m) for m in models]
    pool = facts.pool(dataset)
    if vp["perturbation"] != "original":
        return Work(params_b=sizes[0], dtype=lm["dtype"], loads_b=tuple(sizes),
                    forward_tokens=pool.rows * pool.tokens)
    n = min(pool.tokens, REFERENCE_CONTEXT) / (1 if vp["query"] == "text" else 2)
    batches = math.ceil((n + 1) / lm["batch_size"])
    return Work(params_b=sum(sizes), dtype=lm["dtype"], loads_b=(*sizes, facts.params_b(vp["mlm_model"])),
                forward_tokens=pool.rows * (n + 1) * vp["beams"] * n,
                passes=pool.rows * (len(models) * batches * vp["new_tokens"] + 1))


def calibdcd_features(facts, model: str, dataset: str, *, wildcards, **_) -> Work:
    calib = facts.config["calibdcd"]
    gen = calib["generation"]
    if wildcards["scope"] == ORIGINAL_SCOPE:
        inputs = {d: len(DETECTOR_INPUTS[d]) for d in calib["detectors"]}
        prompts = facts.pool(dataset).rows * sum(inputs.values())
        answers = facts.pool(dataset).rows * sum(inputs[d] * spec.get("continuations", 1)
                                                 for d, spec in calib["detectors"].items())
    else:
        views = len(controlled_views(calib["models"][model]["family"]))
        prompts = answers = facts.seeds * calib["partition"]["n_calibration"] * views
    p = facts.params_b(model)
    new = answers * gen["max_new_tokens"]
    generated = {"vllm_tokens": new} if gen["backend"] == "vllm" else \
        {"hf_tokens": new, "hf_batch": gen["backend_options"].get("batch_size", 64)}
    return Work(params_b=p, loads_b=(p,), engines=int(gen["backend"] == "vllm"),
                forward_tokens=prompts * facts.pool(dataset).tokens, **generated)


def calibdcd_veilprobe(facts, model: str, dataset: str, **_) -> Work:
    calib = facts.config["calibdcd"]
    mapping = calib["detectors"]["veilprobe"]["mapping"]
    p = mapping_params_b(mapping)
    pairs = facts.pool(dataset).rows * calib["detectors"]["veilprobe"]["continuations"]
    tokens = 2 * pairs * mapping["max_length"] * mapping["epochs"]   # two mapping models
    return Work(params_b=p, dtype=calib["lm"]["dtype"], loads_b=(p, p), train_flops=train_flops(p, tokens))


WORK = {"calibdcd_reference": calibdcd_reference, "calibdcd_perturbation": calibdcd_perturbation,
        "calibdcd_features": calibdcd_features, "calibdcd_veilprobe": calibdcd_veilprobe}
