"""Score splits with one model: the stage behind rule ``score_baselines``."""

from __future__ import annotations

import pandas as pd

from mialab.lm.loading import load_causal_lm, load_tokenizer
from mialab.lm.logprobs import token_stats
from mialab.core.finite import require_finite
from mialab.scoring.attacks import ATTACKS, Texts
from mialab.scoring.baselines import attacks_of, r_loss, score_texts


def distinct_texts(splits: list[pd.DataFrame]) -> pd.DataFrame:
    """``id``, ``text`` of every distinct text of ``splits`` (splits of one pool), in order of first appearance;
    an id whose text differs between splits is an error (the splits would not come from one pool)."""
    texts = pd.concat([s[["id", "text"]] for s in splits]).drop_duplicates()
    clash = texts["id"][texts["id"].duplicated()]
    if len(clash):
        raise ValueError(f"{len(clash)} id(s) have different texts in different splits, e.g. {sorted(clash)[:3]}")
    return texts.reset_index(drop=True)


def score_split(model_path: str, split: pd.DataFrame, spec: dict, *,
                reference_scores: pd.DataFrame | None = None, trust_remote_code: bool = False) -> pd.DataFrame:
    """A table ``id, label, n_tokens, truncated, <method columns>`` (higher = more likely a member).

    ``n_tokens``: the tokens scored; ``truncated``: the text was longer than ``spec["max_length"]``
    and only its start was scored (``spec["truncation"]``, :mod:`mialab.lm.logprobs`).

    ``r_loss`` is added when a reference model's score table for the same split is given; the
    two tables are matched by ``id``, and a missing id is an error. ``trust_remote_code``: the
    model's ``models.<name>.trust_remote_code``.
    """
    refs = None if reference_scores is None else [reference_scores]
    return score_splits(model_path, [split], spec, reference_scores=refs, trust_remote_code=trust_remote_code)[0]


def score_splits(model_path: str, splits: list[pd.DataFrame], spec: dict, *,
                 reference_scores: list[pd.DataFrame] | None = None, trust_remote_code: bool = False,
                 attack_inputs: dict[str, dict] | None = None) -> list[pd.DataFrame]:
    """:func:`score_split` of several splits of one pool, each distinct text scored once.

    Splits of one pool share ids (:func:`distinct_texts`). ``reference_scores``: one table per split, or None.
    ``attack_inputs``: each scoring attack's input files by name (:meth:`mialab.scoring.attacks.Attack.inputs`).
    """
    texts = distinct_texts(splits)
    tok = load_tokenizer(model_path, padding_side="right", trust_remote_code=trust_remote_code)
    model = load_causal_lm(model_path, dtype=spec["dtype"], device=spec["device"], trust_remote_code=trust_remote_code)
    distinct = texts["text"].tolist()
    stats = token_stats(model, tok, distinct, max_length=spec["max_length"], truncation=spec["truncation"],
                        names=texts["id"].tolist())
    scored = pd.DataFrame({"id": texts["id"].to_numpy(), "n_tokens": [len(s.logp) + 1 for s in stats],
                           "truncated": [s.truncated for s in stats]})
    for name, col in score_texts(stats, distinct, spec["methods"], spec["k"]).items():
        scored[name] = col
    job = Texts(model, tok, distinct, texts["id"].tolist(), stats, spec,
                split_ids=frozenset(i for s in splits for i in s["id"]))
    for name in attacks_of(spec):
        job.inputs = (attack_inputs or {}).get(name, {})
        scored[name] = require_finite(f"method {name}: scores", ATTACKS.get(name).score(job), FloatingPointError)
    scored = scored.set_index("id")
    out = []
    for i, split in enumerate(splits):
        table = pd.concat([split[["id", "label"]].reset_index(drop=True),
                           scored.loc[split["id"]].reset_index(drop=True)], axis=1)
        if "r_loss" in spec["methods"] and reference_scores is not None:
            ref = reference_scores[i].set_index("id")["loss"]
            missing = set(table["id"]) - set(ref.index)
            if missing:
                raise ValueError(f"reference scores lack {len(missing)} id(s) of this split, e.g. {sorted(missing)[:3]}")
            table["r_loss"] = r_loss(table["loss"].to_numpy(), ref.loc[table["id"]].to_numpy())
        out.append(table)
        warn_truncated(table, spec, f"split {i}")
    return out


def warn_truncated(table: pd.DataFrame, spec: dict, what: str) -> None:
    """A warning on stderr when more than ``scoring.truncation_warn`` of a split's texts were cut."""
    import sys

    if table["truncated"].mean() > spec["truncation_warn"]:
        print(f"mialab: warning: {what}: {int(table['truncated'].sum())} of {len(table)} texts are longer than "
              f"scoring.max_length = {spec['max_length']} tokens and were scored on their first "
              f"{spec['max_length']} only (scoring.truncation: truncate; sliding_window scores every token)",
              file=sys.stderr)
