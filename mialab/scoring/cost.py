"""What one ``score_baselines`` job computes (mialab.lm.cost, priced by mialab.pipeline.sizing): one model's
forward pass over every distinct text of every seed's split of one dataset, one text a pass, each at
``scoring.max_length`` tokens (the passive baselines all read the same log-probabilities), plus each scoring
attack's extra forward passes and, for one that backpropagates (GradNorm), a forward and backward pass a text
(its gradients fit beside the weights on the job's one GPU), and what an attack adds besides
(:meth:`mialab.scoring.attacks.Attack.work`: the quantile attack's regressor, loaded, trained and run; the
neighbourhood attack's target passes over its neighbours). A ``prepare_attack`` job computes one attack's
per-dataset work (:meth:`mialab.scoring.attacks.Attack.prepare_work`: the neighbourhood attack's fill-mask model,
loaded, and its passes)."""

from __future__ import annotations

from mialab.lm.cost import Work, train_flops
from mialab.scoring.attacks import ATTACKS
from mialab.scoring.baselines import attacks_of


def score_baselines(facts, model: str, dataset: str, **_) -> Work:
    scoring = facts.config["scoring"]
    texts, p = facts.texts(dataset), facts.params_b(model)
    attacks = [ATTACKS.get(a) for a in attacks_of(scoring)]
    passes = 1 + sum(a.passes(scoring) for a in attacks)
    tokens = texts * scoring["max_length"]
    extra = [a.work(facts, dataset) for a in attacks]
    more = lambda key, zero=0: sum((e.get(key, zero) for e in extra), zero)  # noqa: E731
    return Work(params_b=p, dtype=scoring["dtype"], loads_b=(p, *more("loads_b", ())), passes=more("passes"),
                scored_texts=texts * passes + more("scored_texts"), scored_tokens=tokens * passes + more("scored_tokens"),
                train_flops=train_flops(p, tokens * sum(a.backward for a in attacks)) + more("train_flops"))


def prepare_attack(facts, model: str | None, dataset: str, wildcards, **_) -> Work:
    return Work(**ATTACKS.get(wildcards["attack"]).prepare_work(facts, dataset))


WORK = {"score_baselines": score_baselines, "prepare_attack": prepare_attack}
