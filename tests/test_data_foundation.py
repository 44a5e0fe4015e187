"""WikiMIA and AIME pools, membership rules and the split schema, on the real files in resources/."""

import pandas as pd
import pytest

from mialab.data.membership import random_partition
from mialab.data.registry import get_family
from mialab.data.schema import SplitSchemaError, validate_split
from mialab.text.prefix import split_words

WIKIMIA = "resources/data/wikimia/WikiMIA_length64.parquet"
AIME = ["resources/data/aime/aime_1983_2023.json", "resources/data/aime/aime_2024.json"]


def test_split_words_half_and_edges():
    assert split_words("a b c d", 0.5, rounding="ceil") == ("a b", "c d")
    assert split_words("a b c", 0.5, rounding="ceil") == ("a b", "c")
    assert split_words("a b", 1.0, rounding="ceil") == ("a", "b")  # always something left to reconstruct
    assert split_words("", 0.5, rounding="ceil") == ("", "")


def test_random_partition_is_order_invariant_and_exact():
    ids = pd.Series([f"x{i}" for i in range(101)])
    a = random_partition(ids, 0.5, seed=3)
    b = random_partition(ids[::-1].reset_index(drop=True), 0.5, seed=3)[::-1]
    assert a.sum() == 50 and (a == b).all()
    assert (random_partition(ids, 0.5, seed=4) != a).any()


def test_wikimia_pool_prefix_is_half_of_words():
    pool = validate_split(get_family("wikimia")({"source": WIKIMIA, "prefix_ratio": 0.5}))
    assert len(pool) == 542 and pool["label"].sum() == 284  # corpus labels by default
    row = pool.iloc[0]
    n = len(row["text"].split())
    assert len(row["prefix"].split()) == n // 2  # prefix_rounding: floor, the default
    assert row["text"] == row["prefix"] + " " + row["suffix"]


def test_aime_prefix_is_problem_plus_quarter_of_solution():
    pool = get_family("aime")({"source": AIME, "membership": {"rule": "years", "member_years": [2021, 2023],
                                                               "nonmember_years": [2024, 2024]}})
    assert pool["label"].value_counts().to_dict() == {1: 90, 0: 30}
    row = pool[pool["id"] == "aime-2024-1-1"].iloc[0]
    problem, sol_head = row["prefix"].split("\n\n", 1)
    assert problem.startswith("Every morning Aya goes for a $9$-kilometer-long walk")
    n_sol = len(sol_head.split()) + len(row["suffix"].split())
    assert len(sol_head.split()) == max(1, n_sol // 4)  # floor(25% of the solution's words), at least 1


def test_aime_year_without_solutions_is_a_clear_error():
    src = AIME + [{"source": "resources/data/aime/aime_2025_answers_only.jsonl", "year": 2025}]
    spec = {"source": src, "membership": {"rule": "years", "member_years": [2021, 2024], "nonmember_years": [2025]}}
    with pytest.raises(ValueError, match=r"year\(s\) \[2025\] have no solution"):
        get_family("aime")(spec)
    pool = get_family("aime")({**spec, "missing_solution": "drop"})
    assert (pool["label"] == 0).sum() == 0  # nothing left of 2025 once dropped


def test_schema_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"text": ["a"], "label": [1]}).to_parquet(bad)
    with pytest.raises(ValueError, match=r"missing column\(s\) \['input'\]"):
        get_family("wikimia")({"source": str(bad)})
    ok = {"id": ["a", "b"], "text": ["x", "y"], "prefix": ["x", "y"], "suffix": ["", ""], "label": [1, 0],
          "source": ["s", "s"]}
    with pytest.raises(SplitSchemaError, match="empty"):
        validate_split(pd.DataFrame(ok).iloc[:0])
    with pytest.raises(SplitSchemaError, match="no non-members"):
        validate_split(pd.DataFrame({**ok, "label": [1, 1]}))
    with pytest.raises(SplitSchemaError, match="duplicate ids"):
        validate_split(pd.DataFrame({**ok, "id": ["a", "a"]}))


def test_unknown_family_lists_known_ones():
    with pytest.raises(KeyError, match="known families: .*aime.*wikimia"):
        get_family("wikimai")
