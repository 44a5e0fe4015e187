"""Fast, exact, batched computation of the lexical reconstruction counts and metrics.

Gives exactly the integers of :func:`mialab.similarity.reference.reference_counts` (tested
on thousands of random pairs) at a fraction of the cost, so that GRPO can score 16,384 rollouts
of 512 words per step on a couple of CPU cores, and computes only the counts asked for (the
``ngram`` reward needs neither the LCS nor the unique-token counts).

How, per chunk of pairs:

- each distinct text of the chunk is tokenised once (the true suffix and the K distractors
  repeat), all of them together on their UTF-8 bytes (:func:`encode_texts`): the rule of
  :mod:`mialab.text.words` as byte masks (whitespace, the characters of scripts without spaces,
  edge punctuation), then one vocabulary for the chunk (short tokens as 64-bit integer keys);
- LCS: rapidfuzz's bit-parallel ``LCSseq`` over the id sequences (``process.cpdist``);
- every set count (unique tokens, distinct n-grams, common n-grams, for all ``n`` at once) comes
  from one generalised suffix array of ``c_1 #_1 r_1 $_1 c_2 #_2 r_2 $_2 ...`` built by
  libdivsufsort (``pydivsufsort``) with its LCP array (Kasai). Each pair gets its own alphabet
  and every separator is unique, so no common prefix crosses a text or a pair and suffixes of
  different pairs have LCP 0. In suffix-array order the suffixes that start with the same
  string are contiguous, hence, for one text, a length-``n`` n-gram is new at the suffix whose
  LCP with the previous suffix *of the same text* is ``< n``; a candidate n-gram also occurs in
  the reference iff ``n`` is at most that suffix's matching statistic (the longest prefix it
  shares with any reference suffix = the larger LCP with the nearest reference suffix above or
  below). In that order the suffixes form runs of one text's suffixes: the LCP with the nearest
  suffix of the other text above (below) is the minimum of the LCP array from the start of the
  suffix's run (to its end), that with the previous suffix of the same text the LCP with the
  previous suffix inside a run and the minimum over the previous run at a run's start; so two
  running minima that restart at every run (one ``maximum.accumulate`` each way) give both (a
  suffix of another pair in between forces 0, which is then also the true value). Back in text
  order, the number of lengths ``n`` in ``[n_min, n_max]`` passing these tests is closed-form per
  suffix, summed over each text. Unique tokens are the case ``n = 1``. No n-gram is ever
  materialised; everything is numpy, pandas or C.

Chunks run in-process (``workers=1``) or on a persistent pool of ``workers`` processes.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pydivsufsort
from pydivsufsort import divsufsort, kasai
from rapidfuzz import process
from rapidfuzz.distance import LCSseq

from mialab.similarity.metrics import COUNT_NAMES, LEXICAL_METRICS, metrics_from_counts
from mialab.text.words import NO_SPACE_RANGES, PUNCTUATION

DEFAULT_CHUNK_SIZE = 32

# Code points of the non-ASCII characters str.split() splits on (all below U+3001), and the bounds of the
# scripts without spaces (sorted [start, end) pairs).
WIDE_SPACES = np.array([c for c in range(0x80, 0x3001) if chr(c).isspace()], dtype=np.int32)
# Bytes after the text: code_points reads 3, token_ids 8.
PAD = 8


def byte_ranges(values: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """The runs of consecutive byte values among ``values``, as (first, count)."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and runs[-1][0] + runs[-1][1] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    return tuple((first, count) for first, count in runs)


