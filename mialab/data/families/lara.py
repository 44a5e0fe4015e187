"""LaRA RL-contamination sets (Gwak et al.; section 4 and appendix C of the LaRA paper).

Per target model, members are olympiad-level problems from that model's own RL training set
(``source``) and non-members are held-out problems (``nonmember_source``; the paper uses AIME
2026, shared by all models). Both need a problem and its answer (``problem_column``, default
``problem``; ``answer_column``, default ``answer``); ``model`` names the member group. The paper
samples 30 + 30 problems per model: :func:`mialab.data.sampling.sample_split` with
``n_per_class=30`` does that, and because its draw per class depends only on that class's rows,
models that share the non-member file share the non-member split.

Prefix rule: LaRA reads ``text`` (the problem, whitespace-normalised) and ignores the cut; for
reconstruction attacks run on the same split, the first ``prefix_ratio`` (default 0.5) of the
problem's words are the prefix. The pool keeps an extra ``answer`` column, which the RL corpus
needs for its rewards.

:func:`build_rl_corpus` builds the paper's continued-RL corpus: the split's members (the
deliberate contamination targets) plus fillers (RL-MIA Math olympiad problems in the paper) up to
``size`` (default 1000) problems, seeded; no filler repeats a problem of the split.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mialab.data.families._common import content_id, drop_blank, drop_duplicate_texts, pretraining_pool
from mialab.data.registry import register_family
from mialab.data.sources import describe, read_table, require_columns


def read_problems(source: str | dict, *, problem_column: str, answer_column: str) -> pd.DataFrame:
    """Columns ``problem`` (whitespace-normalised) and ``answer`` of a math-problem file."""
    raw = read_table(source)
    require_columns(raw, [problem_column, answer_column], source=source)
    raw = drop_blank(raw, [problem_column, answer_column], family="lara_rl")
    return pd.DataFrame({"problem": raw[problem_column].map(lambda p: " ".join(str(p).split())),
                         "answer": raw[answer_column].astype(str).str.strip()})


@register_family("lara_rl")
def load_pool(spec: dict) -> pd.DataFrame:
    """Members from the model's RL training set, non-members from held-out problems."""
    cols = dict(problem_column=spec["problem_column"], answer_column=spec["answer_column"])
    parts = []
    for label, key, group in ((1, "source", spec["model"]), (0, "nonmember_source", "heldout")):
        parts.append(read_problems(spec[key], **cols).assign(label=label, source=describe(spec[key]), group=group))
    raw = pd.concat(parts, ignore_index=True)
    pool = pretraining_pool(raw["problem"], family="lara_rl", source=raw["source"],
                            ratio=float(spec["prefix_ratio"]), labels=raw["label"],
                            extra={"group": raw["group"], "answer": raw["answer"]})
    return drop_duplicate_texts(pool, family="lara_rl")


def build_rl_corpus(split: pd.DataFrame, fillers: pd.DataFrame, *, size: int = 1000, seed: int = 0,
                    problem_column: str = "problem", answer_column: str = "answer") -> pd.DataFrame:
    """RL training corpus of ``size`` problems: every member of ``split`` plus seeded fillers.

    ``split`` is a sampled ``lara_rl`` split (columns ``text``, ``answer``, ``label``); fillers
    equal (after whitespace normalisation) to any problem of the split, member or non-member, are
    excluded so non-members stay unseen. Returns ``id, problem, answer, target, source`` in a
    seeded random order; ``target`` marks the contamination targets.
    """
    require_columns(split, ["id", "text", "answer", "label"], source="lara_rl split")
    require_columns(fillers, [problem_column, answer_column], source="filler problems")
    targets = split[split["label"] == 1]
    n_fill = size - len(targets)
    if n_fill < 0:
        raise ValueError(f"lara_rl: corpus size {size} is smaller than the {len(targets)} members")
    pool = pd.DataFrame({"problem": fillers[problem_column].map(lambda p: " ".join(str(p).split())),
                         "answer": fillers[answer_column].astype(str).str.strip()})
    pool = pool[~pool["problem"].isin(set(split["text"])) & (pool["problem"] != "")].drop_duplicates("problem")
    pool["id"] = [content_id("lara_rl-filler", p) for p in pool["problem"]]
    pool = pool.sort_values("id").reset_index(drop=True)
    if len(pool) < n_fill:
        raise ValueError(f"lara_rl: {n_fill} fillers needed, only {len(pool)} distinct problems not in the split")
    rng = np.random.default_rng(seed)
    chosen = pool.iloc[np.sort(rng.choice(len(pool), size=n_fill, replace=False))]
    corpus = pd.concat([
        pd.DataFrame({"id": targets["id"], "problem": targets["text"], "answer": targets["answer"],
                      "target": True, "source": targets["source"]}),
        chosen.assign(target=False, source="filler")[["id", "problem", "answer", "target", "source"]],
    ], ignore_index=True)
    return corpus.iloc[rng.permutation(len(corpus))].reset_index(drop=True)
