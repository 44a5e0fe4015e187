"""Reconstruction metrics, fast kernel vs the reference specification, rewards, aggregation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from mialab.adra.rewards import contrastive_reward, minmax_membership_weight, sample_distractors
from mialab.n_sampling.evaluation import aggregate_rollouts, evaluation_pair, score_rollouts
from mialab.similarity.kernel import encode_texts, lexical_counts, lexical_metrics
from mialab.similarity.metrics import (CONVENTIONS, COUNT_NAMES, LEXICAL_METRICS, embedding_cosine, metric_counts,
                                      metrics_from_counts)
from mialab.similarity.reference import greedy_scan, lcs_length_dp, reference_counts
from mialab.similarity.released import code_rewards, released_code
from mialab.text.prefix import split_assistant_prefix
from mialab.text.words import tokenize_words, word_tokens
from mialab.training.rewards import REWARD_METRICS, compute_rewards, get_reward, known_rewards, length_penalty

RATIOS = [m for m in LEXICAL_METRICS if m != "lcs_length"]


def one(candidate: str, reference: str, **kw) -> dict[str, float]:
    """All lexical metrics of one pair, through the fast kernel."""
    return lexical_metrics([candidate], [reference], **kw).iloc[0].to_dict()


# --- tokenisation -------------------------------------------------------------------------------

def test_word_tokens_lowercase_strip_edge_punctuation_drop_empty():
    assert word_tokens("Hello, World!  e.g. 3.14 ... (x) don't;") == ["hello", "world", "e.g", "3.14", "(x)", "don't"]
    assert word_tokens("") == [] and word_tokens(" ?! .. ") == []


def test_word_tokens_split_scripts_without_spaces_into_characters():
    assert word_tokens("hello世界。 これは") == ["hello", "世", "界", "。", "こ", "れ", "は"]
    assert word_tokens("안녕 abc,한") == ["안", "녕", "abc", "한"]
    assert word_tokens("สวัสดี") == list("สวัสดี")


def test_word_tokens_split_the_released_codes_scripts_tibetan_included():
    # The code's reward tokeniser splits Tibetan, Mongolian, Javanese and halfwidth U+FF65 into characters;
    # its evaluation tokeniser (split_scripts=False) only splits on whitespace.
    assert word_tokens("བོད་ཡིག ok") == ["བ", "ོ", "ད", "་", "ཡ", "ི", "ག", "ok"]
    assert word_tokens("ᠮᠣᠩ ꦗꦮ ･") == ["ᠮ", "ᠣ", "ᠩ", "ꦗ", "ꦮ", "･"]
    assert word_tokens("\U0002a6e0x") == ["\U0002a6e0x"]  # a gap of the code's CJK list stays one word
    assert word_tokens("བོད་ཡིག 世界。", split_scripts=False) == ["བོད་ཡིག", "世界。"]


def test_tokenize_words_counts_tokens_per_word():
    tokens, counts = tokenize_words(["Hello,", "...", "世界。", "x"])
    assert tokens == ["hello", "世", "界", "。", "x"]
    assert counts.tolist() == [1, 0, 3, 1]


@pytest.mark.parametrize("split", [True, False])
def test_kernel_byte_tokeniser_equals_word_tokens(split):
    """The kernel's byte-level tokeniser gives word_tokens' tokens (same ids for same tokens) and str.split's word
    counts, on random texts over every whitespace character, the edge punctuation, case oddities, NUL, a lone
    surrogate and characters at the bounds of the scripts without spaces."""
    rng = np.random.default_rng(5)
    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace()]
    alphabet = spaces + list(".,;:!?") + [
        "a", "B", "É", "İ", "Σ", "ß", "\0", "’", "世", "བ", "ོ", "་", "ᠮ", "ꦗ", "･", "\uff64", "\u0dff", "\u0e00",
        "\ud7ff", "안", "\U00020000", "\U0002a6df", "\U0002a6e0", "\U0003134f", "\U00031350", "\ud800", "x", "3", "(",
        "\x7f", "\x80"]
    for _ in range(200):
        texts = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 30)))) for _ in range(int(rng.integers(1, 8)))]
        ids, per_text, n_words, vocab = encode_texts(texts, split)
        tokens = [word_tokens(t, split) for t in texts]
        assert per_text.tolist() == [len(t) for t in tokens] and n_words.tolist() == [len(t.split()) for t in texts]
        seen: dict[str, int] = {}
        for token, i in zip([x for t in tokens for x in t], ids.tolist()):
            assert seen.setdefault(token, i) == i
        assert len(set(seen.values())) == len(seen) == vocab



def test_vocabulary_numbers_tokens_by_their_bytes_in_order_of_appearance():
    """Equal ids iff equal tokens, dense and in order of first appearance, for tokens that differ only in one byte
    at every position up to 40 bytes (their 8-byte words and lengths collide in every other way), thousands of them."""
    rng = np.random.default_rng(3)
    tokens = []
    for length in range(1, 41):
        base = "".join(rng.choice(list("ab"), size=length))
        tokens += [base] + [base[:i] + ("b" if base[i] == "a" else "a") + base[i + 1:] for i in range(length)]
    tokens += ["".join(rng.choice(list("ab"), size=int(rng.integers(1, 24)))) for _ in range(6000)]
    text = " ".join(rng.permutation(tokens + tokens))
    ids, per_text, _, vocab = encode_texts([text], False)
    order: dict[str, int] = {}
    expected = [order.setdefault(t, len(order)) for t in text.split()]
    assert ids.tolist() == expected and vocab == len(order) and per_text.tolist() == [len(expected)]

def test_metric_counts_are_all_that_metrics_from_counts_reads():
    full = lexical_counts(["a b c d e", "x"], ["a b c x e", "y z"])
    for convention in CONVENTIONS:
        for name in LEXICAL_METRICS:
            part = metrics_from_counts({k: full[k] for k in metric_counts([name], convention)}, convention, [name])
            np.testing.assert_array_equal(part[name], metrics_from_counts(full, convention)[name])
    assert set(REWARD_METRICS) <= set(known_rewards())


# --- hand-worked metric values ------------------------------------------------------------------

def test_identical_texts_score_one():
    m = one("The cat sat on the mat.", "the cat sat on the mat")
    assert all(m[k] == 1.0 for k in RATIOS)
    assert m["lcs_length"] == 6


def test_disjoint_texts_score_zero():
    m = one("alpha beta gamma delta", "one two three four five")
    assert all(m[k] == 0.0 for k in LEXICAL_METRICS)


def test_hand_worked_example():
    # T(c)={the,cat,sat,on,mat}, T(r)={the,cat,lay,on,mat}: 4 common, union 6; LCS = the cat on the mat = 5;
    # n in [3, 5]: 4 + 3 + 2 = 9 distinct n-grams each, only "on the mat" is common.
    m = one("the cat sat on the mat", "the cat lay on the mat")
    assert m["jaccard"] == pytest.approx(4 / 6)
    assert m["token_overlap_ref"] == pytest.approx(4 / 5) and m["token_overlap_cand"] == pytest.approx(4 / 5)
    assert m["lcs_length"] == 5
    assert m["lcs_ratio_ref"] == pytest.approx(5 / 6) and m["lcs_ratio_cand"] == pytest.approx(5 / 6)
    assert m["ngram_coverage_ref"] == pytest.approx(1 / 9) and m["ngram_coverage_cand"] == pytest.approx(1 / 9)


def test_cjk_metrics():
    # c = 7 characters, r = its first 4; n in [3, 4]: r has 2 + 1 n-grams, c has 5 + 4, all of r's are common.
    m = one("我爱北京天安门", "我爱北京")
    assert m["jaccard"] == pytest.approx(4 / 7) and m["token_overlap_ref"] == 1.0
    assert m["lcs_length"] == 4 and m["lcs_ratio_ref"] == 1.0 and m["lcs_ratio_cand"] == pytest.approx(4 / 7)
    assert m["ngram_coverage_ref"] == 1.0 and m["ngram_coverage_cand"] == pytest.approx(3 / 9)


def test_repetition_attack_does_not_raise_ngram_coverage():
    reference = "a b c d e f"
    base = one("a b c", reference)["ngram_coverage_ref"]
    assert base == pytest.approx(1 / 4)  # LCS 3: only 3-grams count, "a b c" is 1 of r's 4
    for k in range(2, 6):
        repeated = one(" ".join(["a b c"] * k), reference)
        assert repeated["ngram_coverage_ref"] == base
        assert repeated["token_overlap_ref"] == one("a b c", reference)["token_overlap_ref"]


@pytest.mark.parametrize("cand,ref", [("", "a b c d"), ("a b c d", ""), ("", ""), ("...", "a b c")])
def test_empty_texts_score_zero_never_nan(cand, ref):
    m = one(cand, ref)
    assert all(m[k] == 0.0 for k in LEXICAL_METRICS)
    assert all(math.isfinite(v) for v in m.values())


def test_short_identical_texts_have_no_ngrams_in_range():
    m = one("a b", "a b")
    assert m["ngram_coverage_ref"] == 0.0 and m["lcs_ratio_ref"] == 1.0
    assert one("a b", "a b", n_min=2)["ngram_coverage_ref"] == 1.0


def test_ngram_range_is_configurable():
    # n in [1, 1] is the unique-token overlap; a fixed n_max caps the range below the LCS.
    c, r = "x a b c d y", "a b c d z"
    assert one(c, r, n_min=1, n_max=1)["ngram_coverage_ref"] == one(c, r)["token_overlap_ref"]
    assert one(c, r, n_min=3, n_max=3)["ngram_coverage_ref"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        lexical_counts([c], [r], n_min=3, n_max=2)


def test_greedy_scan_is_the_codes_left_to_right_match_scan():
    # At 0 "a b c" matches (3), then "d e f g" (4): the scan never sees the longer "b c d e f g".
    assert greedy_scan("a b c d e f g".split(), "b c d e f g x a b c".split(), 3, 30) == (4, 7)
    assert greedy_scan("a b c d e f g".split(), "b c d e f g x a b c".split(), 3, 2 + 1) == (3, 6)
    assert greedy_scan("x y".split(), "x y".split(), 3, 30) == (0, 0)


def test_code_convention_metrics_positional_coverage_and_token_count_overlap():
    # The code's evaluation: token overlap / token count, n-gram coverage = greedily covered positions.
    c, r = "the cat sat on the mat", "the cat lay on the mat the end"
    code, paper = one(c, r, n_max=30, convention="code"), one(c, r, n_max=30)
    assert code["token_overlap_ref"] == pytest.approx(4 / 8) and paper["token_overlap_ref"] == pytest.approx(4 / 6)
    assert code["ngram_coverage_ref"] == pytest.approx(3 / 8)  # "on the mat" covers 3 of r's 8 positions
    assert code["ngram_coverage_cand"] == pytest.approx(3 / 6)
    assert one("世界你好", "世界你好", convention="code")["jaccard"] == 1.0  # one whitespace word each
    assert one("世界你好", "世界你", convention="code")["jaccard"] == 0.0
    with pytest.raises(ValueError, match="convention"):
        one(c, r, convention="other")


def test_kernel_rejects_non_text():
    with pytest.raises(TypeError, match="position 1"):
        lexical_counts(["a b", None], ["a b", "c d"])
    with pytest.raises(ValueError):
        lexical_counts(["a"], ["a", "b"])


def test_lcs_dp_reference():
    assert lcs_length_dp(list("abcbdab"), list("bdcaba")) == 4
    assert lcs_length_dp([], list("abc")) == 0


# --- kernel == reference --------------------------------------------------------------------------

def random_pairs(rng: np.random.Generator, n: int, max_len: int) -> tuple[list[str], list[str]]:
    """Random pairs over small and large vocabularies, with copies, substitutions and repetitions."""
    extra = ["世", "界", "Word,", "word", "e.g.", "!", "A.", "a"]
    cands, refs = [], []
    for _ in range(n):
        vocab = [f"w{i}" for i in range(int(rng.choice([1, 2, 3, 5, 20, 300])))] + extra
        ref = list(rng.choice(vocab, size=int(rng.integers(0, max_len + 1))))
        mode = rng.integers(0, 5)
        if mode == 0:
            cand = list(rng.choice(vocab, size=int(rng.integers(0, max_len + 1))))
        elif mode == 1:  # substitutions
            cand = [str(rng.choice(vocab)) if rng.random() < 0.3 else w for w in ref]
        elif mode == 2:  # exact copy
            cand = list(ref)
        elif mode == 3:  # repetition attack
            cand = ref[: max(1, len(ref) // 3)] * int(rng.integers(1, 5))
        else:  # shuffled chunks
            chunks = [ref[i:i + 4] for i in range(0, len(ref), 4)]
            rng.shuffle(chunks)
            cand = [w for c in chunks for w in c]
        cands.append(" ".join(cand))
        refs.append(" ".join(ref))
    return cands, refs


@pytest.mark.parametrize("n_min,n_max,dynamic,split", [(3, None, False, True), (1, None, False, True),
                                                      (2, 5, False, True), (3, 30, True, True), (3, 4, True, False)])
def test_kernel_equals_reference_on_random_pairs(n_min, n_max, dynamic, split):
    rng = np.random.default_rng(n_min * 10 + (n_max or 0))
    cands, refs = random_pairs(rng, 900, 40)
    more_c, more_r = random_pairs(rng, 40, 200)
    cands, refs = cands + more_c, refs + more_r
    fast = lexical_counts(cands, refs, n_min=n_min, n_max=n_max, dynamic=dynamic, split_scripts=split, chunk_size=97)
    slow = [reference_counts(c, r, n_min=n_min, n_max=n_max, dynamic=dynamic, split_scripts=split)
            for c, r in zip(cands, refs)]
    for name in COUNT_NAMES:
        np.testing.assert_array_equal(fast[name], [s[name] for s in slow], err_msg=name)
    for convention in CONVENTIONS:
        fast_m = metrics_from_counts(fast, convention)
        slow_m = metrics_from_counts({k: np.array([s[k] for s in slow]) for k in COUNT_NAMES}, convention)
        for name in LEXICAL_METRICS:
            np.testing.assert_allclose(fast_m[name], slow_m[name], rtol=0, atol=1e-12, err_msg=name)
    for reward in known_rewards():
        np.testing.assert_allclose(get_reward(reward)(fast_m), get_reward(reward)(slow_m), rtol=0, atol=1e-12)


ADVERSARIAL_PAIRS = [
    ("", ""), ("", "a b c d"), ("a b c d", ""), ("the the the the the", "the the the"),
    ("zz a b c d e yy", "a b c d e"), ("qq rr a b c a b c ss tt", "a b c a b c a b c"),
    ("Ωmega ΟΔΟΣ ΟΔΟΣ İstanbul seven77 eight888 ninenine9", "ωmega οδος οδος i̇stanbul seven77 eight888 ninenine9"),
    ("世界你好世界 x y z", "你好世界你好 x y z"), ("ABCDEFG abcdefgh ABCDEFGH abcdefg", "abcdefg abcdefgh"),
    (" ".join(["w"] * 40 + ["v"] * 3), " ".join(["w"] * 35)), ("a, b. c! a b c", "(a b c) a; b c"),
]


@pytest.mark.parametrize("dynamic", [True, False])
def test_kernel_counts_of_the_rewards_equal_reference_on_adversarial_pairs(dynamic):
    """Only the counts a reward asks for (no LCS, no greedy sums), on repeated words, candidate tokens absent
    from the reference at the edges, empty texts, CJK, non-ASCII case rules and tokens around 7-8 bytes."""
    cands, refs = map(list, zip(*ADVERSARIAL_PAIRS))
    for reward in ("ngram", "trio"):
        needed = set(metric_counts(REWARD_METRICS[reward])) | {"words_cand", "words_ref"}
        names = [k for k in COUNT_NAMES if k in needed]
        fast = lexical_counts(cands, refs, n_max=30 if dynamic else 5, dynamic=dynamic, counts=names)
        slow = [reference_counts(c, r, n_max=30 if dynamic else 5, dynamic=dynamic) for c, r in zip(cands, refs)]
        for name in names:
            np.testing.assert_array_equal(fast[name], [x[name] for x in slow], err_msg=f"{reward} {name}")


def test_kernel_worker_processes_and_chunking_agree():
    cands, refs = random_pairs(np.random.default_rng(7), 300, 60)
    base = lexical_counts(cands, refs, workers=1, chunk_size=1000)
    for workers, chunk in [(1, 1), (1, 17), (2, 29)]:
        other = lexical_counts(cands, refs, workers=workers, chunk_size=chunk)
        for name in COUNT_NAMES:
            np.testing.assert_array_equal(other[name], base[name], err_msg=f"{name} workers={workers}")


# --- rewards --------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_cand,n_ref,expected", [
    (7, 10, 1.0), (6, 10, 0.6), (15, 10, 1.0), (16, 10, 10 / 16),  # 10 / 1.5 = 6.67 <= 7; 15 = 10 * 1.5
    (2, 3, 1.0), (6, 4, 1.0), (7, 4, 4 / 7),  # boundaries hit exactly: 3 / 1.5 = 2, 4 * 1.5 = 6
    (0, 0, 1.0), (0, 5, 0.0), (5, 0, 0.0),
])
def test_length_penalty_boundaries(n_cand, n_ref, expected):
    assert length_penalty(np.array(n_cand), np.array(n_ref), 1.5) == pytest.approx(expected)


def test_length_penalty_threshold_is_configurable():
    assert length_penalty(np.array(12), np.array(10), 1.25) == 1.0
    assert length_penalty(np.array(13), np.array(10), 1.25) == pytest.approx(10 / 13)
    with pytest.raises(ValueError):
        length_penalty(np.array(1), np.array(1), 0.5)


def test_trio_and_ngram_rewards_hand_values():
    trio, ngram = compute_rewards("trio", ["the cat sat on the mat"], ["the cat lay on the mat"]), \
        compute_rewards("ngram", ["the cat sat on the mat"], ["the cat lay on the mat"])
    assert trio[0] == pytest.approx((4 / 5 + 5 / 6 + 1 / 9) / 3)
    assert ngram[0] == pytest.approx(1 / 9)
    long = " ".join(["the cat lay on the mat"] * 2)  # 12 words vs 6 > 1.5x: penalty 6/12
    assert compute_rewards("trio", [long], ["the cat lay on the mat"])[0] == pytest.approx((1 + 1 + 1) / 3 * 0.5)


def test_reward_ngram_range_code_dynamic_fixed_and_paper_lcs():
    # c and r share "on the mat" only; r has 4 3-grams, 10 n-grams with n in [3, 6], 9 with n in [3, LCS = 5].
    c, r = ["the cat sat on the mat"], ["the cat lay on the mat"]
    dynamic = compute_rewards("ngram", c, r, n_max=30, ngram_range="dynamic", length_words="whitespace")[0]
    fixed30 = compute_rewards("ngram", c, r, n_max=30, ngram_range="fixed", length_words="whitespace")[0]
    assert (dynamic, fixed30, compute_rewards("ngram", c, r)[0]) == pytest.approx((1 / 4, 1 / 10, 1 / 9))
    trio = compute_rewards("trio", c, r, n_max=30, ngram_range="dynamic")[0]
    assert trio == pytest.approx((4 / 5 + 5 / 6 + 1 / 4) / 3)
    with pytest.raises(ValueError, match="n_max"):
        compute_rewards("ngram", c, r, n_max=None, ngram_range="dynamic")
    with pytest.raises(ValueError, match="ngram_range"):
        compute_rewards("ngram", c, r, ngram_range="other")


def test_length_penalty_counts_whitespace_words_as_the_code_or_tokens_as_the_paper():
    # 1 whitespace word vs 3, but 6 CJK tokens each: the code penalises by 1/3, the token count does not.
    c, r = ["今天天气很好"], ["今天 天气 很好"]
    assert compute_rewards("trio", c, r, length_words="whitespace")[0] == pytest.approx(1 / 3)
    assert compute_rewards("trio", c, r, length_words="tokens")[0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="length_words"):
        compute_rewards("trio", c, r, length_words="bytes")


def test_rewards_equal_the_released_codes_on_fixed_pairs():
    """Every ADRA reward (trio / ngram, tau 1.25 / 1.5 / 2.0, dynamic and fixed [3, 30]) against the
    released code's own functions (MIA_RL_CODE names a local copy; skipped without one)."""
    code = released_code()
    if code is None:
        pytest.skip("MIA_RL_CODE does not name a copy of the released ADRA code")
    cands, refs = random_pairs(np.random.default_rng(11), 120, 60)
    cands += ["今天天气很好 བོད་ཡིག hello", "བོད་ཡིག་ནི་ཧ་ཅང་ legal", "ᠮᠣᠩᠭᠣᠯ ꦗꦮ 𪜀𪜁 𫝀", "안녕하세요 สวัสดี"]
    refs += ["今天 天气 很好 བོད་ཡིག", "བོད་ཡིག་ནི་ཧ་ཅང་ legal ok", "ᠮᠣᠩᠭᠣᠯ ꦗꦮ 𪜀𪜁𪜂 𫝀 ･", "안녕 하세요 สวัสดี ครับ"]
    for metric, tau in [("trio", 1.25), ("trio", 1.5), ("trio", 2.0), ("ngram", 1.5)]:
        for dynamic in (True, False):
            ours = compute_rewards(metric, cands, refs, tau=tau, n_max=30, length_words="whitespace",
                                   ngram_range="dynamic" if dynamic else "fixed")
            theirs = code_rewards(code, metric, cands, refs, tau=tau, dynamic=dynamic)
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9, err_msg=f"{metric} {tau} {dynamic}")


