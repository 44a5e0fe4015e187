"""AIME problems with full solutions, post-training (SFT contamination) style.

Source: one or more JSON/JSONL files or hub ids (an entry may be ``{source, year}`` to give the year of a file
without a year column) with ``problem``, ``solution``, ``year``, ``aime_number``, ``problem_number`` (the
DeepScaleR / AIMO shape), or, instead of the last three, the problem's AoPS wiki ``url`` they are read from
(the ADRA authors' ``ADRA-RL/AIME-2021-2025-Cleaned``: :func:`with_url_numbers`). Prefix rule: the full
problem plus the first ``solution_prefix_ratio`` (default 0.25) of the solution's words; the suffix is the
rest of the solution. ``solution_prefix_ratio: 0``: the prefix is the problem only and the suffix the whole
solution (the released ADRA code's candidates: its assistant prefix, the reconstruction task's
``assistant_prefix_ratio``, then gives the first 25% of the solution once). ``max_words`` optionally caps the
solution (the tiny world uses short texts).

Membership rules:
- ``years``: ``member_years`` are members, ``nonmember_years`` non-members (the paper: 2021-2024
  vs 2025). A year whose rows carry no solution cannot form a candidate: that is an error naming
  the year, unless ``missing_solution: drop`` says to drop those rows (logged in ``source``).
- ``random``: a seeded random partition of the rows within ``years`` (the tiny world: members
  and non-members from the same era, so length and topic do not give membership away).
"""

from __future__ import annotations

import re

import pandas as pd

from mialab.data.families._common import drop_exact_repeats
from mialab.data.membership import random_partition
from mialab.data.registry import register_family
from mialab.data.sources import describe, read_table, require_columns
from mialab.text.prefix import split_words, truncate_words

_COLUMNS = ["problem", "solution", "year", "aime_number", "problem_number"]


def _read_sources(sources: str | dict | list) -> pd.DataFrame:
    """Concatenate sources; an entry is a table (a path, hub dataset or fetched file) or ``{source: ..., year: Y}``
    for files that carry no year column (e.g. a single-year answers-only file)."""
    frames = []
    for entry in sources if isinstance(sources, list) else [sources]:
        src = entry["source"] if isinstance(entry, dict) and "source" in entry else entry
        df = read_table(src)
        if src is not entry:   # {source, year}
            df["year"] = int(entry["year"])
        if "year" not in df.columns and "url" in df.columns:
            df = with_url_numbers(df, source=src)
        require_columns(df, ["problem", "year"], source=src)
        df["year"] = integer_years(df["year"], source=src)
        if "solution" not in df.columns:
            df["solution"] = None
        for col in ("aime_number", "problem_number"):
            if col not in df.columns:
                df[col] = range(len(df)) if col == "problem_number" else 0
        df["_source"] = describe(src)
        frames.append(df[_COLUMNS + ["_source"]])
    return pd.concat(frames, ignore_index=True)


# an AoPS wiki problem page, e.g. .../2025_AIME_I_Problems/Problem_11 (the released ADRA code reads the year so:
# adra/utils_rl/data_mixer.py:50-66, verl/examples/data_preprocess/post_training_custom_mia.py:1174-1190)
AOPS_URL = re.compile(r"/(\d{4})_AIME(?:_(I{1,2}))?_Problems/Problem_(\d+)")


def with_url_numbers(df: pd.DataFrame, *, source) -> pd.DataFrame:
    """``df`` with ``year``, ``aime_number`` (I: 1, II: 2, a single contest: 0) and ``problem_number`` read from
    its ``url`` column (:data:`AOPS_URL`); a url of another shape is an error naming the row."""
    found = df["url"].astype(str).map(AOPS_URL.search)
    bad = found.isna().to_numpy()
    if bad.any():
        row = int(bad.argmax())
        raise ValueError(f"{describe(source)}: column 'url', row {row}: {df['url'].iloc[row]!r} is not an AoPS AIME "
                         f"problem page (.../<year>_AIME_<I|II>_Problems/Problem_<n>; {int(bad.sum())} such row(s))")
    return df.assign(year=found.map(lambda m: int(m.group(1))),
                     aime_number=found.map(lambda m: len(m.group(2) or "")),
                     problem_number=found.map(lambda m: int(m.group(3))))


