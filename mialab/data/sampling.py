"""Per-seed balanced splits drawn from a pool (ADRA appendix B: "we sample subsets from each
constructed dataset and average results across multiple random seeds").

Draw rule. Each class (or, for paired pools, the set of pairs) is put in a fixed order (sorted by
id, so the row order of the pool does not matter) and permuted once with ``base_seed``. Seed ``s``
(an integer >= 0) takes block ``s`` of that permutation, rows ``[s*n, (s+1)*n)``, while the class
is large enough; so seeds 0, 1, 2, ... give disjoint subsets as long as the pool allows it. A seed
whose block runs past the end of a class gets a fresh sample of ``n`` rows drawn with
``(base_seed, class, seed)``: still balanced and reproducible, no longer disjoint from other seeds.

A class with fewer than ``n_per_class`` rows is an error naming both counts, unless
``cap_to_min_class`` lowers ``n`` to the smaller class size (both classes keep the same ``n``).

Paired pools (a ``pair_id`` column, e.g. WikiMIA-24 Hard or S1) are drawn pair by pair, so the
member and the non-member of a pair are always in the same split; every pair must hold exactly
one member and one non-member.

The output is sorted (paired: by ``pair_id`` then label; otherwise by label then id), so the same
pool and seed give identical rows and byte-identical parquet files.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mialab.data.schema import validate_split


def seeded_block(ids: np.ndarray, n: int, seed: int, *, base_seed: int, stream: int) -> np.ndarray:
    """Pick ``n`` of the sorted ``ids``: block ``seed`` of a ``base_seed`` permutation when it fits,
    else a fresh sample seeded by ``(base_seed, stream, seed)``."""
    if seed < 0:
        raise ValueError(f"sampling seed must be >= 0, got {seed}")
    ids = np.sort(np.asarray(ids))
    if (seed + 1) * n <= len(ids):
        order = np.random.default_rng([base_seed, stream]).permutation(len(ids))
        return ids[order[seed * n:(seed + 1) * n]]
    return ids[np.sort(np.random.default_rng([base_seed, stream, seed]).choice(len(ids), size=n, replace=False))]


def _balanced_n(counts: dict[str, int], n_per_class: int, cap_to_min_class: bool, name: str, n_key: str) -> int:
    """``n_per_class``, capped to the smallest class when allowed, else an error (advising to lower
    ``n_key``, the setting as the caller knows it) if it does not fit."""
    smallest = min(counts.values())
    if n_per_class <= smallest:
        return n_per_class
    if cap_to_min_class:
        return smallest
    raise ValueError(f"{name}: asked for {n_per_class} per class but the pool has {counts}; lower {n_key} "
                     f"to at most {smallest}")


def check_pairs(pool: pd.DataFrame, *, name: str = "pool") -> None:
    """Every ``pair_id`` must hold exactly one member and one non-member."""
    if pool["pair_id"].isna().any():
        raise ValueError(f"{name}: {int(pool['pair_id'].isna().sum())} row(s) without a pair_id in a paired pool")
    stats = pool.groupby("pair_id")["label"].agg(["size", "sum"])
    bad = stats[(stats["size"] != 2) | (stats["sum"] != 1)]
    if len(bad):
        raise ValueError(f"{name}: {len(bad)} pair(s) are not one member + one non-member, e.g. {bad.index[0]!r}")


def sample_split(pool: pd.DataFrame, n_per_class: int, seed: int, *, cap_to_min_class: bool = False,
                 keep_pairs: bool | None = None, base_seed: int = 0, name: str = "pool",
                 n_key: str = "n_per_class") -> pd.DataFrame:
    """A balanced split of ``n_per_class`` members and as many non-members for ``seed``.

    ``keep_pairs`` defaults to True when the pool has a ``pair_id`` column. ``name`` and ``n_key``
    (e.g. the config key ``datasets.<name>.split.n_per_class``) are what a too-small pool's error
    names. See the module docstring for the draw rule.
    """
    pool = validate_split(pool, name=name)
    if n_per_class < 1:
        raise ValueError(f"{name}: n_per_class must be >= 1, got {n_per_class}")
    paired = "pair_id" in pool.columns if keep_pairs is None else keep_pairs
    if paired:
        check_pairs(pool, name=name)
        pairs = pool["pair_id"].unique()
        n = _balanced_n({"pairs": len(pairs)}, n_per_class, cap_to_min_class, name, n_key)
        chosen = seeded_block(pairs, n, seed, base_seed=base_seed, stream=2)
        out = pool[pool["pair_id"].isin(chosen)].sort_values(["pair_id", "label"], ascending=[True, False])
    else:
        by_class = {lab: pool.loc[pool["label"] == lab, "id"].to_numpy() for lab in (1, 0)}
        n = _balanced_n({"members": len(by_class[1]), "non-members": len(by_class[0])}, n_per_class,
                        cap_to_min_class, name, n_key)
        chosen = np.concatenate([seeded_block(ids, n, seed, base_seed=base_seed, stream=lab)
                                 for lab, ids in by_class.items()])
        out = pool[pool["id"].isin(chosen)].sort_values(["label", "id"], ascending=[False, True])
    return validate_split(out.reset_index(drop=True), name=f"{name} seed {seed}")
