"""Leakage and distribution-shift checks of a split, run before any model sees it.

A membership benchmark is only meaningful when members and non-members differ in membership
alone (Duan et al. 2024; Das et al. 2025; Maini et al. 2024). Per split:

- *cross-class duplicates*: exact duplicates (case- and whitespace-insensitive), near duplicates
  by word n-gram Jaccard overlap (``ngram_n`` = 5, ``jaccard_threshold`` = 0.5), and embedding
  near neighbours (faiss inner-product range search over :func:`mialab.lm.embeddings.encode`
  vectors, ``cosine_threshold`` = 0.95). Rows that share a ``pair_id`` are paired by design and
  not compared. Any cross-class duplicate raises :class:`LeakageError` unless
  ``allow_duplicates`` is set (then they are only reported).
- *blind baseline*: a bag-of-n-grams logistic regression (scikit-learn; word 1-2 grams, TF-IDF)
  that separates members from non-members from the text alone, without the target model.
  Stratified ``folds``-fold cross-validated AUROC, seeded; ``warning`` when the mean exceeds
  ``warn_above`` (0.6): the split is then separable by topic or date, not by membership.
- *length shift*: words per text per class (mean, std, quantiles) and the AUROC of length alone
  (members scored by their length), flagged when it is further than 0.1 from 0.5.

Across the seeds of a dataset: the most candidates two seeds' splits share (:func:`seed_overlaps`),
flagged above ``overlap_warn`` of a split.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mialab.data.registry import config_schema
from mialab.data.schema import validate_split

# scikit-learn is imported inside the checks: the workflow's plan reads DEFAULTS and
# leakage_options() at DAG-building time, which should not pay for importing it.

PAIR_COLUMNS = ["member_id", "nonmember_id"]


class LeakageError(ValueError):
    """Members and non-members share (near-)duplicate texts."""


def _classes(split: pd.DataFrame, column: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    split = validate_split(split, name="split to check")
    if column not in split.columns:
        raise KeyError(f"split has no column {column!r}")
    return split[split["label"] == 1].reset_index(drop=True), split[split["label"] == 0].reset_index(drop=True)


def _drop_same_pair(pairs: pd.DataFrame, members: pd.DataFrame, nonmembers: pd.DataFrame) -> pd.DataFrame:
    """Remove (member, non-member) pairs that share a ``pair_id`` (paired by design)."""
    if "pair_id" not in members.columns or pairs.empty:
        return pairs
    m = members.set_index("id")["pair_id"]
    n = nonmembers.set_index("id")["pair_id"]
    same = m.loc[pairs["member_id"]].to_numpy() == n.loc[pairs["nonmember_id"]].to_numpy()
    return pairs[~same].reset_index(drop=True)


def normalise(text: str) -> str:
    """Case- and whitespace-insensitive key for exact-duplicate detection."""
    return " ".join(text.lower().split())


def exact_duplicates(split: pd.DataFrame, *, column: str = "text") -> pd.DataFrame:
    """(member_id, non-member_id) pairs whose texts are equal up to case and whitespace."""
    members, nonmembers = _classes(split, column)
    m = pd.DataFrame({"member_id": members["id"], "key": members[column].map(normalise)})
    n = pd.DataFrame({"nonmember_id": nonmembers["id"], "key": nonmembers[column].map(normalise)})
    pairs = m.merge(n, on="key")[PAIR_COLUMNS]
    return _drop_same_pair(pairs, members, nonmembers)


def ngram_near_duplicates(split: pd.DataFrame, *, n: int = 5, threshold: float = 0.5,
                          column: str = "text") -> pd.DataFrame:
    """Cross-class pairs whose sets of word ``n``-grams have Jaccard overlap >= ``threshold``.

    Intersections come from a sparse product of binary n-gram indicator matrices; texts shorter
    than ``n`` words have no n-grams and match nothing.
    """
    from sklearn.feature_extraction.text import CountVectorizer

    members, nonmembers = _classes(split, column)
    vec = CountVectorizer(ngram_range=(n, n), binary=True, lowercase=True, token_pattern=r"(?u)\b\w+\b")
    try:
        grams = vec.fit_transform(pd.concat([members[column], nonmembers[column]])).tocsr()
    except ValueError:  # no text has n words: no n-grams anywhere
        return pd.DataFrame(columns=[*PAIR_COLUMNS, "jaccard"])
    a, b = grams[: len(members)], grams[len(members):]
    inter = (a @ b.T).tocoo()
    size_a = np.asarray(a.sum(axis=1)).ravel()
    size_b = np.asarray(b.sum(axis=1)).ravel()
    jacc = inter.data / (size_a[inter.row] + size_b[inter.col] - inter.data)
    keep = jacc >= threshold
    pairs = pd.DataFrame({"member_id": members["id"].to_numpy()[inter.row[keep]],
                          "nonmember_id": nonmembers["id"].to_numpy()[inter.col[keep]],
                          "jaccard": jacc[keep]})
    return _drop_same_pair(pairs.sort_values(PAIR_COLUMNS).reset_index(drop=True), members, nonmembers)


def embedding_near_duplicates(split: pd.DataFrame, *, threshold: float = 0.95, column: str = "text",
                              model: str | None = None, embeddings: np.ndarray | None = None,
                              dtype: str = "float32") -> pd.DataFrame:
    """Cross-class pairs with embedding cosine >= ``threshold`` (faiss range search).

    ``embeddings`` (rows aligned with ``split``, L2-normalised) skips encoding; otherwise texts are
    encoded with :func:`mialab.lm.embeddings.encode` (``model``, default all-MiniLM-L6-v2, in ``dtype``).
    """
    import faiss

    split = validate_split(split, name="split to check")
    members, nonmembers = _classes(split, column)
    if embeddings is None:
        from mialab.lm.embeddings import DEFAULT_MODEL, encode

        embeddings = encode(split[column].tolist(), model=model or DEFAULT_MODEL, dtype=dtype)
    emb = np.ascontiguousarray(embeddings, dtype=np.float32)
    if emb.shape[0] != len(split) or not np.isfinite(emb).all():
        raise ValueError(f"embeddings: need {len(split)} finite rows, got shape {emb.shape}")
    is_member = (split["label"] == 1).to_numpy()
    index = faiss.IndexFlatIP(emb.shape[1])
    index.add(emb[~is_member])
    lims, dist, idx = index.range_search(emb[is_member], float(threshold))
    rows = np.repeat(np.arange(is_member.sum()), np.diff(lims).astype(np.int64))
    pairs = pd.DataFrame({"member_id": members["id"].to_numpy()[rows],
                          "nonmember_id": nonmembers["id"].to_numpy()[idx], "cosine": dist})
    pairs = pairs[pairs["cosine"] >= threshold]  # range_search keeps > radius; keep the documented >=
    return _drop_same_pair(pairs.sort_values(PAIR_COLUMNS).reset_index(drop=True), members, nonmembers)


def blind_baseline(split: pd.DataFrame, *, column: str = "text", folds: int = 5, seed: int = 0,
                   ngram_range: tuple[int, int] = (1, 2), warn_above: float = 0.6) -> dict:
    """Cross-validated AUROC of a bag-of-n-grams logistic regression that never sees the model."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline

    split = validate_split(split, name="split to check")
    y = split["label"].to_numpy().astype(int)
    k = min(folds, int(np.bincount(y).min()))
    if k < 2:
        raise ValueError(f"blind baseline: each class needs at least 2 rows, got {np.bincount(y).tolist()}")
    clf = make_pipeline(TfidfVectorizer(ngram_range=tuple(ngram_range), sublinear_tf=True, lowercase=True),
                        LogisticRegression(solver="liblinear"))
    cv = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    scores = cross_val_score(clf, split[column].tolist(), y, cv=cv, scoring="roc_auc")
    return {"auroc": float(scores.mean()), "auroc_std": float(scores.std(ddof=1)),
            "folds": k, "warn_above": warn_above, "warning": bool(scores.mean() > warn_above)}


