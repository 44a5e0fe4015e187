"""Prefix rounding (issue #20, item 7d): the pool's cut and the assistant prefix as the released ADRA
code makes them (``max(1, int(ratio * n))`` words, its ``*_custom_mia.py``), the rules used before
them as named options (``prefix_rounding: ceil``, ``assistant_prefix_min_words: 0``)."""

import pandas as pd
import pytest
from workflow_helpers import ns_task

from mialab.data.registry import config_schema, get_family, with_defaults
from mialab.n_sampling.tasks import candidate_prompt, target
from mialab.text.prefix import split_assistant_prefix, split_words


def code_split(text: str, ratio: float) -> tuple[str, str]:
    """``split_input_by_prefix_ratio`` of the code's ``pre_training_custom_mia.py``, as written there."""
    words = text.split()
    if not words:
        return "", ""
    k = min(max(1, int(len(words) * ratio)), len(words))
    return " ".join(words[:k]), " ".join(words[k:]) if k < len(words) else ""


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


@pytest.mark.parametrize("n,ratio,floor_k,ceil_k", [
    (0, 0.25, 0, 0), (1, 0.25, 1, 1), (2, 0.25, 1, 1), (3, 0.25, 1, 1), (4, 0.25, 1, 1), (5, 0.25, 1, 2),
    (7, 0.25, 1, 2), (8, 0.25, 2, 2), (3, 0.5, 1, 2), (4, 0.5, 2, 2), (5, 0.5, 2, 3),
    (2, 1.0, 1, 1), (3, 1.0, 2, 2), (3, 0.0, 1, 1),  # always one word each side of the cut
])
def test_split_words_floor_as_the_code_and_ceil_on_short_texts(n, ratio, floor_k, ceil_k):
    for rounding, k in (("floor", floor_k), ("ceil", ceil_k)):
        prefix, suffix = split_words(words(n), ratio, rounding=rounding)
        assert (len(prefix.split()), len(suffix.split())) == (k, n - k), rounding


def test_split_words_floor_equals_the_codes_split_wherever_the_code_leaves_a_suffix():
    for n in range(1, 60):
        for ratio in (0.1, 0.25, 1 / 3, 0.5, 0.75, 0.9):
            code = code_split(words(n), ratio)
            if code[1] or n == 1:
                assert split_words(words(n), ratio, rounding="floor") == code, (n, ratio)


def test_split_words_names_an_unknown_rounding():
    with pytest.raises(ValueError, match="known: floor, ceil"):
        split_words("a b c", 0.5, rounding="round")


@pytest.mark.parametrize("m,code_k,floor_k", [(0, 0, 0), (1, 0, 0), (2, 1, 0), (3, 1, 0), (4, 1, 1), (8, 2, 2),
                                              (11, 2, 2)])
def test_assistant_prefix_min_words_one_as_the_code_zero_plain_floor(m, code_k, floor_k):
    """The code gives ``max(1, int(0.25 m))`` words; a one-word suffix stays to be reconstructed here."""
    for min_words, k in ((1, code_k), (0, floor_k)):
        given, rest = split_assistant_prefix(words(m), 0.25, min_words)
        assert (len(given.split()), len(rest.split())) == (k, m - k), min_words
        assert target(words(m), 0.25, min_words) == rest
    assert split_assistant_prefix(words(3), 0.0, 1) == ("", words(3))  # ratio 0: nothing given


def aime_row(tmp_path, solution_words: int, **pool) -> pd.Series:
    src = tmp_path / "aime.jsonl"
    pd.DataFrame([{"problem": "Find x.", "solution": words(solution_words), "year": 2024, "aime_number": 1,
                   "problem_number": 1}]).to_json(src, orient="records", lines=True)
    return get_family("aime")({"source": str(src), **pool,
                               "membership": {"rule": "years", "member_years": [2024], "nonmember_years": [2025]}}).iloc[0]


@pytest.mark.parametrize("m,rounding,given", [(10, "floor", 2), (10, "ceil", 3), (3, "floor", 1), (3, "ceil", 1),
                                              (7, "floor", 1), (7, "ceil", 2)])
def test_aime_pool_prefix_gives_floor_or_ceil_of_a_quarter_of_the_solution(tmp_path, m, rounding, given):
    row = aime_row(tmp_path, m, solution_prefix_ratio=0.25, prefix_rounding=rounding)
    assert row["prefix"] == "Find x.\n\n" + words(given) and row["suffix"] == " ".join(words(m).split()[given:])


@pytest.mark.parametrize("m,min_words,given", [(100, 1, 25), (10, 1, 2), (3, 1, 1), (3, 0, 0), (2, 1, 1), (1, 1, 0)])
def test_aime_candidate_given_and_target_word_counts_as_the_paper_config(tmp_path, m, min_words, given):
    """The paper config's AIME: the pool's prefix is the problem alone, the task gives
    ``max(1, floor(0.25 m))`` solution words and the rollout must reconstruct the rest."""
    row = aime_row(tmp_path, m, solution_prefix_ratio=0.0)
    task = ns_task("continuation", assistant_prefix_ratio=0.25, assistant_prefix_min_words=min_words)
    assert row["prefix"] == "Find x." and len(row["suffix"].split()) == m
    to_reconstruct = target(row["suffix"], task.assistant_prefix_ratio, task.assistant_prefix_min_words)
    assert len(to_reconstruct.split()) == m - given
    prompt = candidate_prompt(None, task.template_text(), row["prefix"], row["suffix"], prompt_format="plain",
                              ratio=task.assistant_prefix_ratio, min_words=task.assistant_prefix_min_words)
    assert prompt == task.template_text().format(prefix="Find x.") + (f" {words(given)}" if given else "")


def test_the_schema_defaults_are_the_codes_rules():
    required = {"nonmember_source": "x", "domain": "arxiv"}  # the keys some families require
    for family in ("aime", "arxivtection", "bookmia", "booktection", "dolma3_arxiv", "lara_rl", "mimir",
                   "olympiad_math", "tulu3", "wikimia", "wikimia_24_hard"):
        assert with_defaults(family, required)["prefix_rounding"] == "floor", family
    with pytest.raises(Exception, match="'round' is not one of"):
        with_defaults("wikimia", {"prefix_rounding": "round"})
    task = config_schema()["properties"]["n_sampling"]["properties"]["tasks"]["additionalProperties"]
    assert task["properties"]["assistant_prefix_min_words"]["default"] == 1
