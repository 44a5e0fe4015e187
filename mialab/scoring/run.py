"""Score one split with one model: the stage behind rule ``score_baselines``."""

from __future__ import annotations

import pandas as pd

from mialab.models.loading import load_causal_lm, load_tokenizer
from mialab.scoring.baselines import r_loss, score_texts
from mialab.scoring.loglik import token_stats


def score_split(model_path: str, split: pd.DataFrame, spec: dict, *,
                reference_scores: pd.DataFrame | None = None) -> pd.DataFrame:
    """A table ``id, label, n_tokens, <method columns>`` (higher = more likely a member).

    ``r_loss`` is added when a reference model's score table for the same split is given; the
    two tables are matched by ``id``, and a missing id is an error.
    """
    tok = load_tokenizer(model_path, padding_side="right")
    model = load_causal_lm(model_path, dtype=spec["dtype"], device=spec["device"])
    texts = split["text"].tolist()
    stats = token_stats(model, tok, texts, batch_size=spec["batch_size"], max_length=spec["max_length"])
    out = pd.DataFrame({"id": split["id"].to_numpy(), "label": split["label"].to_numpy(),
                        "n_tokens": [len(s.logp) + 1 for s in stats]})
    for name, col in score_texts(stats, texts, spec["methods"], spec["k"]).items():
        out[name] = col
    if "r_loss" in spec["methods"] and reference_scores is not None:
        ref = reference_scores.set_index("id")["loss"]
        missing = set(out["id"]) - set(ref.index)
        if missing:
            raise ValueError(f"reference scores lack {len(missing)} id(s) of this split, e.g. {sorted(missing)[:3]}")
        out["r_loss"] = r_loss(out["loss"].to_numpy(), ref.loc[out["id"]].to_numpy())
    return out
