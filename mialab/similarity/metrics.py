"""Reconstruction metrics of ADRA (Table 16): names, integer counts -> scores, embeddings.

Notation: ``c`` = candidate word tokens (a model's completion), ``r`` = reference word tokens
(the ground truth), tokenised by :func:`mialab.text.words.word_tokens`; ``T(x)`` is
the set of unique tokens, ``LCS`` the longest common subsequence length over the token
sequences and ``N(x)`` the set of contiguous n-grams with ``n_min <= n <= n_max`` (default
``[3, LCS(c, r)]``, counted as sets so repeating a phrase earns nothing).

============================  ====================================  ==============
metric                        definition                            normalised by
============================  ====================================  ==============
``jaccard``                   |T(c) & T(r)| / |T(c) | T(r)|          union
``token_overlap_ref``         |T(c) & T(r)| / |T(r)|                 reference
``token_overlap_cand``        |T(c) & T(r)| / |T(c)|                 candidate
``lcs_length``                LCS(c, r)                              raw count
``lcs_ratio_ref``             LCS / |r|                              reference
``lcs_ratio_cand``            LCS / |c|                              candidate
``ngram_coverage_ref``        |N(c) & N(r)| / |N(r)|                 reference
``ngram_coverage_cand``       |N(c) & N(r)| / |N(c)|                 candidate
``embedding_cosine``          cos(phi(c), phi(r))                    (sentence encoder)
============================  ====================================  ==============

Conventions: a ratio whose denominator is 0 is 0, never NaN. Hence an empty candidate scores 0
on everything, so does an empty reference, and so does a pair of two empty texts (nothing was
reconstructed, so nothing is rewarded). N-gram coverage is 0 whenever the range holds no
n-gram, e.g. when ``LCS < n_min`` (identical texts shorter than ``n_min`` words included).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

# Integer counts from which every lexical metric is a ratio (see reference.reference_counts).
COUNT_NAMES = ("n_cand", "n_ref", "uniq_cand", "uniq_ref", "uniq_common", "lcs",
               "ngram_cand", "ngram_ref", "ngram_common", "greedy_cand", "greedy_ref", "words_cand", "words_ref")

LEXICAL_METRICS = ("jaccard", "token_overlap_ref", "token_overlap_cand", "lcs_length", "lcs_ratio_ref",
                   "lcs_ratio_cand", "ngram_coverage_ref", "ngram_coverage_cand")


def safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` as float64, 0 where ``den == 0``."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    return np.divide(num, den, out=np.zeros(np.broadcast(num, den).shape), where=den != 0)


CONVENTIONS = ("code", "paper")


WORD_COUNTS = ("n_cand", "n_ref", "words_cand", "words_ref")


def metric_counts(names: Sequence[str] = LEXICAL_METRICS, convention: str = "paper") -> tuple[str, ...]:
    """The counts (of ``COUNT_NAMES``) from which :func:`metrics_from_counts` computes the metrics ``names``."""
    code = convention == "code"
    needs = {
        "jaccard": ("uniq_cand", "uniq_ref", "uniq_common"),
        "token_overlap_ref": ("uniq_common", "n_ref" if code else "uniq_ref"),
        "token_overlap_cand": ("uniq_common", "n_cand" if code else "uniq_cand"),
        "lcs_length": ("lcs",), "lcs_ratio_ref": ("lcs", "n_ref"), "lcs_ratio_cand": ("lcs", "n_cand"),
        "ngram_coverage_ref": ("greedy_ref", "n_ref") if code else ("ngram_common", "ngram_ref"),
        "ngram_coverage_cand": ("greedy_cand", "n_cand") if code else ("ngram_common", "ngram_cand"),
    }
    wanted = {count for name in names for count in needs[name]}
    return tuple(count for count in COUNT_NAMES if count in wanted)


def metrics_from_counts(counts: Mapping[str, np.ndarray], convention: str = "paper",
                        names: Sequence[str] = LEXICAL_METRICS) -> dict[str, np.ndarray]:
    """The lexical metrics ``names`` of Table 16 (default all), plus the word counts in ``counts``, from the integer
    counts (only those of :func:`metric_counts` are read).

    ``paper``: the definitions of the table above (also the released code's *reward*); ``code``: the
    released code's *evaluation* (``reconstruction_evaluation.py``): token overlap divided by the
    token count (not the unique-token count) and n-gram coverage = the fraction of positions covered
    by the greedy left-to-right matches (``greedy_*`` counts) instead of the set ratio.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown metric convention {convention!r}; known: {', '.join(CONVENTIONS)}")
    code = convention == "code"
    c = counts
    formulas = {
        "jaccard": lambda: safe_ratio(c["uniq_common"], np.asarray(c["uniq_cand"]) + np.asarray(c["uniq_ref"])
                                      - np.asarray(c["uniq_common"])),
        "token_overlap_ref": lambda: safe_ratio(c["uniq_common"], c["n_ref" if code else "uniq_ref"]),
        "token_overlap_cand": lambda: safe_ratio(c["uniq_common"], c["n_cand" if code else "uniq_cand"]),
        "lcs_length": lambda: np.asarray(c["lcs"], dtype=np.int64),
        "lcs_ratio_ref": lambda: safe_ratio(c["lcs"], c["n_ref"]),
        "lcs_ratio_cand": lambda: safe_ratio(c["lcs"], c["n_cand"]),
        "ngram_coverage_ref": lambda: (safe_ratio(c["greedy_ref"], c["n_ref"]) if code
                                       else safe_ratio(c["ngram_common"], c["ngram_ref"])),
        "ngram_coverage_cand": lambda: (safe_ratio(c["greedy_cand"], c["n_cand"]) if code
                                        else safe_ratio(c["ngram_common"], c["ngram_cand"])),
    }
    return {**{name: formulas[name]() for name in names},
            **{k: np.asarray(c[k], dtype=np.int64) for k in WORD_COUNTS if k in c}}


def embedding_cosine(candidates: Sequence[str], references: Sequence[str], *, model: str = "all-MiniLM-L6-v2",
                     device: str = "auto", dtype: str = "float32") -> np.ndarray:
    """Cosine similarity of sentence embeddings, pair by pair; each distinct text is encoded once, on the
    job's GPU where it has one (mialab.pipeline.sizing gives the jobs of a >= 1B encoder one), else on the CPU.

    ``model`` is any sentence-transformers model name or path (default: offline all-MiniLM-L6-v2;
    the paper uses Qwen3-Embedding-8B). Empty texts score 0 (same convention as the lexical metrics).
    """
    from mialab.lm.embeddings import encode

    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} references")
    texts = sorted(set(candidates) | set(references))
    row = {t: i for i, t in enumerate(texts)}
    emb = encode(texts, model=model, device=device, dtype=dtype) if texts else np.zeros((0, 1))
    ci = np.fromiter((row[t] for t in candidates), dtype=np.int64, count=len(candidates))
    ri = np.fromiter((row[t] for t in references), dtype=np.int64, count=len(references))
    cos = np.einsum("ij,ij->i", emb[ci], emb[ri]).astype(np.float64)
    empty = np.array([not c.strip() or not r.strip() for c, r in zip(candidates, references)], dtype=bool)
    cos[empty] = 0.0
    if not np.isfinite(cos).all():
        raise FloatingPointError("non-finite embedding cosine")
    return cos
