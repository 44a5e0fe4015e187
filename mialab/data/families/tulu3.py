"""Tulu3 SFT mix subsets, Aya and WildChat (ADRA appendix B.2): post-training mixture style.

Members: the single-turn conversations of the Tulu3 SFT mix (``source``: hub ``allenai/tulu-3-sft-mixture`` or
a local file of its shape, columns ``messages`` = list of ``{role, content}`` and ``source``) whose ``source``
value is one of ``member_sources`` (default for ``subset: aya`` ``ai2-adapt-dev/tulu_v3.9_aya_100k``, for
``subset: wildchat`` ``ai2-adapt-dev/tulu_v3.9_wildchat_100k``); ``member_sources: []`` takes every row, for a
table of the subset alone (the ADRA authors' processed member sets, e.g. ``ADRA-RL/tulu-aya-processed``).
Non-members: ``nonmember_source``, conversations of the original dataset that the mix left out (e.g.
``allenai/tulu-3-wildchat-unused``), in the ``messages`` shape or, with ``nonmember_columns: {user: inputs,
assistant: targets}``, as two text columns (the Aya dataset's own shape).

Single-turn only: exactly one user turn followed by one assistant turn. Both turns are limited to
``max_turn_tokens`` (default 1024): a conversation with a longer turn is dropped (logged), so
members and non-members share the same length range. Tokens are counted with ``tokenizer`` (a
tokenizer path, e.g. the target's) when given, else whitespace-separated words are the offline
proxy. Prefix rule: the full user request plus the first ``response_prefix_ratio`` (default 0.25)
of the response's words.
"""

from __future__ import annotations

import logging
from typing import Callable

import pandas as pd

from mialab.data.families._common import drop_blank, drop_duplicate_texts, request_response_pool
from mialab.data.registry import register_family
from mialab.data.sources import describe, read_table, require_columns

log = logging.getLogger(__name__)

MEMBER_SOURCES = {
    "aya": ["ai2-adapt-dev/tulu_v3.9_aya_100k"],
    "wildchat": ["ai2-adapt-dev/tulu_v3.9_wildchat_100k"],
}


def single_turn(messages) -> tuple[str, str] | None:
    """``(user, assistant)`` when ``messages`` is exactly one user then one assistant turn, else None."""
    turns = list(messages) if messages is not None else []
    if [m.get("role") for m in turns] != ["user", "assistant"]:
        return None
    return str(turns[0].get("content") or ""), str(turns[1].get("content") or "")


def length_counter(tokenizer: str | None) -> Callable[[str], int]:
    """Turn length in tokens of ``tokenizer`` (a path), or in whitespace words when None."""
    if tokenizer is None:
        return lambda s: len(s.split())
    from mialab.lm.loading import load_tokenizer

    tok = load_tokenizer(tokenizer)
    return lambda s: len(tok(s, add_special_tokens=False)["input_ids"])


def conversations(df: pd.DataFrame, *, source: str, columns: dict | None) -> pd.DataFrame:
    """Columns ``user`` and ``assistant`` of the single-turn rows of ``df`` (others logged, dropped)."""
    if columns is not None:
        require_columns(df, [columns["user"], columns["assistant"]], source=source)
        return pd.DataFrame({"user": df[columns["user"]], "assistant": df[columns["assistant"]]})
    require_columns(df, ["messages"], source=source)
    turns = df["messages"].map(single_turn)
    multi = turns.isna()
    if multi.any():
        log.warning("tulu3: %s: dropped %d conversation(s) that are not single-turn", describe(source), int(multi.sum()))
    turns = turns[~multi]
    return pd.DataFrame({"user": turns.str[0], "assistant": turns.str[1]}).reset_index(drop=True)


@register_family("tulu3")
def load_pool(spec: dict) -> pd.DataFrame:
    """Single-turn members from the mix and non-members from the excluded rows."""
    subset = spec.get("subset")
    if "member_sources" not in spec and subset not in MEMBER_SOURCES:
        raise KeyError(f"tulu3: set 'subset' (known: {sorted(MEMBER_SOURCES)}) or 'member_sources'")
    wanted = spec.get("member_sources", MEMBER_SOURCES.get(subset))
    mix = read_table(spec["source"])
    if wanted:   # [] : every row is a member (a table of the subset alone)
        require_columns(mix, ["messages", "source"], source=spec["source"])
        mix = mix[mix["source"].isin(wanted)]
    if mix.empty:
        raise ValueError(f"tulu3: no row of {describe(spec['source'])} has source in {wanted}")
    members = conversations(mix, source=spec["source"], columns=None)
    nonmembers = conversations(read_table(spec["nonmember_source"]),
                               source=spec["nonmember_source"], columns=spec.get("nonmember_columns"))
    raw = pd.concat([members.assign(label=1, source=describe(spec["source"])),
                     nonmembers.assign(label=0, source=describe(spec["nonmember_source"]))], ignore_index=True)
    raw = drop_blank(raw, ["user", "assistant"], family="tulu3")
    count, cap = length_counter(spec.get("tokenizer")), int(spec["max_turn_tokens"])
    fits = raw["user"].map(count).le(cap) & raw["assistant"].map(count).le(cap)
    if not fits.all():
        log.warning("tulu3: dropped %d conversation(s) with a turn over %d tokens", int((~fits).sum()), cap)
    raw = raw[fits].reset_index(drop=True)
    pool = request_response_pool(raw["user"].astype(str), raw["assistant"].astype(str), family="tulu3",
                                  source=raw["source"], ratio=float(spec["response_prefix_ratio"]),
                                  rounding=spec["prefix_rounding"], labels=raw["label"],
                                  extra={"group": subset or "tulu3"})
    return drop_duplicate_texts(pool, family="tulu3")