def length_report(split: pd.DataFrame, *, column: str = "text", tolerance: float = 0.1) -> dict:
    """Words per text per class and the AUROC of length alone (members scored by length)."""
    from sklearn.metrics import roc_auc_score

    split = validate_split(split, name="split to check")
    words = split[column].str.split().str.len().to_numpy()
    y = split["label"].to_numpy().astype(int)
    levels = (0.05, 0.25, 0.5, 0.75, 0.95)
    per_class = {}
    for lab, name in ((1, "members"), (0, "nonmembers")):
        w = words[y == lab].astype(float)
        per_class[name] = {"n": int(len(w)), "mean": float(w.mean()),
                           "std": float(w.std(ddof=1)) if len(w) > 1 else 0.0,
                           **{f"q{int(p * 100):02d}": float(v) for p, v in zip(levels, np.quantile(w, levels))}}
    auc = float(roc_auc_score(y, words))
    return {**per_class, "length_auroc": auc, "warning": bool(abs(auc - 0.5) > tolerance)}


def check_split(split: pd.DataFrame, *, column: str = "text", ngram_n: int = 5, jaccard_threshold: float = 0.5,
                cosine_threshold: float = 0.95, embed: bool = True, embedding_model: str | None = None,
                embedding_dtype: str = "float32", embeddings: np.ndarray | None = None,
                allow_duplicates: bool = False, seed: int = 0, folds: int = 5, warn_above: float = 0.6,
                name: str = "split") -> dict:
    """Every check above; a small JSON-ready dict for the report.

    Raises :class:`LeakageError` on any cross-class duplicate unless ``allow_duplicates``; its
    message starts with ``name`` and lists up to five offending (member, non-member) id pairs.
    ``embed=False`` skips the embedding check (no encoder needed).
    """
    dups = {
        "exact": exact_duplicates(split, column=column),
        "ngram": ngram_near_duplicates(split, n=ngram_n, threshold=jaccard_threshold, column=column),
    }
    if embed:
        dups["embedding"] = embedding_near_duplicates(split, threshold=cosine_threshold, column=column,
                                                      model=embedding_model, embeddings=embeddings,
                                                      dtype=embedding_dtype)
    found = {kind: len(df) for kind, df in dups.items()}
    if any(found.values()) and not allow_duplicates:
        kind = next(k for k, v in found.items() if v)
        examples = "; ".join(f"member {r['member_id']!r} ~ non-member {r['nonmember_id']!r}"
                             for r in dups[kind].head(5).to_dict("records"))
        raise LeakageError(f"{name}: cross-class duplicates found {found}; e.g. ({kind}) {examples}; "
                           f"set allow_duplicates to only report them")
    return {
        "n_members": int((split["label"] == 1).sum()),
        "n_nonmembers": int((split["label"] == 0).sum()),
        "duplicates": {kind: {"count": len(df), "pairs": df.head(20).to_dict("records")} for kind, df in dups.items()},
        "thresholds": {"ngram_n": ngram_n, "jaccard": jaccard_threshold, "cosine": cosine_threshold},
        "blind_baseline": blind_baseline(split, column=column, folds=folds, seed=seed, warn_above=warn_above),
        "length": length_report(split, column=column),
    }