def test_reward_registry_unknown_name_lists_known():
    assert {"trio", "ngram"} <= set(known_rewards())
    with pytest.raises(KeyError, match="known rewards: ngram, trio"):
        get_reward("bleu")


def test_contrastive_reward_hand_numbers():
    assert contrastive_reward([0.8, 0.5, 0.3], 0.9) == pytest.approx(0.1 * 0.8 + 0.9 * 0.5)  # 0.53
    assert contrastive_reward([0.8, 0.5, 0.3], 0.0) == pytest.approx(0.8)  # member-like: best of all
    assert contrastive_reward([0.8, 0.5, 0.3], 1.0) == pytest.approx(0.5)  # non-member-like: best distractor
    batch = contrastive_reward(np.array([[0.8, 0.5, 0.3], [0.1, 0.2, 0.4]]), np.array([0.9, 0.5]))
    np.testing.assert_allclose(batch, [0.53, 0.4])


@pytest.mark.parametrize("scores,w", [([0.8], 0.5), ([0.8, 0.5], 1.2), ([0.8, float("nan")], 0.5)])
def test_contrastive_reward_rejects_bad_input(scores, w):
    with pytest.raises(ValueError):
        contrastive_reward(scores, w)


def test_minmax_membership_weight_orientation():
    np.testing.assert_allclose(minmax_membership_weight([1.0, 3.0, 2.0], higher_is_member=True), [1.0, 0.0, 0.5])
    np.testing.assert_allclose(minmax_membership_weight([1.0, 3.0, 2.0], higher_is_member=False), [0.0, 1.0, 0.5])
    np.testing.assert_allclose(minmax_membership_weight([2.0, 2.0]), [0.5, 0.5])
    with pytest.raises(ValueError):
        minmax_membership_weight([1.0, float("inf")])


