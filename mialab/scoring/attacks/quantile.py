"""Quantile regression (Bertran et al. 2023, "Scalable Membership Inference Attacks via Quantile Regression",
arXiv:2307.03694; MIMIR ``mimir/attacks/quantile.py``): a small sequence-regression model learns, from known
non-members alone, the quantile of the target model's score that a non-member exceeds with probability
``alpha`` (the target false-positive rate); a text is flagged a member when its score exceeds the quantile
predicted for it. The score here: the target's mean token log-likelihood minus that predicted quantile.

Orientation (derivation). Let ``y`` be the target's mean token log-likelihood of a text (the ``loss`` column:
higher = member) and ``q`` a prediction. The pinball loss, as MIMIR's ``CustomTrainer.compute_loss`` writes it,

    L_alpha(q, y) = max(alpha * (q - y), (1 - alpha) * (y - q)),

has slope ``+alpha`` in ``q`` where ``y < q`` and ``-(1 - alpha)`` where ``y > q``; its expectation over the
non-members' ``y`` at ``x`` is minimised where ``alpha * P(y < q) = (1 - alpha) * P(y > q)``, i.e.
``P(y <= q) = 1 - alpha``: ``q(x)`` is the (1 - alpha)-quantile of the non-members' log-likelihood, and a
non-member's ``y`` exceeds it with probability ``alpha``. The test "member when ``y - q(x) > 0``" therefore has
false-positive rate ``alpha`` (the paper's test: the score exceeds the predicted (1 - alpha)-quantile of the
non-members' scores), and the score ``y - q(x)`` is higher for members, this project's convention.

MIMIR instead regresses its ``get_ll``, the mean token *loss* (``-y``, higher = non-member), with the same
``L_alpha``, so its regressor learns the (1 - alpha)-quantile of the loss (= minus the alpha-quantile of ``y``),
and returns ``quantile - loss`` commented "higher = non-member". Since ``L_alpha(q, y) = L_(1-alpha)(-q, -y)``,
MIMIR's returned value is this module's score computed at level ``1 - alpha`` (same sign: ``q_loss - loss =
y - q_y``), whose threshold 0 has false-positive rate ``1 - alpha``, not ``alpha``: the orientation here is the
paper's. MIMIR's class is unfinished (``super().__init__(self, config, model, ref_model)`` passes ``self``
twice; ``AllAttacks`` comments QUANTILE out as untested), so tests/test_attack_quantile.py compares the pieces
only: the pinball loss with ``CustomTrainer.compute_loss`` on the same tensors, and the score formula with
``QuantileAttack.attack`` given a regressor's prediction.

The regressor. ``scoring.quantile.model`` (MIMIR: ``Sreevishnu/funnel-transformer-small-imdb``): a configured
model's name (its folder a rule input; the tiny world's is a ``kind: mlm`` BERT) or a local folder / hub id,
loaded as ``AutoModelForSequenceClassification`` with one output (``num_labels=1``, ``problem_type
regression``; MIMIR loads funnel with two labels and swaps its last linear layer for a one-output one: the same
fresh one-output head), safetensors only, offline, never running a folder's own code, in float32. It trains
once per job (per (target model, dataset)), is never saved, on the known non-members only
(:meth:`mialab.scoring.attacks.Texts.known_nonmembers`: the pool's non-members in no seed's split; MIMIR's
``prepare(known_non_members)``), their targets the target model's mean log-likelihood as the ``loss`` column
computes it (``scoring.max_length``, ``scoring.truncation``; ``error`` reads a longer known non-member's first
``max_length`` tokens instead of failing). The loop is MIMIR's HF ``Trainer`` defaults written out in torch:
``epochs`` (1) epochs over the set reshuffled each epoch, batches of ``batch_size`` (8, the last one short),
AdamW (``lr`` 5e-5, betas 0.9 / 0.999, eps 1e-8, no weight decay), the learning rate decayed linearly to 0 over
all steps without warmup, gradients clipped to norm 1.0, dropout on; every text padded to ``max_length``
regressor tokens and cut there (MIMIR: ``padding="max_length"``, the tokenizer's own maximum). Everything random
(the head's initialisation, the order, dropout) draws from ``seed`` in a forked RNG, so a job's scores repeat.
Each text's quantile is predicted alone (eval mode), padded as in training (MIMIR predicts unpadded), so a score
depends on the text and the training set only.

Two departures from MIMIR's loss as it would run: its ``logits`` are ``[batch, 1]`` and the ``labels`` a
``[batch]`` vector, so ``logits - labels`` broadcasts to every (prediction, label) pair of the batch and each
prediction is pulled toward the batch's quantile whatever its text; here each prediction meets its own label
(the paper's loss). And there is no default ``alpha`` in either: MIMIR's constructor requires it, the authors'
code (github.com/amazon-science/quantile-mia) sweeps 41 log-spaced levels from 1e-4 to 1; the schema's 0.05 is
the larger of the evaluation's default FPR targets, a level a few hundred known non-members can estimate.

Settings ``scoring.quantile``: ``model``, ``alpha``, ``epochs``, ``lr``, ``batch_size``, ``max_length``, ``seed``.
Too few known non-members to train on (fewer than ``2 * batch_size``) is an error naming the keys.
"""

