"""Leakage and shift checks: planted duplicates are caught, a date-shifted split is separable
without any model, a random partition is not, and length statistics are exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mialab.checks import leakage
from mialab.checks.leakage import (
    LeakageError,
    blind_baseline,
    check_split,
    embedding_near_duplicates,
    exact_duplicates,
    length_report,
    ngram_near_duplicates,
)
from mialab.data.membership import random_partition
from mialab.data.registry import get_family
from mialab.data.sampling import sample_split

ROOT = Path(__file__).resolve().parents[1]
WIKIMIA = str(ROOT / "resources" / "data" / "wikimia" / "WikiMIA_length64.parquet")
FIX = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="module")
def wikimia_pool() -> pd.DataFrame:
    return get_family("wikimia")({"source": WIKIMIA})


def random_members(pool: pd.DataFrame, seed: int, n: int = 160) -> pd.DataFrame:
    """WikiMIA members only, relabelled by a seeded random partition: no shift, no duplicates."""
    members = pool[pool["label"] == 1].reset_index(drop=True)
    return members.assign(label=random_partition(members["id"], 0.5, seed=seed)).head(n)


@pytest.fixture(scope="module")
def clean_split(wikimia_pool) -> pd.DataFrame:
    return random_members(wikimia_pool, seed=0)


def plant(split: pd.DataFrame, text: str) -> pd.DataFrame:
    """Overwrite the first non-member's text."""
    out = split.copy()
    out.loc[out.index[out["label"] == 0][0], "text"] = text
    return out


def test_planted_exact_duplicate_is_caught(clean_split):
    split = clean_split.head(40)
    member = split[split["label"] == 1].iloc[0]
    leaky = plant(split, "  " + member["text"].upper() + " ")
    pairs = exact_duplicates(leaky)
    assert len(pairs) == 1 and pairs.iloc[0]["member_id"] == member["id"]
    assert exact_duplicates(split).empty
    with pytest.raises(LeakageError, match="exact"):
        check_split(leaky, embed=False)
    report = check_split(leaky, embed=False, allow_duplicates=True)
    assert report["duplicates"]["exact"]["count"] == 1


def test_planted_near_duplicate_by_ngrams(clean_split):
    split = clean_split.head(40)
    member = split[split["label"] == 1].iloc[0]
    words = member["text"].split()
    words[10], words[30] = "banana", "umbrella"  # 2 edits break 10 of ~60 5-grams
    pairs = ngram_near_duplicates(plant(split, " ".join(words)))
    assert len(pairs) == 1 and pairs.iloc[0]["member_id"] == member["id"] and 0.6 < pairs.iloc[0]["jaccard"] < 1
    assert ngram_near_duplicates(split).empty and exact_duplicates(plant(split, " ".join(words))).empty


def test_jaccard_is_exact_on_a_hand_example():
    split = pd.DataFrame({"id": ["m", "n"], "label": [1, 0], "source": "t",
                          "text": ["a b c d e", "a b c d x"], "prefix": "", "suffix": ""})
    # 3-grams: {abc, bcd, cde} vs {abc, bcd, cdx}: 2 shared of 4 -> 0.5
    pairs = ngram_near_duplicates(split, n=3, threshold=0.5)
    assert pairs.iloc[0]["jaccard"] == pytest.approx(0.5)
    assert ngram_near_duplicates(split, n=3, threshold=0.51).empty


def test_embedding_neighbours_catch_a_paraphrase(clean_split):
    split = clean_split.head(30)
    member = split[split["label"] == 1].iloc[0]
    reworded = member["text"].replace(" was ", " had been ").replace(" the ", " this ")
    leaky = plant(split, reworded)
    pairs = embedding_near_duplicates(leaky, threshold=0.9)
    assert member["id"] in set(pairs["member_id"])
    assert embedding_near_duplicates(split, threshold=0.9).empty


def test_pairs_by_design_are_not_duplicates():
    pool = get_family("s1")({"source": str(FIX / "s1k_1_1.jsonl")})
    assert ngram_near_duplicates(pool, n=2, threshold=0.1).empty  # every overlap is within a pair
    assert not ngram_near_duplicates(pool.drop(columns="pair_id"), n=2, threshold=0.1).empty


def test_blind_baseline_separates_wikimia_dates(wikimia_pool):
    split = sample_split(wikimia_pool, 100, seed=0)
    result = blind_baseline(split, seed=0)
    assert result["auroc"] > 0.8 and result["warning"]  # 2023 events vs older ones


def test_blind_baseline_separates_a_planted_2024_shift(clean_split):
    shifted = clean_split.copy()
    shifted.loc[shifted["label"] == 0, "text"] += " It was updated in 2024."
    assert blind_baseline(shifted, seed=0)["auroc"] > 0.95


def test_blind_baseline_does_not_separate_random_partitions(wikimia_pool):
    results = [blind_baseline(random_members(wikimia_pool, seed=s), seed=0) for s in range(4)]
    assert abs(np.mean([r["auroc"] for r in results]) - 0.5) < 0.07  # one split's CV AUROC has sd ~0.05
    assert not any(r["warning"] for r in results) and results[0]["folds"] == 5


def test_length_report_hand_computed():
    texts = ["a", "a b", "a b c", "a b c d", "a b c d e", "a b c d e f"]
    split = pd.DataFrame({"id": list("uvwxyz"), "label": [1, 1, 1, 0, 0, 0], "source": "t", "text": texts,
                          "prefix": "", "suffix": ""})
    report = length_report(split)
    assert report["members"]["mean"] == 2.0 and report["nonmembers"]["mean"] == 5.0
    assert report["members"]["std"] == 1.0 and report["nonmembers"]["q50"] == 5.0
    assert report["length_auroc"] == 0.0 and report["warning"]


def test_check_split_report_on_a_clean_split(clean_split):
    split = clean_split.head(60)
    report = check_split(split, seed=0, embed=False)  # the embedding check is tested above
    assert report["n_members"] + report["n_nonmembers"] == 60
    assert set(report["duplicates"]) == {"exact", "ngram"}
    assert all(d["count"] == 0 for d in report["duplicates"].values())
    assert set(report) >= {"blind_baseline", "length", "thresholds"}
    assert np.isfinite(report["length"]["length_auroc"])


def test_split_embeddings_encode_each_text_once_and_match_each_split_alone(clean_split):
    options = {**leakage.DEFAULTS, "embedding_dtype": "float32"}
    a, b = clean_split.iloc[:20], clean_split.iloc[10:30]            # two splits sharing 10 texts
    shared = leakage.split_embeddings([a, b], options)
    alone = leakage.split_embeddings([b], options)[0]
    assert [e.shape for e in shared] == [(20, alone.shape[1]), (20, alone.shape[1])]
    np.testing.assert_array_equal(shared[1], alone)
    np.testing.assert_allclose(shared[0][10:], shared[1][:10], atol=0)   # one embedding per distinct text
    assert leakage.split_embeddings([a, b], {**options, "embed": False}) == [None, None]