def byte_mask(b: np.ndarray, ranges: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Which bytes of ``b`` (uint8) lie in the byte ranges: comparisons, which numpy vectorises (a table lookup
    ``table[b]`` is many times slower)."""
    mask = np.zeros(len(b), dtype=bool)
    for first, count in ranges:
        mask |= (b == first) if count == 1 else (b - np.uint8(first) < count)
    return mask


# The ASCII whitespace of str.split() (\t-\r, \x1c-space), the capitals, and the punctuation of the token edges.
SPACE_BYTES = byte_ranges([*range(9, 14), *range(28, 33)])
CAPITAL_BYTES = byte_ranges(range(65, 91))
PUNCTUATION_BYTES = byte_ranges(PUNCTUATION.encode())
NO_SPACE_BOUNDS = np.array([[ord(lo), ord(hi) + 1] for lo, hi in zip(NO_SPACE_RANGES[0::3], NO_SPACE_RANGES[2::3])],
                           dtype=np.int32).ravel()


def code_points(b: np.ndarray, lead: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(code point, width in bytes) of the multi-byte UTF-8 characters whose lead bytes are ``b[lead]``
    (``b`` padded with 3 bytes)."""
    b0, b1, b2, b3 = (b[lead + k].astype(np.int32) for k in range(4))
    width = 2 + (b0 >= 0xE0) + (b0 >= 0xF0)
    tail = np.where(width == 2, b1 & 0x3F, np.where(width == 3, (b1 & 0x3F) << 6 | b2 & 0x3F,
                                                     (b1 & 0x3F) << 12 | (b2 & 0x3F) << 6 | b3 & 0x3F))
    return (b0 & (0x7F >> width)) << (6 * (width - 1)) | tail, width


def lowered_bytes(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """UTF-8 bytes of the ``str.lower`` of the texts joined by newlines (padded with ``PAD`` zero bytes), bytes per
    text, and the positions, code points and widths of the multi-byte characters.

    ``str.lower`` only where a text has a non-ASCII character it changes (then its rules, final sigma
    included, apply); everywhere else lowercasing is the ASCII table on the bytes, several times faster.
    """
    encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
    b, n_bytes, lead, cp, width = joined_bytes(encoded)
    distinct, which = np.unique(cp, return_inverse=True)
    cased = lead[np.array([chr(c).lower() != chr(c) for c in distinct.tolist()], dtype=bool)[which]]
    if len(cased):
        for i in np.unique(np.searchsorted(np.cumsum(n_bytes + 1), cased, side="right")).tolist():
            encoded[i] = texts[i].lower().encode("utf-8", "surrogatepass")
        b, n_bytes, lead, cp, width = joined_bytes(encoded)
    return b + (byte_mask(b, CAPITAL_BYTES).view(np.uint8) << 5), n_bytes, lead, cp, width


def joined_bytes(encoded: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The byte strings joined by newlines (and padded), their lengths, and their multi-byte characters."""
    n_bytes = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    b = np.frombuffer(b"\n".join(encoded) + b"\n" + bytes(PAD), dtype=np.uint8)
    lead = np.flatnonzero(b[:-PAD] >= 0xC0)
    return b, n_bytes, lead, *code_points(b, lead)


def encode_texts(texts: Sequence[str], split_scripts: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Token ids of texts (one vocabulary), tokens per text, whitespace words per text, vocabulary size.

    The rule of :mod:`mialab.text.words` on the UTF-8 bytes of all texts at once (lowercased by
    ``str.lower``, joined by newlines): a piece starts after whitespace and, with ``split_scripts``,
    at and after each character of a script without spaces; a piece's token is the piece without
    the punctuation runs at its edges (no token when nothing is left). The masks are numpy, the
    vocabulary :func:`token_ids`.
    """
    b, n_bytes, lead, cp, width = lowered_bytes(texts)
    n = len(b) - PAD  # b[:n] ends with a newline; the padding serves code_points and token_ids
    space = byte_mask(b[:n], SPACE_BYTES)
    start = np.zeros(n + 1, dtype=bool)  # first byte of a piece
    if len(lead):
        wide = lead[np.isin(cp, WIDE_SPACES)]
        space[wide] = space[wide + 1] = True
        space[wide[b[wide] >= 0xE0] + 2] = True
        if split_scripts:
            alone = (np.searchsorted(NO_SPACE_BOUNDS, cp, side="right") % 2).astype(bool)
            start[lead[alone]] = start[(lead + width)[alone]] = True
    keep = ~space
    word_start = keep.copy()
    word_start[1:] &= space[:-1]
    start[:n] |= word_start
    start[:n] &= keep
    start[n] = True
    punct = np.flatnonzero(byte_mask(b[:n], PUNCTUATION_BYTES))
    if len(punct):  # drop the runs of punctuation that touch an edge of their piece
        run = np.flatnonzero(np.r_[True, (np.diff(punct) != 1) | start[punct[1:]]])
        run_len = np.diff(np.append(run, len(punct)))
        first, last = punct[run], punct[run + run_len - 1]
        keep[punct[np.repeat(start[first] | space[last + 1] | start[last + 1], run_len)]] = False
    token = keep.copy()
    token[1:] &= start[1:n] | ~keep[:-1]
    first = np.flatnonzero(token)
    token = keep & start[1:]
    token[:-1] |= keep[:-1] & ~keep[1:]
    end = np.flatnonzero(token) + 1
    ids, vocab_size = token_ids(b, first, end)
    bounds = np.append(np.cumsum(n_bytes + 1) - n_bytes - 1, n)
    return (ids, np.diff(np.searchsorted(first, bounds)), np.diff(np.searchsorted(np.flatnonzero(word_start), bounds)),
            vocab_size)


def token_ids(b: np.ndarray, first: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids of the tokens ``b[first[k]:end[k]]`` (equal ids iff equal bytes) and their number.

    Every token gets an injective 64-bit key, its length class in the top byte, and pandas' factorize
    numbers the keys: a token of at most 7 bytes is its bytes; one of 8-15 bytes is the pair of the
    dense ids of its two 8-byte words (bytes, then the rest and the length); a longer one (rare in most
    scripts) is its index in a dict of their bytes. ``b`` is padded with at least 8 bytes.
    """
    length = (end - first).astype(np.uint64)
    words = np.ndarray(len(b) - 7, dtype="<u8", buffer=b, strides=(1,))  # the 8 bytes from each position
    keys = words[first] & ((np.uint64(1) << (np.uint64(8) * np.minimum(length, 7))) - np.uint64(1))
    keys |= np.minimum(length, 8) << np.uint64(56)
    mid = np.flatnonzero((length > 7) & (length < 16))
    if len(mid):
        rest = words[first[mid] + 8] & ((np.uint64(1) << (np.uint64(8) * (length[mid] - np.uint64(8)))) - np.uint64(1))
        rest |= length[mid] << np.uint64(56)
        word_ids = factorize(np.concatenate([words[first[mid]], rest]))[0]
        keys[mid] = np.uint64(8 << 56) | (word_ids[:len(mid)] * (2 * len(mid)) + word_ids[len(mid):]).astype(np.uint64)
    long = np.flatnonzero(length > 15)
    if len(long):
        view, index = memoryview(b), {}
        found = [index.setdefault(view[f:e].tobytes(), len(index))
                 for f, e in zip(first[long].tolist(), end[long].tolist())]
        keys[long] = np.uint64(9 << 56) | np.array(found, dtype=np.uint64)
    ids, uniques = factorize(keys)
    return ids.astype(np.int64, copy=False), len(uniques)


def factorize(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pandas' factorize of 64-bit keys (ids in order of first appearance), after a multiply by an odd constant: a
    bijection mod 2**64, so the ids are unchanged, that spreads the keys' structured bits, which its table hashes
    poorly."""
    return pd.factorize((keys * np.uint64(0x9E3779B97F4A7C15)).view(np.int64))


@functools.lru_cache(maxsize=1)
def _bundled_openmp() -> ctypes.CDLL | None:
    """The OpenMP runtime that pydivsufsort's wheel bundles for libdivsufsort (None if absent)."""
    found = sorted((Path(pydivsufsort.__file__).parent.parent / "pydivsufsort.libs").glob("libgomp*.so*"))
    return ctypes.CDLL(str(found[0])) if found else None


def suffix_array(x: np.ndarray) -> np.ndarray:
    """Suffix array of an integer sequence (libdivsufsort), single-threaded.

    The wheel's libdivsufsort opens an OpenMP parallel region on every call, which costs
    milliseconds per call (tens on a busy machine), far more than sorting one chunk; chunks are
    parallelised over processes instead, so its private OpenMP runtime is pinned to one thread.
    Symbols below 2**16 are sorted as big-endian byte pairs directly (as pydivsufsort does, minus its copies).
    """
    omp = _bundled_openmp()
    if omp is not None:
        omp.omp_set_num_threads(1)
    if len(x) == 0 or x.min() < 0 or x.max() >= 1 << 16:
        return divsufsort(x)
    sa = divsufsort(x.astype(">u2").view(np.uint8))
    return sa[(sa & 1) == 0] >> 1


def rapidfuzz_sequence(ids: np.ndarray, vocab_size: int) -> str | list[int]:
    """An id sequence in rapidfuzz's fastest exact form: a str of code points when ids fit below the surrogates."""
    if vocab_size <= 0xD800:
        return ids.astype("<u4").tobytes().decode("utf-32-le")
    return ids.tolist()


def run_minima(edges: np.ndarray, run_start: np.ndarray, big: int) -> tuple[np.ndarray, np.ndarray]:
    """For each entry ``k`` of runs of entries: the minimum of ``edges`` from its run's start to ``k``
    (``edges[start..k]``) and from ``k + 1`` to its run's end (``edges[k + 1..end]``).

    ``edges`` has one more value than entries (``edges[k]`` lies between entries ``k - 1`` and ``k``),
    ``run_start`` marks the first entry of each run, ``big`` exceeds every edge. One running maximum each
    way over ``run * big - edge``, so that a later run always dominates.
    """
    n = len(run_start)
    dtype = np.int32 if (n + 2) * big < 2**31 else np.int64  # half the memory traffic when it fits
    run = np.cumsum(run_start, dtype=dtype)
    run *= dtype(big)
    forward = run - np.maximum.accumulate(run - edges[:n])
    back = run[-1] - run[::-1]  # runs numbered from the end, times big
    backward = (back - np.maximum.accumulate(back - edges[:0:-1]))[::-1]
    return forward, backward


def _span(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """How many integers lie in ``[lo, hi]`` (0 when empty)."""
    return np.maximum(hi - lo + 1, 0)


def greedy_matches(ms: np.ndarray, text: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_min: int,
                   cap: int, covered: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """(longest match, covered positions or None when not ``covered``) of the released code's greedy
    left-to-right scan of each text.

    The scan (``ngram_coverage._find_ngram_matches_optimized``) stands at position ``i``, takes the
    longest n-gram ``[i, i + L)`` with ``n_min <= L <= cap`` found in the other text (``L = min(ms[i],
    cap)``, ``ms`` the matching statistics), jumps to ``i + L`` if there is one, else to ``i + 1``.
    Text ``t`` is ``[starts[t], ends[t])`` of the position array; ``text[i]`` is the text holding ``i``.
    Only match positions matter, so the visited matches form a chain over them, aggregated by
    pointer doubling (max and sum of L along each chain).
    """
    length = np.minimum(ms, cap)
    is_match = length >= n_min
    at = np.flatnonzero(is_match)
    S = len(at)
    if S == 0:
        return np.zeros(len(starts), dtype=np.int64), np.zeros(len(starts), dtype=np.int64) if covered else None
    before = np.zeros(len(ms) + 1, dtype=np.int64)  # match positions before each position
    np.cumsum(is_match, out=before[1:])

    def first_match(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Index into ``at`` of the first match position in ``[lo, hi)``, or S (none)."""
        j = before[lo]
        return np.where(at[np.minimum(j, S - 1)] < hi, j, S)

    step = length[at]
    nxt = np.append(first_match(at + step, ends[text[at]]), S)
    longest = np.append(step, 0)
    total = np.append(step, 0) if covered else None
    first = first_match(starts, ends)  # where each text's chain starts; done when every chain has reached S
    while (nxt[first] != S).any():
        if covered:
            total += total[nxt]
        longest, nxt = np.maximum(longest, longest[nxt]), nxt[nxt]
    return longest[first], total[first] if covered else None


SET_COUNTS = frozenset(("uniq_cand", "uniq_ref", "uniq_common", "ngram_cand", "ngram_ref", "ngram_common",
                        "greedy_cand", "greedy_ref"))


def chunk_counts(candidates: Sequence[str], references: Sequence[str], n_min: int, n_max: int | None,
                 dynamic: bool = False, split_scripts: bool = True,
                 names: Sequence[str] = COUNT_NAMES) -> np.ndarray:
    """The counts ``names`` (of ``COUNT_NAMES``) of each pair of one chunk, as an int64 array (counts x pairs).

    N-gram range per pair: ``[n_min, n_max]``; ``n_max=None``: up to the pair's LCS; ``dynamic``:
    up to the longest greedy match of either text in the other (at most ``n_max``; ``n_min`` when
    none), the released code's ``ADRA_USE_DYNAMIC_MAX_NGRAM`` mode. Only what ``names`` needs is
    computed: the LCS when it or the n-gram range asks for it, the suffix array for the set and greedy counts.
    """
    P = len(candidates)
    if P == 0:
        return np.zeros((len(names), 0), dtype=np.int64)
    index: dict[str, int] = {}
    cand = np.array([index.setdefault(t, len(index)) for t in candidates], dtype=np.int64)
    ref = np.array([index.setdefault(t, len(index)) for t in references], dtype=np.int64)
    ids, lengths, n_words, V = encode_texts(list(index), split_scripts)
    starts = np.cumsum(lengths) - lengths
    out = {"n_cand": lengths[cand], "n_ref": lengths[ref], "words_cand": n_words[cand], "words_ref": n_words[ref]}
    ngram_by_lcs = n_max is None and not dynamic and bool({"ngram_cand", "ngram_ref", "ngram_common"} & set(names))
    if "lcs" in names or ngram_by_lcs:
        seqs = [rapidfuzz_sequence(ids[s:s + k], V) for s, k in zip(starts.tolist(), lengths.tolist())]
        out["lcs"] = process.cpdist([seqs[i] for i in cand], [seqs[i] for i in ref], scorer=LCSseq.similarity,
                                    dtype=np.int64).astype(np.int64)
    if SET_COUNTS & set(names):
        out.update(set_counts(ids, starts, lengths, cand, ref, V, n_min, n_max, dynamic, out.get("lcs"), names))
    return np.stack([out[name] for name in names]).astype(np.int64, copy=False)


def set_counts(ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, cand: np.ndarray, ref: np.ndarray, V: int,
               n_min: int, n_max: int | None, dynamic: bool, lcs: np.ndarray | None,
               names: Sequence[str]) -> dict[str, np.ndarray]:
    """The unique-token, n-gram and greedy counts among ``names`` of pairs ``(cand[p], ref[p])`` of texts
    ``ids[starts[t]:starts[t] + lengths[t]]``, from one generalised suffix array (module doc)."""
    P = len(cand)
    # Generalised text: pair p contributes c_p #_p r_p $_p with symbols offset by p * (V + 2), so
    # each pair has its own alphabet and every separator is unique: no common prefix crosses a
    # text or a pair, and two suffixes of different pairs have LCP 0.
    ext = np.append(ids, [V, V + 1])  # separators live at the end of ext
    seg_len = np.ones(4 * P, dtype=np.int64)
    seg_len[0::4], seg_len[2::4] = lengths[cand], lengths[ref]
    seg_src = np.full(4 * P, len(ext) - 2, dtype=np.int64)
    seg_src[0::4], seg_src[2::4], seg_src[3::4] = starts[cand], starts[ref], len(ext) - 1
    seg = np.repeat(np.arange(4 * P, dtype=np.int32), seg_len)
    seg_end = np.cumsum(seg_len)
    src = np.arange(len(seg)) + np.repeat(seg_src - (seg_end - seg_len), seg_len)  # position in ext
    # Only injectivity matters for the suffix array (not the order of symbols), so relabel densely
    # (by a table of the used symbols when it is small): fewer bytes per symbol make libdivsufsort faster.
    x = ext[src] + np.repeat(np.arange(4 * P) // 4 * (V + 2), seg_len)
    if P * (V + 2) <= 1 << 24:
        rank = np.zeros(P * (V + 2), dtype=np.int32)
        rank[x] = 1
        x = np.cumsum(rank, out=rank)[x]
    else:
        x = pd.factorize(x)[0]

    sa = suffix_array(x)
    # In suffix-array order: runs of suffixes of the same text type (candidate / reference; the
    # separators, whose suffixes share nothing with any other, count as candidates), and the LCP
    # with the previous suffix (0 before the first, as after the last).
    is_ref = ((seg & 3) == 2)[sa]
    edges = np.zeros(len(x) + 1, dtype=np.int32)
    edges[1:-1] = kasai(x, sa)[:-1]
    if n_max is not None:  # every count below compares LCPs with lengths <= n_max only
        np.minimum(edges, n_max + 1, out=edges)
    run_start = np.empty(len(x), dtype=bool)
    run_start[0] = True
    np.not_equal(is_ref[1:], is_ref[:-1], out=run_start[1:])
    # LCP with the closest suffix of the other text above / below: the minimum edge back to the run's start / on
    # to its end; its maximum is the matching statistic (longest prefix shared with any suffix of the other text).
    above, below = run_minima(edges, run_start, int(edges.max()) + 1)
    # LCP with the closest suffix of the same text above: the edge above inside a run; at a run's start, the
    # minimum over the previous run and its edges.
    lcp_prev = edges[:-1].copy()
    first = np.flatnonzero(run_start[1:]) + 1
    lcp_prev[first] = np.minimum(above[first - 1], edges[first])
    # Back to text order, where every text is a contiguous segment.
    ms = np.empty(len(x), dtype=above.dtype)
    ms[sa] = np.maximum(above, below)
    prev = np.empty(len(x), dtype=lcp_prev.dtype)
    prev[sa] = lcp_prev
    out = {}
    seg_start = seg_end - seg_len

    def per_text(values: np.ndarray) -> np.ndarray:
        """Sum of ``values`` over each segment: pair p's candidate is segment 4p, its reference 4p + 2."""
        sums = np.add.reduceat(values, seg_start, dtype=np.int64)
        sums[seg_len == 0] = 0  # reduceat gives an empty segment the next value
        return sums

    new_token = prev == 0
    for name, side, where in (("uniq_cand", 0, new_token), ("uniq_ref", 2, new_token),
                              ("uniq_common", 0, new_token & (ms >= 1))):
        if name in names:
            out[name] = per_text(where)[side::4]
    ngram_names = {"ngram_cand", "ngram_ref", "ngram_common"} & set(names)
    greedy_names = {"greedy_cand", "greedy_ref"} & set(names)
    if greedy_names or (dynamic and ngram_names):
        cap = int(lengths.max(initial=0)) if n_max is None else n_max
        greedy_longest, covered = greedy_matches(ms, seg, seg_start, seg_end, n_min, cap, bool(greedy_names))
        if greedy_names:
            out["greedy_cand"], out["greedy_ref"] = covered[0::4], covered[2::4]
    if not ngram_names:
        return out
    if dynamic:
        hi_n = np.maximum(np.maximum(greedy_longest[0::4], greedy_longest[2::4]), n_min)
    else:
        hi_n = lcs if n_max is None else np.full(P, n_max, dtype=np.int64)
    first_new = np.maximum(prev + 1, n_min)  # shortest n-gram starting here not seen earlier in its text
    hi = np.repeat(hi_n.astype(prev.dtype, copy=False), seg_len.reshape(P, 4).sum(axis=1))
    if "ngram_cand" in names or "ngram_ref" in names:
        rest = np.repeat(seg_end.astype(prev.dtype), seg_len) - np.arange(len(x), dtype=prev.dtype)  # suffix lengths
        ngrams = per_text(_span(first_new, np.minimum(hi, rest)))
        out["ngram_cand"], out["ngram_ref"] = ngrams[0::4], ngrams[2::4]
    if "ngram_common" in names:
        out["ngram_common"] = per_text(_span(first_new, np.minimum(hi, ms)))[0::4]
    return out


@functools.cache
def worker_pool(workers: int) -> ProcessPoolExecutor:
    """A persistent pool of ``workers`` processes, started on first use and reused across calls.

    Started by forkserver (safe next to torch / OpenMP threads); as with spawn, a script that asks
    for ``workers > 1`` needs an ``if __name__ == "__main__":`` guard.
    """
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx)


def lexical_counts(candidates: Sequence[str], references: Sequence[str], *, n_min: int = 3, n_max: int | None = None,
                   dynamic: bool = False, split_scripts: bool = True, workers: int = 1,
                   chunk_size: int = DEFAULT_CHUNK_SIZE, counts: Sequence[str] = COUNT_NAMES) -> dict[str, np.ndarray]:
    """Integer counts ``counts`` (of ``COUNT_NAMES``, default all) of every (candidate, reference) pair, as int64
    arrays; only what they need is computed (:func:`chunk_counts`).

    N-gram range and ``dynamic``: :func:`chunk_counts`; ``split_scripts``: the tokeniser's step 3.

    ``workers=1`` computes in-process; more spreads chunks of ``chunk_size`` pairs over a
    persistent process pool. Exactly equal to the reference implementation.
    """
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} references")
    if n_min < 1 or (n_max is not None and n_max < n_min):
        raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
    if dynamic and n_max is None:
        raise ValueError("the dynamic n-gram range needs n_max (the code's search limit, 30)")
    if workers < 1 or chunk_size < 1:
        raise ValueError(f"workers and chunk_size must be >= 1, got {workers}, {chunk_size}")
    unknown = [name for name in counts if name not in COUNT_NAMES]
    if unknown:
        raise ValueError(f"unknown counts {unknown}; known: {', '.join(COUNT_NAMES)}")
    candidates, references, counts = list(candidates), list(references), tuple(counts)
    for texts in (candidates, references):
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise TypeError(f"texts must be str, got {texts[bad]!r} at position {bad}")
    starts = range(0, len(candidates), chunk_size)
    cands = [candidates[i:i + chunk_size] for i in starts]
    refs = [references[i:i + chunk_size] for i in starts]
    if workers == 1 or len(cands) <= 1:
        parts = [chunk_counts(c, r, n_min, n_max, dynamic, split_scripts, counts) for c, r in zip(cands, refs)]
    else:
        k = len(cands)
        parts = list(worker_pool(workers).map(chunk_counts, cands, refs, [n_min] * k, [n_max] * k, [dynamic] * k,
                                              [split_scripts] * k, [counts] * k))
    stacked = np.concatenate(parts, axis=1) if parts else np.zeros((len(counts), 0), dtype=np.int64)
    return dict(zip(counts, stacked))


def lexical_metrics(candidates: Sequence[str], references: Sequence[str], *, n_min: int = 3, n_max: int | None = None,
                    dynamic: bool = False, convention: str = "paper", workers: int = 1,
                    chunk_size: int = DEFAULT_CHUNK_SIZE) -> pd.DataFrame:
    """All lexical metrics of Table 16 (plus word counts ``n_cand``, ``n_ref``), one row per pair.

    ``convention`` (:func:`mialab.similarity.metrics.metrics_from_counts`): ``code`` also
    tokenises as the code's evaluation does (whitespace only, no script splitting).
    """
    counts = lexical_counts(candidates, references, n_min=n_min, n_max=n_max, dynamic=dynamic,
                            split_scripts=convention != "code", workers=workers, chunk_size=chunk_size)
    metrics = metrics_from_counts(counts, convention)
    columns = (*LEXICAL_METRICS, "n_cand", "n_ref", "words_cand", "words_ref")
    return pd.DataFrame({name: metrics[name] for name in columns})