def test_sample_distractors_never_self_seeded_and_forced():
    ids = [f"c{i}" for i in range(10)]
    picks = sample_distractors(ids, 7, seed=3)
    assert picks == sample_distractors(ids, 7, seed=3)
    assert picks != sample_distractors(ids, 7, seed=4)
    assert all(len(p) == 7 and c not in p for c, p in zip(ids, picks))
    forced = sample_distractors(ids, 3, seed=3, forced={"c0": "c5"})
    assert forced[0][0] == "c5" and len(forced[0]) == 3 and "c0" not in forced[0]
    with pytest.raises(ValueError):
        sample_distractors(ids, 3, seed=0, forced={"c1": "c1"})


def test_sample_distractors_without_replacement_as_the_code_or_iid():
    # The code draws K distinct others (rng.sample), capped at the other candidates; the option draws i.i.d.
    ids = [f"c{i}" for i in range(6)]
    distinct = sample_distractors(ids, 7, seed=0, forced={"c0": "c5"})
    assert all(sorted(p) == sorted(set(ids) - {c}) for c, p in zip(ids, distinct)) and distinct[0][0] == "c5"
    iid = sample_distractors(ids, 400, seed=0, replace=True)
    assert all(len(p) == 400 and set(p) == set(ids) - {c} for c, p in zip(ids, iid))


