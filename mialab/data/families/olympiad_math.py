"""Olympiad Math (ADRA appendix B.3; AI-MO ``olympiads-ref``): olympiad problems with reference
solutions, post-training (SFT contamination) style.

Source (hub ``AI-MO/olympiads-ref`` or a local file of that shape): columns ``problem`` and
``solution`` (``problem_column`` / ``solution_column`` to rename). The set was released in 2025,
so membership is a seeded random partition of the problems (``membership: {rule: random,
fraction: 0.5, seed: 0}``, the default): members are fine-tuned on, non-members held out.
Prefix rule: the full problem plus the first ``solution_prefix_ratio`` (default 0.25) of the
solution's words; ``max_words`` optionally caps the solution. A problem without a solution has no
suffix: an error, unless ``missing_solution: drop`` (logged).
"""

from __future__ import annotations

import pandas as pd

from mialab.data.families._common import drop_blank, drop_duplicate_texts, request_response_pool
from mialab.data.membership import apply_membership
from mialab.data.registry import register_family
from mialab.data.sources import read_table, require_columns


@register_family("olympiad_math")
def load_pool(spec: dict) -> pd.DataFrame:
    """Every problem with a solution as a candidate, labelled by a seeded random partition."""
    src = spec["source"]
    pcol, scol = spec["problem_column"], spec["solution_column"]
    raw = read_table(src)
    require_columns(raw, [pcol, scol], source=src)
    raw = drop_blank(raw, [pcol, scol], family="olympiad_math", on_blank=spec["missing_solution"],
                     hint="; no suffix to reconstruct: set missing_solution: drop to skip them")
    pool = request_response_pool(raw[pcol].astype(str), raw[scol].astype(str), family="olympiad_math", source=src,
                                  ratio=float(spec["solution_prefix_ratio"]), rounding=spec["prefix_rounding"],
                                  max_words=spec.get("max_words"))
    pool = drop_duplicate_texts(pool, family="olympiad_math")
    return apply_membership(pool, spec["membership"])