# -- the workflow stage (rules/leakage.smk): options, one table row per split, the summary -------

#: Defaults of the config's ``leakage`` section, read from the schema (the one place they are written).
DEFAULTS: dict = {key: sub["default"] for key, sub in config_schema()["properties"]["leakage"]["properties"].items()}


def leakage_options(section: dict | None, dataset: str, datasets: list[str] | None = None) -> dict:
    """The ``leakage`` config section resolved for one dataset (defaults filled in,
    ``allow_duplicates`` a bool). A list under ``allow_duplicates`` must name configured datasets."""
    opts = {**DEFAULTS, **(section or {})}
    unknown = set(opts) - set(DEFAULTS)
    if unknown:
        raise KeyError(f"leakage: unknown option(s) {sorted(unknown)}; known: {', '.join(DEFAULTS)}")
    allow = opts["allow_duplicates"]
    if isinstance(allow, (list, tuple)):
        bad = [d for d in allow if datasets is not None and d not in datasets]
        if bad:
            raise KeyError(f"leakage.allow_duplicates: unknown dataset(s) {bad}; configured: {', '.join(datasets)}")
        allow = dataset in allow
    return {**opts, "allow_duplicates": bool(allow)}


def run_check(split: pd.DataFrame, options: dict, *, seed: int, name: str,
              embeddings: np.ndarray | None = None) -> dict:
    """:func:`check_split` with the resolved options of :func:`leakage_options` (``embeddings``:
    the split's rows already encoded, see :func:`split_embeddings`)."""
    o = options
    return check_split(split, column=o["column"], ngram_n=o["ngram_n"], jaccard_threshold=o["jaccard_threshold"],
                       cosine_threshold=o["cosine_threshold"], embed=o["embed"], embedding_model=o["embedding_model"],
                       embedding_dtype=o["embedding_dtype"], embeddings=embeddings,
                       allow_duplicates=o["allow_duplicates"], seed=seed, folds=o["folds"],
                       warn_above=o["blind_warn"], name=name)