# --- evaluation protocols and aggregation ----------------------------------------------------------

def test_suffix_only_and_full_protocols():
    truth = "a b c d e f g h"
    assert split_assistant_prefix(truth, 0.25) == ("a b", "c d e f g h")
    assert evaluation_pair("c d x", truth, 0.25, "suffix") == ("c d x", "c d e f g h")
    assert evaluation_pair("c d x", truth, 0.25, "full") == ("a b c d x", truth)
    assert evaluation_pair("x", truth, 0.0, "suffix") == evaluation_pair("x", truth, 0.0, "full")
    with pytest.raises(ValueError, match="known: suffix, full"):
        evaluation_pair("x", truth, 0.0, "prefix")


def test_score_rollouts_and_aggregate():
    split = pd.DataFrame({"id": ["m", "n"], "suffix": ["a b c d e f g h", "p q r s t u v w"]})
    rollouts = pd.DataFrame({"id": ["m", "m", "n"], "sample": [0, 1, 0],
                             "text": ["c d e f g h", "x y z", "r s t u"]})
    scores = score_rollouts(rollouts, split, ratio=0.25, protocol="suffix")
    assert list(scores["lcs_ratio_ref"]) == pytest.approx([1.0, 0.0, 4 / 6])
    aon, bon = aggregate_rollouts(scores, "aon"), aggregate_rollouts(scores, "bon")
    assert list(aon["id"]) == ["m", "n"]
    assert aon["lcs_ratio_ref"].tolist() == pytest.approx([0.5, 4 / 6])
    assert bon["lcs_ratio_ref"].tolist() == pytest.approx([1.0, 4 / 6])
    with pytest.raises(ValueError, match="known: aon, bon"):
        aggregate_rollouts(scores, "median")
    bad = scores.assign(jaccard=np.nan)
    with pytest.raises(ValueError, match="NaN"):
        aggregate_rollouts(bad, "aon")


