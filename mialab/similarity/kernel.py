"""Fast, exact, batched computation of the lexical reconstruction counts and metrics.

Gives exactly the integers of :func:`mialab.similarity.reference.reference_counts` (tested
on thousands of random pairs) at a fraction of the cost, so that GRPO can score 16,384 rollouts
of 512 words per step on a couple of CPU cores, and computes only the counts asked for (the
``ngram`` reward needs neither the LCS nor the unique-token counts).

How, per chunk of pairs:

- each distinct text of the chunk is tokenised once (the true suffix and the K distractors
  repeat), all of them together on their UTF-8 bytes (:func:`encode_texts`): the rule of
  :mod:`mialab.text.words` as byte masks (whitespace, the characters of scripts without spaces,
  edge punctuation), then one vocabulary for the chunk (a hash table of the tokens' bytes);
- LCS: rapidfuzz's bit-parallel ``LCSseq`` over the id sequences (``process.cpdist``);
- every set count (unique tokens, distinct n-grams, common n-grams, for all ``n`` at once) and the
  released code's greedy matches come from one generalised suffix array of
  ``c_1 #_1 r_1 $_1 c_2 #_2 r_2 $_2 ...`` built by libdivsufsort (``pydivsufsort``) with its LCP
  array (Kasai). Each pair gets its own alphabet and every separator is unique, so no common prefix
  crosses a text or a pair and suffixes of different pairs have LCP 0. In suffix-array order the
  suffixes that start with the same string are contiguous, hence, for one text, a length-``n``
  n-gram is new at the suffix whose LCP with the nearest earlier suffix *of the same text* is
  ``< n``; a candidate n-gram also occurs in the reference iff ``n`` is at most that suffix's
  matching statistic (the longest prefix it shares with any reference suffix = the larger LCP with
  the nearest reference suffix above or below). One pass down and one up the suffix array (running
  minima of the LCP array) give both (:func:`matching_statistics`); back in text order, the number
  of lengths ``n`` in ``[n_min, n_max]`` passing these tests is closed-form per suffix, summed over
  each text (:func:`text_counts`). Unique tokens are the case ``n = 1``. No n-gram is ever
  materialised; the loops are compiled by numba, the rest is numpy or C.

Chunks run in-process (``workers=1``) or on a persistent pool of ``workers`` processes.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numba
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
    """Dense ids of the tokens ``b[first[k]:end[k]]`` (equal ids iff equal bytes, numbered in order of first
    appearance) and their number. ``b`` is padded with at least 8 bytes (:func:`hashed_ids`)."""
    words = np.ndarray(len(b) - 7, dtype="<u8", buffer=b, strides=(1,))  # the 8 bytes from each position
    size = 1 << max(4, (2 * len(first)).bit_length())  # a table at most half full
    ids, vocab_size = hashed_ids(words, first.astype(np.int64, copy=False), end.astype(np.int64, copy=False), size)
    return ids, int(vocab_size)


@numba.njit(cache=True, nogil=True)
def word_mask(left: int) -> np.uint64:
    """The low ``min(left, 8)`` bytes of an 8-byte word: what of it belongs to a token with ``left`` bytes to go."""
    return np.uint64(0xFFFFFFFFFFFFFFFF) if left >= 8 else (np.uint64(1) << np.uint64(8 * left)) - np.uint64(1)


@numba.njit(cache=True, nogil=True)
def hashed_ids(words: np.ndarray, first: np.ndarray, end: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """:func:`token_ids` by one open-addressing hash table of ``size`` slots (a power of two above the number of
    tokens) over the tokens' 8-byte words (``words[i]``: the bytes from position ``i``), each hit confirmed by
    comparing the bytes: exact whatever the hash does."""
    n = len(first)
    slots = np.full(size, -1, dtype=np.int64)  # the first token of each id
    slot_id = np.empty(size, dtype=np.int64)
    ids = np.empty(n, dtype=np.int64)
    vocab = 0
    for k in range(n):
        f, length = first[k], end[k] - first[k]
        h = np.uint64(length) * np.uint64(0x9E3779B97F4A7C15)
        for at in range(0, length, 8):
            h = (h ^ (words[f + at] & word_mask(length - at))) * np.uint64(0xFF51AFD7ED558CCD)
            h ^= h >> np.uint64(29)
        slot = np.int64(h & np.uint64(size - 1))
        while True:
            other = slots[slot]
            if other < 0:
                slots[slot], slot_id[slot] = k, vocab
                ids[k] = vocab
                vocab += 1
                break
            g = first[other]
            if end[other] - g == length:
                same = True
                for at in range(0, length, 8):
                    if (words[f + at] ^ words[g + at]) & word_mask(length - at):
                        same = False
                        break
                if same:
                    ids[k] = slot_id[slot]
                    break
            slot = (slot + 1) & (size - 1)
    return ids, vocab


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


@numba.njit(cache=True, nogil=True)
def pair_symbols(ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, cand: np.ndarray, ref: np.ndarray,
                 V: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The generalised text ``c_1 #_1 r_1 $_1 c_2 #_2 r_2 $_2 ...`` of the pairs ``(cand[p], ref[p])`` of texts
    ``ids[starts[t]:starts[t] + lengths[t]]``, each pair in its own dense alphabet (numbered in order of first
    appearance, so the symbols stay small) and every separator a symbol of its own; which of its positions hold a
    reference; the start of each of the ``4 P`` segments (and the end)."""
    P = len(cand)
    seg_start = np.empty(4 * P + 1, dtype=np.int64)
    total = 0
    for p in range(P):
        seg_start[4 * p] = total
        seg_start[4 * p + 1] = total + lengths[cand[p]]
        seg_start[4 * p + 2] = seg_start[4 * p + 1] + 1
        seg_start[4 * p + 3] = seg_start[4 * p + 2] + lengths[ref[p]]
        total = seg_start[4 * p + 3] + 1
    seg_start[4 * P] = total
    x = np.empty(total, dtype=np.int64)
    is_ref = np.zeros(total, dtype=np.bool_)
    stamp = np.full(V, -1, dtype=np.int64)  # the pair that last numbered each id, and its number there
    local = np.empty(V, dtype=np.int64)
    symbols = 0
    for p in range(P):
        for side, text in ((0, cand[p]), (2, ref[p])):
            at = seg_start[4 * p + side]
            for k in range(lengths[text]):
                t = ids[starts[text] + k]
                if stamp[t] != p:
                    stamp[t] = p
                    local[t] = symbols
                    symbols += 1
                x[at + k] = local[t]
                is_ref[at + k] = side == 2
            x[seg_start[4 * p + side + 1]] = symbols  # the separator after the text
            symbols += 1
    return x, is_ref, seg_start