def split_embeddings(splits: list[pd.DataFrame], options: dict) -> list[np.ndarray | None]:
    """Embeddings of every split's rows for :func:`run_check`, each distinct text encoded once
    (seeds' splits of one pool share texts); ``None`` per split when ``embed`` is off."""
    if not options["embed"]:
        return [None] * len(splits)
    from mialab.lm.embeddings import encode

    column = options["column"]
    texts = pd.unique(pd.concat([s[column] for s in splits], ignore_index=True).astype(str))
    emb = encode(list(texts), model=options["embedding_model"], dtype=options["embedding_dtype"])
    row = pd.Series(np.arange(len(texts)), index=texts)
    return [emb[row.loc[s[column].astype(str)].to_numpy()] for s in splits]


def seed_overlaps(splits: list[pd.DataFrame]) -> list[int]:
    """For each seed's split, the most candidates it shares with another seed's split (0 for a lone seed).

    Seeds draw disjoint splits while the pool allows (:mod:`mialab.data.sampling`); past that they share
    candidates, so their results are correlated and the ± std over seeds understates the spread."""
    ids = [set(s["id"]) for s in splits]
    return [max((len(a & b) for j, b in enumerate(ids) if j != i), default=0) for i, a in enumerate(ids)]


DUPLICATE_KINDS = ("exact", "ngram", "embedding")


def report_row(report: dict, *, dataset: str, seed: int, shared: int, overlap_warn: float,
               setting: str = "original") -> dict:
    """One flat row of the per-split table: counts, the most candidates shared with another seed's split
    (``shared``, :func:`seed_overlaps`; flagged above ``overlap_warn`` of the split), blind baseline,
    length statistics.

    A duplicate check that was not run (``embed: false``) has count -1.
    """
    blind, length = report["blind_baseline"], report["length"]
    n = report["n_members"] + report["n_nonmembers"]
    row = {"dataset": dataset, "seed": int(seed), "setting": setting,
           "n_members": report["n_members"], "n_nonmembers": report["n_nonmembers"],
           "n_shared": int(shared), "overlap_warn": overlap_warn, "overlap_warning": bool(shared > overlap_warn * n)}
    for kind in DUPLICATE_KINDS:
        row[f"dup_{kind}"] = int(report["duplicates"][kind]["count"]) if kind in report["duplicates"] else -1
    row.update({"blind_auroc": blind["auroc"], "blind_auroc_std": blind["auroc_std"], "blind_folds": blind["folds"],
                "blind_warn": blind["warn_above"], "blind_warning": blind["warning"],
                "length_auroc": length["length_auroc"], "length_warning": length["warning"]})
    for cls in ("members", "nonmembers"):
        for stat in ("mean", "std", "q05", "q50", "q95"):
            row[f"{cls}_words_{stat}"] = length[cls][stat]
    return row


def overlap_warning(dataset: str, shared: int, n: int, threshold: float) -> str:
    """Why a dataset whose seeds' splits share ``shared`` of ``n`` candidates (above ``threshold``) is flagged."""
    return (f"{dataset}: two seeds' splits share {shared} of {n} candidates (> {threshold:.0%}): the seeds' results "
            f"are correlated, so their ± std understates the spread (a larger pool or fewer candidates per seed "
            f"gives disjoint splits)")


