"""S1 / S1.1 distillation (ADRA appendix B.4; Muennighoff et al. 2025): one problem, two teachers.

Source (hub ``simplescaling/s1K-1.1`` or a local file of its shape): ``question`` and, per
teacher, a thinking trace and a final attempt: ``gemini_thinking_trajectory`` /
``gemini_attempt`` (Gemini-2.0-Flash, S1) and ``deepseek_thinking_trajectory`` /
``deepseek_attempt`` (DeepSeek-R1, S1.1); ``teachers`` maps other names to other columns (a
list-valued trace, as in the original s1K, is joined by newlines). The student is distilled on
one teacher's traces: ``member_teacher`` (``s1``: gemini, ``s1_1``: deepseek) gives the members,
``nonmember_teacher`` (default: the other one) the non-members.

Prefix rule: the problem only. Member and non-member share that prefix and differ in the suffix,
``target``: the teacher's final ``attempt`` (default: the released code's target, its
``deepseek_attempt`` / ``gemini_attempt``), its thinking ``trace``, or ``trace_and_attempt`` (the
trace followed by the attempt, the whole output); ``max_words`` optionally caps the suffix
(whitespace is normalised, as in the other families). Both rows of a
problem share ``pair_id``; ``group`` names the teacher. ``text`` is the problem and the suffix
joined by a blank line.
"""

from __future__ import annotations

import logging

import pandas as pd

from mialab.data.families._common import as_text, content_id, drop_blank, drop_duplicate_texts, drop_exact_repeats
from mialab.data.registry import register_family
from mialab.data.sources import describe, read_table, require_columns
from mialab.text.prefix import truncate_words

log = logging.getLogger(__name__)

TARGETS = {"attempt": slice(1, 2), "trace": slice(0, 1), "trace_and_attempt": slice(0, 2)}


def target_columns(columns: list[str], target: str, *, family: str, teacher: str) -> list[str]:
    """The columns of a teacher's ``[trace, attempt]`` that make the suffix under ``target`` (a schema enum)."""
    parts = columns[TARGETS[target]]
    if len(parts) != TARGETS[target].stop - TARGETS[target].start:
        raise ValueError(f"{family}: target {target!r} needs teacher {teacher!r} to name "
                         f"[trace column, attempt column], got {columns}")
    return parts


def teacher_rows(raw: pd.DataFrame, *, family: str, teacher: str, parts: list[str], qcol: str, label: int,
                 max_words: int | None, source: str) -> pd.DataFrame:
    """One candidate per problem: the problem as prefix, this teacher's ``parts`` columns joined as suffix."""
    suffix = raw[parts].apply(lambda r: " ".join(" ".join(as_text(r[c]).split()) for c in parts), axis=1)
    suffix = suffix.map(lambda s: truncate_words(s, max_words))
    prefix = raw[qcol].astype(str).str.strip()
    rows = pd.DataFrame({"prefix": prefix, "suffix": suffix, "text": prefix + "\n\n" + suffix,
                         "label": label, "source": source, "group": teacher,
                         "pair_id": prefix.map(lambda q: content_id(f"{family}-pair", q))})
    rows["id"] = [content_id(family, t) for t in rows["text"]]
    return rows


def s1_pool(spec: dict, *, family: str) -> pd.DataFrame:
    """Paired candidates: ``member_teacher``'s trace (label 1) and the other teacher's (label 0)."""
    src = spec["source"]
    teachers, member = spec["teachers"], spec["member_teacher"]
    others = [t for t in teachers if t != member]
    nonmember = spec.get("nonmember_teacher", others[0] if len(others) == 1 else None)
    for name in (member, nonmember):
        if name not in teachers:
            raise KeyError(f"{family}: unknown or unset teacher {name!r}; known teachers: {sorted(teachers)}")
    if member == nonmember:
        raise ValueError(f"{family}: member and non-member teacher are both {member!r}")
    qcol = spec["question_column"]
    parts = {t: target_columns(teachers[t], spec["target"], family=family, teacher=t) for t in (member, nonmember)}
    needed = [qcol] + [c for t in (member, nonmember) for c in parts[t]]
    raw = read_table(src)
    require_columns(raw, needed, source=src)
    raw = drop_blank(raw, needed, family=family)
    raw = drop_exact_repeats(raw, qcol, family=family, what="repeated problem(s) (a pair needs one row per problem)")
    common = dict(family=family, qcol=qcol, max_words=spec.get("max_words"), source=describe(src))
    pool = pd.concat([teacher_rows(raw, teacher=member, parts=parts[member], label=1, **common),
                      teacher_rows(raw, teacher=nonmember, parts=parts[nonmember], label=0, **common)],
                     ignore_index=True)
    return drop_duplicate_texts(pool, family=family)


@register_family("s1")
def load_s1(spec: dict) -> pd.DataFrame:
    """S1: Gemini-2.0-Flash traces are the members by default."""
    return s1_pool(spec, family="s1")


@register_family("s1_1")
def load_s1_1(spec: dict) -> pd.DataFrame:
    """S1.1: DeepSeek-R1 traces are the members by default."""
    return s1_pool(spec, family="s1_1")
