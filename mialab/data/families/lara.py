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

:func:`mialab.data.rl_corpus.build_rl_corpus` builds the paper's continued-RL corpus: the split's members (the
deliberate contamination targets) plus fillers (RL-MIA Math olympiad problems in the paper) up to
``size`` (default 1000) problems, seeded; no filler repeats a problem of the split.
"""

from __future__ import annotations

import pandas as pd

from mialab.data.families._common import drop_blank, drop_duplicate_texts, pretraining_pool
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
                            ratio=float(spec["prefix_ratio"]), rounding=spec["prefix_rounding"], labels=raw["label"],
                            extra={"group": raw["group"], "answer": raw["answer"]})
    return drop_duplicate_texts(pool, family="lara_rl")


