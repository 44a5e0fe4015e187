"""What one job of the paraphrase rules computes (mialab.lm.cost, priced by mialab.pipeline.sizing): an LLM
paraphraser's rewrite of every prefix and every suffix (:func:`mialab.data.paraphrase.paraphrase_split`, two
answers a row, each at the options' ``max_new_tokens``) of one seed's split (``paraphrase``) or of the pool's
members (``paraphrase_pool``); an offline paraphraser runs on the CPU."""

from __future__ import annotations

import inspect

from mialab.data.paraphrase import engine_paraphraser
from mialab.lm.cost import Work

#: The paraphraser's answer length where the options leave it to the paraphraser.
MAX_NEW_TOKENS = inspect.signature(engine_paraphraser).parameters["max_new_tokens"].default


def rewrite_work(facts, dataset: str, rows: float) -> Work:
    para = facts.config["datasets"][dataset]["paraphrase"]
    if para["backend"] == "offline":
        return Work()
    options = para["options"]
    p = facts.params_b(options["model"])
    new = 2 * rows * options.get("max_new_tokens", MAX_NEW_TOKENS)
    generated = {"vllm_tokens": new} if para["backend"] == "vllm" else \
        {"hf_tokens": new, "hf_batch": options.get("batch_size", 64)}
    return Work(params_b=p, loads_b=(p,), engines=int(para["backend"] == "vllm"), **generated)


def paraphrase(facts, model: str | None, dataset: str, **_) -> Work:
    return rewrite_work(facts, dataset, facts.candidates(dataset))


def paraphrase_pool(facts, model: str | None, dataset: str, **_) -> Work:
    return rewrite_work(facts, dataset, facts.pool(dataset).members)


WORK = {"paraphrase": paraphrase, "paraphrase_pool": paraphrase_pool}