from __future__ import annotations

import math
import os

import numpy as np

from mialab.lm.logprobs import token_stats
from mialab.scoring.attacks import Attack, Texts, register

#: HF Trainer's defaults that MIMIR's training keeps (TrainingArguments: adam_beta1/2, adam_epsilon,
#: weight_decay, max_grad_norm)
BETAS, EPS, WEIGHT_DECAY, GRAD_CLIP = (0.9, 0.999), 1e-8, 0.0, 1.0


def pinball_loss(pred, target, alpha: float):
    """Mean over the rows of ``max(alpha * (pred - target), (1 - alpha) * (target - pred))`` (same shapes)."""
    import torch

    if pred.shape != target.shape:
        raise ValueError(f"pinball loss: predictions {tuple(pred.shape)} and targets {tuple(target.shape)} differ")
    return torch.mean(torch.maximum(alpha * (pred - target), (1 - alpha) * (target - pred)))


def min_known(settings: dict) -> int:
    """The fewest known non-members the regressor trains on: two batches."""
    return 2 * settings["batch_size"]


def load_regressor(path: str, device):
    """``(model, tokenizer)``: the sequence classifier of ``path`` with a fresh one-output regression head, fp32
    (the head's initialisation draws from torch's global RNG: seed it first)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from mialab.core.jobs import go_offline
    from mialab.lm.loading import load_pretrained, load_tokenizer

    go_offline()
    model = load_pretrained(AutoModelForSequenceClassification, path, num_labels=1, problem_type="regression",
                            ignore_mismatched_sizes=True, dtype=torch.float32)
    return model.to(device), load_tokenizer(path)


def encode(tokenizer, texts: list[str], max_length: int) -> dict:
    """The regressor's inputs: each text padded to and cut at ``max_length`` tokens."""
    return dict(tokenizer(texts, padding="max_length", truncation=True, max_length=max_length, return_tensors="pt"))


def train_regressor(model, inputs: dict, targets, *, alpha: float, epochs: int, lr: float, batch_size: int,
                    generator) -> list[float]:
    """Fit ``model``'s one output to the ``alpha`` pinball loss of ``targets`` (module doc: the Trainer defaults);
    the order from ``generator``. Returns each step's loss; leaves the model in eval mode."""
    import torch

    n = len(targets)
    steps = epochs * math.ceil(n / batch_size)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, (steps - s) / steps))
    device = next(model.parameters()).device
    targets = targets.to(device)
    losses = []
    model.train()
    with torch.enable_grad():
        for _ in range(epochs):
            order = torch.randperm(n, generator=generator)
            for begin in range(0, n, batch_size):
                rows = order[begin:begin + batch_size]
                pred = model(**{k: v[rows].to(device) for k, v in inputs.items()}).logits[:, 0]
                loss = pinball_loss(pred, targets[rows.to(device)], alpha)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
                losses.append(float(loss.detach()))
    model.eval()
    return losses


def predict(model, tokenizer, texts: list[str], max_length: int) -> np.ndarray:
    """The regressor's output on each text, alone (module doc)."""
    import torch

    device = next(model.parameters()).device
    out = np.empty(len(texts))
    with torch.inference_mode():
        for i, text in enumerate(texts):
            batch = encode(tokenizer, [text], max_length)
            out[i] = float(model(**{k: v.to(device) for k, v in batch.items()}).logits[0, 0])
    return out


def mean_loglik(model, tokenizer, texts: list[str], scoring: dict) -> np.ndarray:
    """The target's mean token log-likelihood of each text, as the ``loss`` column (``error`` truncates)."""
    truncation = "truncate" if scoring["truncation"] == "error" else scoring["truncation"]
    stats = token_stats(model, tokenizer, texts, max_length=scoring["max_length"], truncation=truncation,
                        description="quantile targets")
    return np.array([float(np.mean(st.logp)) for st in stats])