@numba.njit(cache=True, nogil=True)
def matching_statistics(sa: np.ndarray, lcp: np.ndarray, is_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ms, prev) of every position, in text order, from the suffix array and its LCP array (Kasai's: ``lcp[k]``
    between ``sa[k]`` and ``sa[k + 1]``): ``ms`` the longest prefix the suffix shares with a suffix of the other text of
    its pair (the larger LCP with the nearest such suffix above or below in suffix-array order), ``prev`` its LCP
    with the nearest suffix of its own text above (0 when none). ``is_ref`` marks the positions of references;
    separators count as candidates (their suffixes share nothing with any other, so their edges are 0, as are the
    edges between pairs). The LCP with the nearest suffix of a kind above is the running minimum of the edges since
    that suffix, restarted at each suffix of the kind."""
    n = len(sa)
    ms = np.empty(n, dtype=np.int64)
    prev = np.empty(n, dtype=np.int64)
    since = np.zeros(2, dtype=np.int64)  # LCP with the nearest candidate / reference suffix above
    for k in range(n):
        if k:
            edge = lcp[k - 1]
            since[0] = min(since[0], edge)
            since[1] = min(since[1], edge)
        i = sa[k]
        kind = np.int64(is_ref[i])
        ms[i] = since[1 - kind]
        prev[i] = since[kind]
        since[kind] = n  # the suffix itself: no limit yet
    since[0] = since[1] = 0
    for k in range(n - 1, -1, -1):
        i = sa[k]
        kind = np.int64(is_ref[i])
        ms[i] = max(ms[i], since[1 - kind])
        since[kind] = n
        edge = lcp[k - 1] if k else 0
        since[0] = min(since[0], edge)
        since[1] = min(since[1], edge)
    return ms, prev


@numba.njit(cache=True, nogil=True)
def greedy_scan(ms: np.ndarray, start: int, end: int, n_min: int, cap: int) -> tuple[int, int]:
    """(longest match, covered positions) of the released code's greedy left-to-right scan of one text
    ``[start, end)``: standing at position ``i``, it takes the longest n-gram ``[i, i + L)`` with
    ``n_min <= L <= cap`` found in the other text (``L = min(ms[i], cap)``) and jumps to ``i + L`` if there is one,
    else to ``i + 1`` (``ngram_coverage._find_ngram_matches_optimized``)."""
    longest = covered = 0
    i = start
    while i < end:
        step = min(ms[i], cap)
        if step >= n_min:
            longest = max(longest, step)
            covered += step
            i += step
        else:
            i += 1
    return longest, covered


@numba.njit(cache=True, nogil=True)
def text_counts(ms: np.ndarray, prev: np.ndarray, start: int, end: int, n_min: int, hi: int,
                common: bool) -> tuple[int, int, int, int]:
    """(unique tokens, unique tokens also in the other text, distinct n-grams with ``n`` in ``[n_min, hi]``, those
    also in the other text) of one text ``[start, end)``. An n-gram is new at the position whose LCP with the
    nearest earlier suffix of its text in suffix-array order is below ``n`` (``prev``), and occurs in the other
    text iff ``n <= ms``; so each position adds the lengths in ``[max(prev + 1, n_min), min(hi, suffix length)]``
    (and up to ``min(hi, ms)``). Unique tokens are the case ``n = 1``."""
    uniq = uniq_common = ngrams = ngrams_common = 0
    for i in range(start, end):
        if prev[i] == 0:
            uniq += 1
            if ms[i] >= 1:
                uniq_common += 1
        lo = max(prev[i] + 1, n_min)
        ngrams += max(min(hi, end - i) - lo + 1, 0)
        if common:
            ngrams_common += max(min(hi, ms[i]) - lo + 1, 0)
    return uniq, uniq_common, ngrams, ngrams_common


@numba.njit(cache=True, nogil=True)
def pair_counts(ms: np.ndarray, prev: np.ndarray, seg_start: np.ndarray, n_min: int, n_max: int, dynamic: bool,
                lcs: np.ndarray) -> np.ndarray:
    """Per pair (rows, in ``SET_COUNT_ORDER``): the unique-token, n-gram and greedy counts of candidate and
    reference. N-gram range ``[n_min, hi]``: ``hi = n_max``; ``n_max < 0``: the pair's LCS; ``dynamic``: the longest
    greedy match of either text in the other (at most ``n_max``; ``n_min`` when none)."""
    P = (len(seg_start) - 1) // 4
    out = np.zeros((8, P), dtype=np.int64)
    cap = n_max if n_max >= 0 else len(ms)
    for p in range(P):
        c0, c1, r0, r1 = seg_start[4 * p], seg_start[4 * p + 1], seg_start[4 * p + 2], seg_start[4 * p + 3]
        long_c, out[6, p] = greedy_scan(ms, c0, c1, n_min, cap)
        long_r, out[7, p] = greedy_scan(ms, r0, r1, n_min, cap)
        if dynamic:
            hi = max(long_c, long_r, n_min)
        elif n_max < 0:
            hi = lcs[p]
        else:
            hi = n_max
        out[0, p], out[2, p], out[3, p], out[5, p] = text_counts(ms, prev, c0, c1, n_min, hi, True)
        out[1, p], _, out[4, p], _ = text_counts(ms, prev, r0, r1, n_min, hi, False)
    return out


SET_COUNT_ORDER = ("uniq_cand", "uniq_ref", "uniq_common", "ngram_cand", "ngram_ref", "ngram_common",
                   "greedy_cand", "greedy_ref")
SET_COUNTS = frozenset(SET_COUNT_ORDER)


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
        out.update(set_counts(ids, starts, lengths, cand, ref, V, n_min, n_max, dynamic, out.get("lcs")))
    return np.stack([out[name] for name in names]).astype(np.int64, copy=False)


def set_counts(ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, cand: np.ndarray, ref: np.ndarray, V: int,
               n_min: int, n_max: int | None, dynamic: bool, lcs: np.ndarray | None) -> dict[str, np.ndarray]:
    """The unique-token, n-gram and greedy counts (``SET_COUNT_ORDER``) of pairs ``(cand[p], ref[p])`` of texts
    ``ids[starts[t]:starts[t] + lengths[t]]``, from one generalised suffix array (module doc)."""
    x, is_ref, seg_start = pair_symbols(ids, starts, lengths, cand, ref, max(V, 1))
    sa = suffix_array(x)
    ms, prev = matching_statistics(sa, kasai(x, sa), is_ref)
    counts = pair_counts(ms, prev, seg_start, n_min, -1 if n_max is None else n_max, dynamic,
                         np.zeros(len(cand), dtype=np.int64) if lcs is None else lcs)
    return dict(zip(SET_COUNT_ORDER, counts))


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