def integer_years(years: pd.Series, *, source) -> pd.Series:
    """The ``year`` column as integers; a value that is not a whole number is an error naming the
    file, the row and the value."""
    numbers = pd.to_numeric(years, errors="coerce")
    bad = (numbers.isna() | (numbers != numbers.round())).to_numpy()
    if bad.any():
        row = int(bad.argmax())
        raise ValueError(f"{describe(source)}: column 'year', row {row}: {years.iloc[row]!r} is not a year "
                         f"(an integer; {int(bad.sum())} such row(s))")
    return numbers.astype(int)


def _year_range(years) -> list[int]:
    """``[a, b]`` in config means the inclusive range a..b; a longer list is taken as is."""
    if years is None:
        return []
    years = list(years)
    return list(range(years[0], years[1] + 1)) if len(years) == 2 else years


@register_family("aime")
def load_pool(spec: dict) -> pd.DataFrame:
    """AIME candidates labelled by the configured membership rule."""
    read = _read_sources(spec["source"])
    rule = spec["membership"]
    kind = rule["rule"]
    if kind == "years":
        members, non = set(_year_range(rule["member_years"])), set(_year_range(rule["nonmember_years"]))
        raw = read[read["year"].isin(members | non)].copy()
        raw["label"] = raw["year"].isin(members).astype("int8")
    elif kind == "random":
        raw = read[read["year"].isin(_year_range(rule["years"]))].copy() if "years" in rule else read.copy()
    else:
        raise ValueError(f"aime: unknown membership rule {kind!r}; known: years, random")
    if raw.empty:
        raise ValueError(f"aime: pool.membership {rule} selects none of the {len(read)} problems of "
                         f"{describe(spec['source'])} (years {read['year'].min()} to {read['year'].max()}): name years "
                         "the sources hold")

    no_solution = raw["solution"].isna() | (raw["solution"].astype(str).str.strip() == "")
    if no_solution.any():
        years = sorted(raw.loc[no_solution, "year"].unique().tolist())
        if spec["missing_solution"] != "drop":
            raise ValueError(
                f"aime: {int(no_solution.sum())} problem(s) from year(s) {years} have no solution, so no suffix "
                "to reconstruct; use sources with solutions, other non-member years, or set missing_solution: drop"
            )
        raw = raw[~no_solution]
    raw = drop_exact_repeats(raw, "problem", family="aime", what="repeated problem(s)")

    ratio = float(spec["solution_prefix_ratio"])
    solution = raw["solution"].map(lambda s: truncate_words(" ".join(str(s).split()), spec.get("max_words")))
    problem = raw["problem"].str.strip()
    if ratio == 0:
        prefix, suffix, text = problem, solution, problem + "\n\n" + solution
    else:
        cut = solution.map(lambda s: split_words(s, ratio, rounding=spec["prefix_rounding"]))
        prefix, suffix = problem + "\n\n" + cut.str[0], cut.str[1]
        text = prefix + " " + suffix
    pool = pd.DataFrame({
        "id": [f"aime-{y}-{a}-{p}" for y, a, p in zip(raw["year"], raw["aime_number"], raw["problem_number"])],
        "prefix": prefix, "suffix": suffix, "text": text, "source": raw["_source"], "group": raw["year"].astype(str),
    })
    if kind == "years":
        pool["label"] = raw["label"].to_numpy()
    else:
        pool["label"] = random_partition(pool["id"], float(rule["fraction"]), int(rule["seed"]))
    if pool["id"].duplicated().any():
        raise ValueError(f"aime: duplicate problem ids {pool.loc[pool['id'].duplicated(), 'id'].head(3).tolist()}")
    return pool