@register
class Quantile(Attack):
    name = "quantile"

    def check(self, scoring: dict) -> str | None:
        if "model" not in scoring[self.name]:
            return ("scoring.quantile.model: the quantile regressor's base model (a configured model name, or a local "
                    "path / hub id; MIMIR: Sreevishnu/funnel-transformer-small-imdb)")
        return None

    def regressor_name(self, plan) -> str:
        return plan.config["scoring"][self.name]["model"]

    def inputs(self, plan, dataset: str) -> dict[str, str]:
        from mialab.pipeline.config import ConfigError, model_reference

        out = {"pool": plan.pool(dataset).path("pool.parquet")}
        name = self.regressor_name(plan)
        spec = plan.config["models"].get(name)
        if spec is None:   # a local folder (checked) or a hub id org/name (prefetched), loaded by that name
            model_reference("scoring.quantile.model", name, plan.config["models"])
            return out
        if plan.is_built(name):
            return {**out, "regressor": plan.model_path(name)}
        if spec.get("trust_remote_code"):
            raise ConfigError(f"scoring.quantile.model: model {name} sets trust_remote_code; the quantile "
                              "regressor never runs a model folder's own code")
        if not os.path.isdir(spec["path"]):
            raise ConfigError(f"scoring.quantile.model: model {name} is the hub id {spec['path']}; name the hub id "
                              "itself in scoring.quantile.model (rule prefetch fetches it)")
        return {**out, "regressor": spec["path"]}

    def work(self, facts, dataset: str) -> dict:
        """The target's pass over the known non-members, and the regressor: loaded, trained ``epochs`` times on
        them, run once on every text (each at ``max_length`` tokens)."""
        from mialab.lm.cost import train_flops

        scoring, spec = facts.config["scoring"], facts.config["scoring"][self.name]
        pool = facts.pool(dataset)   # the known non-members: at most the pool's less one split's (errs high)
        known = max(pool.rows - pool.members - facts.config["datasets"][dataset]["split"]["n_per_class"],
                    min_known(spec))
        p = facts.params_b(spec["model"])
        flops = train_flops(p, spec["epochs"] * known * spec["max_length"]) \
            + 2 * p * 1e9 * facts.texts(dataset) * spec["max_length"]
        return {"loads_b": (p,), "scored_texts": known, "scored_tokens": known * scoring["max_length"],
                "train_flops": flops}

    def training_set(self, texts: Texts):
        """The known non-members the regressor learns from (``id``, ``text``), at least :func:`min_known`."""
        spec = texts.settings(self.name)
        known = texts.known_nonmembers()
        if len(known) < min_known(spec):
            raise ValueError(f"scoring.quantile: pool {texts.inputs['pool']} has {len(known)} non-member(s) outside the "
                             f"seeds' splits, fewer than 2 * scoring.quantile.batch_size = {min_known(spec)} to train "
                             "the quantile regressor on; lower scoring.quantile.batch_size or split.n_per_class, or "
                             "use fewer seeds")
        return known

    def fit(self, texts: Texts):
        """``(regressor, tokenizer, step losses)`` trained on :meth:`training_set` (module doc)."""
        import torch

        spec = texts.settings(self.name)
        known = self.training_set(texts)
        targets = torch.tensor(mean_loglik(texts.model, texts.tokenizer, known["text"].tolist(), texts.scoring),
                               dtype=torch.float32)
        device = next(texts.model.parameters()).device
        path = texts.inputs.get("regressor") or spec["model"]
        forked = [device.index if device.index is not None else torch.cuda.current_device()] \
            if device.type == "cuda" else []
        with torch.random.fork_rng(devices=forked):
            torch.manual_seed(spec["seed"])
            model, tok = load_regressor(path, device)
            positions = getattr(model.config, "max_position_embeddings", None)
            if positions is not None and spec["max_length"] > positions:
                raise ValueError(f"scoring.quantile.max_length = {spec['max_length']} exceeds the regressor's "
                                 f"{positions} positions ({path})")
            losses = train_regressor(model, encode(tok, known["text"].tolist(), spec["max_length"]), targets,
                                     alpha=spec["alpha"], epochs=spec["epochs"], lr=spec["lr"],
                                     batch_size=spec["batch_size"],
                                     generator=torch.Generator().manual_seed(spec["seed"]))
        return model, tok, losses

    def score(self, texts: Texts) -> np.ndarray:
        spec = texts.settings(self.name)
        model, tok, _ = self.fit(texts)
        q = predict(model, tok, texts.texts, spec["max_length"])
        return np.array([float(np.mean(st.logp)) for st in texts.stats]) - q
