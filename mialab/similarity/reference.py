"""Slow executable specification of the lexical reconstruction counts (ADRA Table 16).

Straightforward pure Python: explicit token sets, the O(n*m) dynamic programme for the longest
common subsequence, and explicit sets of n-gram tuples. :mod:`mialab.similarity.kernel`
must return exactly the same counts; the tests and ``benchmarks/bench_reconstruction.py``
compare the two. Never used on a hot path.
"""

from __future__ import annotations

from mialab.text.words import word_tokens


def lcs_length_dp(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence of two token lists (row-by-row DP)."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, start=1):
            cur[j] = prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1])
        prev = cur
    return prev[-1]


def ngram_set(tokens: list[str], n_min: int, n_max: int) -> set[tuple[str, ...]]:
    """Every distinct contiguous n-gram of ``tokens`` with ``n_min <= n <= n_max``."""
    return {tuple(tokens[i:i + n]) for n in range(n_min, n_max + 1) for i in range(len(tokens) - n + 1)}


def greedy_scan(tokens: list[str], other: list[str], n_min: int, cap: int) -> tuple[int, int]:
    """(longest match, covered positions) of the released code's greedy left-to-right match scan.

    At position ``i`` take the longest ``tokens[i:i + L]``, ``n_min <= L <= cap``, that is an n-gram
    of ``other``; if there is one jump past it, else move one position on.
    """
    grams = ngram_set(other, n_min, cap)
    i = longest = covered = 0
    while i < len(tokens):
        best = 0
        for n in range(n_min, min(cap, len(tokens) - i) + 1):
            if tuple(tokens[i:i + n]) not in grams:
                break
            best = n
        longest, covered = max(longest, best), covered + best
        i += best or 1
    return longest, covered


def reference_counts(candidate: str, reference: str, *, n_min: int = 3, n_max: int | None = None,
                     dynamic: bool = False, split_scripts: bool = True) -> dict[str, int]:
    """The integer counts behind every lexical metric of one (candidate, reference) pair.

    The n-gram range is ``[n_min, n_max]``, with ``n_max=None`` meaning the pair's LCS length, or with
    ``dynamic`` ``[n_min, max(n_min, longest greedy match of either text in the other, at most n_max)]``.
    """
    c, r = word_tokens(candidate, split_scripts), word_tokens(reference, split_scripts)
    tc, tr = set(c), set(r)
    lcs = lcs_length_dp(c, r)
    cap = max(len(c), len(r)) if n_max is None else n_max
    longest_c, covered_c = greedy_scan(c, r, n_min, cap)
    longest_r, covered_r = greedy_scan(r, c, n_min, cap)
    hi = max(n_min, longest_c, longest_r) if dynamic else lcs if n_max is None else n_max
    nc, nr = ngram_set(c, n_min, hi), ngram_set(r, n_min, hi)
    return {
        "n_cand": len(c), "n_ref": len(r),
        "uniq_cand": len(tc), "uniq_ref": len(tr), "uniq_common": len(tc & tr),
        "lcs": lcs,
        "ngram_cand": len(nc), "ngram_ref": len(nr), "ngram_common": len(nc & nr),
        "greedy_cand": covered_c, "greedy_ref": covered_r,
        "words_cand": len(candidate.split()), "words_ref": len(reference.split()),
    }