def warnings_of(table: pd.DataFrame) -> list[str]:
    """One line per split whose blind baseline exceeds its threshold, one per dataset whose seeds' splits
    overlap above theirs."""
    lines = [f"WARNING: {r.dataset} seed {r.seed} ({r.setting}): blind-baseline AUROC {r.blind_auroc:.3f} > "
             f"{r.blind_warn:g} (± {r.blind_auroc_std:.3f} over {r.blind_folds} folds): members and non-members "
             f"may be separable without the model (topic, date or style shift); read attack AUROCs on this "
             f"split against it"
             for r in table.itertuples() if r.blind_warning]
    return lines + [f"WARNING: {overlap_warning(r.dataset, r.n_shared, r.n_candidates, r.overlap_warn)}"
                    for r in per_dataset(table).itertuples() if r.overlap_warning]


def duplicate_counts(r) -> str:
    """A row's cross-class duplicate pairs, ``exact / n-gram / embedding`` (``n/a``: not checked)."""
    return " / ".join("n/a" if getattr(r, f"dup_{k}") < 0 else str(getattr(r, f"dup_{k}")) for k in DUPLICATE_KINDS)


def summary_markdown(table: pd.DataFrame) -> str:
    """``results/leakage/summary.md``: one line per split, then the warnings."""
    table = table.sort_values(["dataset", "seed"])
    head = ["dataset", "seed", "setting", "members", "non-members", "shared with another seed",
            "duplicates exact / n-gram / embedding", "blind AUROC", "length AUROC", "words members (mean ± std)",
            "words non-members (mean ± std)"]
    lines = ["# Leakage and distribution-shift checks", "",
             "Per split: the most candidates another seed's split also holds, cross-class duplicate pairs (exact; "
             "word n-gram Jaccard; embedding cosine), the blind baseline (bag-of-n-grams logistic regression, "
             "cross-validated AUROC, no model involved) and the length shift (AUROC of word count alone). "
             "50% = no shift.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.itertuples():
        lines.append("| " + " | ".join([
            r.dataset, str(r.seed), r.setting, str(r.n_members), str(r.n_nonmembers),
            f"{r.n_shared}" + (" ⚠" if r.overlap_warning else ""), duplicate_counts(r),
            f"{100 * r.blind_auroc:.1f} ± {100 * r.blind_auroc_std:.1f}" + (" ⚠" if r.blind_warning else ""),
            f"{100 * r.length_auroc:.1f}" + (" ⚠" if r.length_warning else ""),
            f"{r.members_words_mean:.1f} ± {r.members_words_std:.1f}",
            f"{r.nonmembers_words_mean:.1f} ± {r.nonmembers_words_std:.1f}"]) + " |")
    warns = warnings_of(table)
    lines += ["", *(warns or ["No split exceeds its blind-baseline or overlap threshold."])]
    return "\n".join(lines) + "\n"


def per_dataset(table: pd.DataFrame) -> pd.DataFrame:
    """Seed-aggregated split checks per dataset: the most candidates two seeds' splits share (``n_shared`` of a
    split's ``n_candidates``, ``overlap_warning`` above the threshold), blind and length AUROC mean ± std
    (ddof 1), duplicate pairs summed over seeds, number of flagged seeds."""
    rows = []
    for dataset, df in table.groupby("dataset", sort=True):
        row = {"dataset": dataset, "setting": "/".join(sorted(df["setting"].unique())), "n_seeds": len(df),
               "n_shared": int(df["n_shared"].max()), "n_candidates": int((df["n_members"] + df["n_nonmembers"]).max()),
               "overlap_warn": float(df["overlap_warn"].iloc[0]), "overlap_warning": bool(df["overlap_warning"].any())}
        for col in ("blind_auroc", "length_auroc"):
            row[f"{col}_mean"] = float(df[col].mean())
            row[f"{col}_std"] = float(df[col].std(ddof=1)) if len(df) > 1 else 0.0
        for kind in DUPLICATE_KINDS:
            counts = df[f"dup_{kind}"]
            row[f"dup_{kind}"] = -1 if (counts < 0).any() else int(counts.sum())
        row["blind_warnings"] = int(df["blind_warning"].sum())
        row["members_words_mean"] = float(df["members_words_mean"].mean())
        row["nonmembers_words_mean"] = float(df["nonmembers_words_mean"].mean())
        rows.append(row)
    return pd.DataFrame(rows)
