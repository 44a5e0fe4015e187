"""What one ``score_baselines`` job computes (mialab.lm.cost, priced by mialab.pipeline.sizing): one model's
forward pass over every distinct text of every seed's split of one dataset, one text a pass, each at
``scoring.max_length`` tokens (the passive baselines all read the same log-probabilities)."""

from __future__ import annotations

from mialab.lm.cost import Work


def score_baselines(facts, model: str, dataset: str, **_) -> Work:
    scoring = facts.config["scoring"]
    texts, p = facts.texts(dataset), facts.params_b(model)
    return Work(params_b=p, dtype=scoring["dtype"], loads_b=(p,), scored_texts=texts,
                scored_tokens=texts * scoring["max_length"])


WORK = {"score_baselines": score_baselines}
