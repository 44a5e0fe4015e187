"""LaRA RL-contamination sets (Gwak et al.; section 4 and appendix C of the LaRA paper).

Per target model, members are olympiad-level problems from that model's own RL training set
(``source``) and non-members are held-out problems (``nonmember_source``; the paper uses AIME
2026, shared by all models), or both come from one table labelled by its ``label_column`` (1 member, 0
non-member): the LaRA authors' benchmark files (``benchmarks/*/<model>_member.parquet`` of their repository,
column ``member``), to which ``nonmember_source`` may add further held-out problems (read with
``nonmember_columns``, ``{problem, answer}``, where its columns are named otherwise). Every row needs a problem
and its answer (``problem_column``, default ``problem``;
``answer_column``, default ``answer``; a column may be a path into its cells, e.g. ``prompt[-1].content``, the
last chat turn, as the LaRA code reads a prompt: :func:`mialab.data.sources.column_values`); ``model`` names
the member group. ``instruction_suffix``: an instruction every question of ``source`` ends with (the benchmark
files' answer-format line), removed so that every problem, whatever its file, is the bare problem; the paper
config's templates put the line back on all of them alike. The paper samples 30 + 30 problems per model: :func:`mialab.data.sampling.sample_split` with
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
from mialab.data.sources import column_values, describe, read_table, require_columns, require_labels


def strip_instruction(problems: pd.Series, suffix: str, *, source) -> pd.Series:
    """``problems`` (whitespace-normalised) without the instruction ``suffix`` every one of them must end with (a
    benchmark's answer-format line: its prompts add it to the problem); a problem without it names its row."""
    tail = " ".join(suffix.split())
    lacking = [i for i, p in problems.items() if not p.endswith(tail)]
    if lacking:
        raise ValueError(f"{describe(source)}: row {lacking[0]} ({len(lacking)} row(s) in all) does not end with "
                         f"instruction_suffix {suffix!r}; name the file's own suffix, or none")
    return problems.str[:-len(tail)].str.rstrip()


def read_problems(source: str | dict, *, problem_column: str, answer_column: str,
                  label_column: str | None = None, instruction_suffix: str | None = None) -> pd.DataFrame:
    """Columns ``problem`` (whitespace-normalised, without ``instruction_suffix``: :func:`strip_instruction`) and
    ``answer`` of a math-problem file, and ``label`` (its ``label_column``) when one is named; rows with a blank
    problem or answer are dropped (logged)."""
    raw = read_table(source)
    out = pd.DataFrame({"problem": column_values(raw, problem_column, source=source),
                        "answer": column_values(raw, answer_column, source=source)})
    if label_column is not None:
        require_columns(raw, [label_column], source=source)
        out["label"] = require_labels(raw, label_column, source=source).to_numpy()
    out = drop_blank(out, ["problem", "answer"], family="lara_rl")
    out = out.assign(problem=out["problem"].map(lambda p: " ".join(str(p).split())),
                     answer=out["answer"].astype(str).str.strip())
    if instruction_suffix:
        out["problem"] = strip_instruction(out["problem"], instruction_suffix, source=source)
    return out


@register_family("lara_rl")
def load_pool(spec: dict) -> pd.DataFrame:
    """Members from the model's RL training set, non-members from held-out problems (or both from one labelled
    table)."""
    cols = dict(problem_column=spec["problem_column"], answer_column=spec["answer_column"])
    if "label_column" not in spec and "nonmember_source" not in spec:
        raise ValueError("lara_rl: name the non-members: nonmember_source, or the rows of source whose label_column "
                         "is 0 (or both)")
    parts = []
    own = {"instruction_suffix": spec.get("instruction_suffix")}   # source's, not the added non-members'
    if "label_column" in spec:
        part = read_problems(spec["source"], **cols, **own, label_column=spec["label_column"])
        parts.append(part.assign(source=describe(spec["source"]), group=part["label"].map({1: spec["model"],
                                                                                          0: "heldout"})))
    else:
        parts.append(read_problems(spec["source"], **cols, **own).assign(label=1, source=describe(spec["source"]),
                                                                 group=spec["model"]))
    if "nonmember_source" in spec:
        other = {f"{k}_column": v for k, v in spec.get("nonmember_columns", {}).items()}
        parts.append(read_problems(spec["nonmember_source"], **{**cols, **other}).assign(
            label=0, source=describe(spec["nonmember_source"]), group="heldout"))
    raw = pd.concat(parts, ignore_index=True)
    pool = pretraining_pool(raw["problem"], family="lara_rl", source=raw["source"],
                            ratio=float(spec["prefix_ratio"]), rounding=spec["prefix_rounding"], labels=raw["label"],
                            extra={"group": raw["group"], "answer": raw["answer"]})
    return drop_duplicate_texts(pool, family="lara_rl")