def test_score_rollouts_code_convention_reports_embedding_as_one_plus_cos_over_two():
    split = pd.DataFrame({"id": ["m"], "suffix": ["the cat sat on the mat today"]})
    rollouts = pd.DataFrame({"id": ["m", "m"], "sample": [0, 1], "text": ["a dog ran", "the cat sat on the mat"]})
    kw = dict(embedding_model="all-MiniLM-L6-v2", n_max=30)
    code, paper = score_rollouts(rollouts, split, convention="code", **kw), score_rollouts(rollouts, split, **kw)
    np.testing.assert_allclose(code["embedding_cosine"], (1 + paper["embedding_cosine"]) / 2, atol=1e-12)
    assert code["token_overlap_ref"].iloc[1] == pytest.approx(5 / 7)  # 5 common of 7 tokens (6 unique)
    assert paper["token_overlap_ref"].iloc[1] == pytest.approx(5 / 6)


def test_embedding_cosine():
    cos = embedding_cosine(["the cat sat on the mat", "", "stock markets fell sharply"],
                           ["the cat sat on the mat", "anything", "a kitten sleeps on a rug"])
    assert cos[0] == pytest.approx(1.0, abs=1e-5)
    assert cos[1] == 0.0
    assert -1.0 <= cos[2] < 0.5


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_texts_embedding_does_not_depend_on_the_texts_encoded_with_it(dtype):
    """Bit-identical embeddings for a text alone and among longer and shorter texts in any order, in fp32 and
    in bf16 (a padded batch moved them), so a metric does not change with the rollouts a job holds."""
    from mialab.lm.embeddings import encode

    texts = ["the cat sat", "Find the number of positive integers less than 1000 that are divisible by 7. " * 3,
             "a kitten sleeps on a rug while stock markets fell sharply today", "x"]
    alone = np.concatenate([encode([t], dtype=dtype) for t in texts])
    np.testing.assert_array_equal(encode(texts, dtype=dtype), alone)
    np.testing.assert_array_equal(encode(texts[::-1] + texts, dtype=dtype), np.concatenate([alone[::-1], alone]))


def test_embeddings_in_bfloat16_stay_close_to_float32_and_unknown_dtypes_are_rejected():
    from mialab.lm.embeddings import encode

    texts = ["the cat sat on the mat", "a kitten sleeps on a rug", "stock markets fell sharply",
             "Find the number of positive integers less than 1000 that are divisible by 7."]
    full, half = encode(texts), encode(texts, dtype="bfloat16")
    assert half.dtype == np.float32 and half.shape == full.shape
    np.testing.assert_allclose(np.linalg.norm(half, axis=1), 1.0, atol=1e-5)
    assert (np.einsum("ij,ij->i", full, half) > 0.99).all()             # each text keeps its direction
    assert np.abs(full @ full.T - half @ half.T).max() < 0.03             # pairwise cosines barely move
    assert not np.array_equal(full, half)                                 # the dtype was applied
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        encode(texts, dtype="int8")
