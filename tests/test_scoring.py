"""Passive baselines against direct, hand-written computations."""

import math
import zlib

import numpy as np
import pytest
import torch

from mialab.lm.logprobs import TokenStats, vocabulary_stats
from mialab.scoring.baselines import (
    check_methods,
    lowest_k_mean,
    min_k,
    min_k_plus_plus,
    r_loss,
    score_texts,
    zlib_score,
)


def _direct_stats(logits: np.ndarray, ids: np.ndarray):
    """log p, mu, sigma computed the slow way, one position at a time, in float64."""
    logp, mu, sigma = [], [], []
    for t in range(len(ids) - 1):
        z = logits[t].astype(np.float64)
        lp = z - (np.log(np.sum(np.exp(z - z.max()))) + z.max())
        p = np.exp(lp)
        logp.append(lp[ids[t + 1]])
        m = float(np.sum(p * lp))
        mu.append(m)
        sigma.append(math.sqrt(float(np.sum(p * (lp - m) ** 2))))
    return np.array(logp), np.array(mu), np.array(sigma)


def _stats(logits: np.ndarray, ids: np.ndarray) -> TokenStats:
    """:func:`vocabulary_stats` of one row's logits ``[n, vocab]`` and token ids ``[n]``."""
    return vocabulary_stats(torch.log_softmax(torch.tensor(logits[:-1]).float(), -1), torch.tensor(ids[1:]))


def test_vocabulary_stats_match_direct_computation():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 6, 11)).astype(np.float32)
    ids = rng.integers(0, 11, size=(2, 6))
    stats = [_stats(logits[0], ids[0]), _stats(logits[1, :4], ids[1, :4])]
    for i, n in enumerate([6, 4]):
        lp, mu, sd = _direct_stats(logits[i, :n], ids[i, :n])
        assert len(stats[i].logp) == n - 1
        np.testing.assert_allclose(stats[i].logp, lp, atol=1e-5)
        np.testing.assert_allclose(stats[i].mu, mu, atol=1e-5)
        np.testing.assert_allclose(stats[i].sigma, sd, atol=1e-5)


def test_min_k_plus_plus_from_logits_matches_numpy():
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=3, size=(1, 21, 50)).astype(np.float32)
    ids = rng.integers(0, 50, size=(1, 21))
    st = _stats(logits[0], ids[0])
    lp, mu, sd = _direct_stats(logits[0], ids[0])
    z = np.sort((lp - mu) / sd)
    assert min_k_plus_plus(st, "", k=0.2) == pytest.approx(z[:4].mean(), abs=1e-5)  # floor(0.2*20) = 4 tokens
    assert min_k(st, "", k=0.5) == pytest.approx(np.sort(lp)[:10].mean(), abs=1e-5)


def test_lowest_k_keeps_at_least_one_token_and_guards_sigma_zero():
    st = TokenStats(logp=np.array([-0.5]), mu=np.array([-0.5]), sigma=np.array([0.0]))
    assert lowest_k_mean(np.array([-3.0, -1.0]), 0.2) == -3.0  # floor(0.4) = 0 -> one token
    assert min_k_plus_plus(st, "x", k=0.2) == 0.0  # sigma = 0 -> z = 0, never NaN
    assert math.isfinite(min_k(st, "x", k=0.01))


def test_zlib_and_r_loss_orientation():
    st = TokenStats(logp=np.array([-2.0, -4.0]), mu=np.zeros(2), sigma=np.ones(2))
    text = "abc abc abc"
    assert zlib_score(st, text) == pytest.approx(-3.0 / len(zlib.compress(text.encode())))
    # target more confident than the reference -> positive (member-like) R-Loss
    np.testing.assert_allclose(r_loss(np.array([-1.0]), np.array([-3.0])), [2.0])


def test_score_texts_columns_and_unknown_method():
    st = TokenStats(logp=np.array([-1.0, -2.0, -3.0]), mu=np.full(3, -2.0), sigma=np.ones(3))
    cols = score_texts([st], ["a b"], ["loss", "r_loss", "min_k", "min_k_plus_plus"], [0.2, 0.5])
    assert set(cols) == {"loss", "min_k@0.2", "min_k@0.5", "min_k_plus_plus@0.2", "min_k_plus_plus@0.5"}
    assert cols["loss"][0] == pytest.approx(-2.0)
    with pytest.raises(ValueError, match="known: dc_pdd, gradnorm, loss"):
        check_methods(["los"])


@pytest.fixture(scope="module")
def tiny_lm(make_tiny_model):
    corpus = [f"line {i}: the {w} walks over the hill and sings of {t} today."
              for i, (w, t) in enumerate(zip(["cat", "dog", "king", "queen"] * 25, ["rain", "sun", "war", "love"] * 25))]
    return make_tiny_model(corpus, model_vocab=512)


SPEC = {"methods": ["loss", "r_loss", "zlib", "min_k", "min_k_plus_plus"], "k": [0.2], "max_length": 64, "truncation": "truncate", "truncation_warn": 0.05, "dtype": "float32", "device": "cpu"}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_overlapping_splits_are_scored_once_with_the_same_scores_as_one_by_one(tiny_lm, dtype):
    """Three seeds' splits scored together give each split the scores it gets alone, bit for bit, in bf16 too
    (a partial rerun of one seed reproduces the stored numbers)."""
    import pandas as pd

    from mialab.scoring.run import score_split, score_splits

    texts = {i: f"line {i}: the {'cat dog king'.split()[i % 3]} sings of rain" + " today and again" * (3 * i)
             for i in range(6)}
    split = lambda ids: pd.DataFrame({"id": ids, "text": [texts[i] for i in ids], "label": [i % 2 for i in ids]})
    splits = [split([0, 1, 2, 3]), split([2, 3, 4, 5]), split([5, 0, 3, 1])]
    refs = [s[["id"]].assign(loss=-0.1 * s["id"]) for s in splits]
    spec = {**SPEC, "dtype": dtype}
    together = score_splits(tiny_lm, splits, spec, reference_scores=refs)
    for s, ref, table in zip(splits, refs, together):
        alone = score_split(tiny_lm, s, spec, reference_scores=ref)
        assert list(table["id"]) == list(s["id"]) and list(table["label"]) == list(s["label"])
        pd.testing.assert_frame_equal(table, alone, check_exact=True)
        assert np.isfinite(table.drop(columns=["id", "label"]).to_numpy(float)).all()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_texts_statistics_do_not_depend_on_the_texts_scored_with_it(tiny_lm, dtype):
    """Each text's log p, mu and sigma are bit-identical scored alone, among shorter and longer texts, in
    another order and in sliding windows beside other texts' windows, in fp32 and in bf16 (padded batches
    moved them: the kernels' summation order follows the batch's shapes)."""
    from mialab.lm.loading import load_causal_lm, load_tokenizer
    from mialab.lm.logprobs import token_stats

    model, tok = load_causal_lm(tiny_lm, dtype=dtype, device="cpu"), load_tokenizer(tiny_lm)
    texts = [f"line {i}: the {w} walks over the hill and sings of rain" + " today and again" * (3 * i)
             for i, w in enumerate(["cat", "dog", "king", "queen", "bird", "sea"])]
    for truncation, length in [("truncate", 64), ("sliding_window", 16)]:
        score = lambda ts: token_stats(model, tok, ts, max_length=length, truncation=truncation)
        alone = [score([t])[0] for t in texts]
        for together in (texts, texts[::-1], texts[2:] + texts[:2] * 3):
            for st, t in zip(score(together), together):
                ref = alone[texts.index(t)]
                for field in ("logp", "mu", "sigma"):
                    np.testing.assert_array_equal(getattr(st, field), getattr(ref, field), err_msg=f"{t!r}: {field}")


def test_an_id_with_two_texts_is_an_error(tiny_lm):
    import pandas as pd

    from mialab.scoring.run import score_splits

    a = pd.DataFrame({"id": [0, 1], "text": ["the cat sings", "the dog sings"], "label": [1, 0]})
    b = pd.DataFrame({"id": [1], "text": ["the king sings"], "label": [0]})
    with pytest.raises(ValueError, match="different texts"):
        score_splits(tiny_lm, [a, b], {**SPEC, "methods": ["loss"]})


# -- long texts: truncate / sliding_window / error (scoring.truncation) ------------------------------
LONG = ["the cat walks over the hill and sings of rain today " * 4, "the dog sings", "the king walks over the hill " * 3,
        "line 3: the queen sings of love"]


@pytest.fixture(scope="module")
def lm(tiny_lm):
    from mialab.lm.loading import load_causal_lm, load_tokenizer

    return load_causal_lm(tiny_lm, dtype="float32", device="cpu"), load_tokenizer(tiny_lm)


def _direct_logp(model, ids: list[int], begin: int, end: int) -> np.ndarray:
    """log p(x_t | x_[begin, t)) for t in (begin, end), from one unpadded forward pass of those tokens
    alone (by causality, the prediction of x_t sees exactly x_[begin, t))."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids[begin:end]])).logits[0, :-1].double()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[begin + 1:end])[:, None])[:, 0].numpy()


def test_sliding_windows_predict_every_token_once_with_mimir_contexts():
    from mialab.lm.logprobs import sliding_windows

    for n, length in [(5, 8), (8, 8), (9, 8), (40, 8), (41, 7), (100, 16)]:
        windows = sliding_windows(n, length)
        assert all(e - b <= length for b, e, _ in windows)
        targets = [t for b, e, keep in windows for t in range(e - keep, e)]
        assert targets == list(range(1, n))  # each token after the first, once, in order
        if n > length:  # MIMIR's loop, written out: stride L // 2, window i predicts tokens i .. i+stride-1
            stride = length // 2
            mimir = [(max(i + stride - length, 0), min(i + stride, n)) for i in range(0, n, stride)]
            assert [(b, e) for b, e, _ in windows] == mimir


def test_sliding_window_scores_equal_a_direct_per_token_computation(lm):
    from mialab.lm.logprobs import sliding_windows, token_stats

    model, tok = lm
    length = 12
    stats = token_stats(model, tok, LONG, max_length=length, truncation="sliding_window")
    for text, st in zip(LONG, stats):
        ids = tok(text)["input_ids"]
        assert len(st.logp) == len(ids) - 1 and not st.truncated
        direct = [_direct_logp(model, ids, b, e)[-keep:] for b, e, keep in sliding_windows(len(ids), length)]
        np.testing.assert_allclose(st.logp, np.concatenate(direct), atol=1e-4)
    assert len(tok(LONG[0])["input_ids"]) > 2 * length  # the case that needs several windows


def test_truncate_scores_the_first_tokens_counts_them_and_matches_the_tokenizer_path(lm):
    from mialab.lm.logprobs import token_stats

    model, tok = lm
    length = 12
    stats = token_stats(model, tok, LONG, max_length=length, truncation="truncate")
    full = [len(tok(t)["input_ids"]) for t in LONG]
    assert [st.truncated for st in stats] == [n > length for n in full] == [True, False, True, False]
    for text, st in zip(LONG, stats):
        ids = tok(text)["input_ids"][:length]
        np.testing.assert_allclose(st.logp, _direct_logp(model, ids, 0, len(ids)), atol=1e-4)
    # the same numbers as one padded, tokenizer-truncated batch (what scoring did before the modes)
    enc = tok(LONG, return_tensors="pt", padding=True, truncation=True, max_length=length)
    with torch.inference_mode():
        logits = model(**enc).logits
    old = [_stats(logits[i, :n].numpy(), enc["input_ids"][i, :n].numpy())
           for i, n in enumerate(enc["attention_mask"].sum(1))]
    for a, b in zip(stats, old):
        np.testing.assert_allclose(a.logp, b.logp, atol=1e-5)
        np.testing.assert_allclose(a.mu, b.mu, atol=1e-5)
    short = token_stats(model, tok, LONG[1:2], max_length=length, truncation="sliding_window")[0]
    np.testing.assert_allclose(short.logp, stats[1].logp, atol=1e-5)  # a text within max_length: every mode alike


def test_error_mode_names_the_text_before_the_model_runs(lm):
    from mialab.lm.logprobs import token_stats

    model, tok = lm

    class Untouchable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, **kw):
            raise AssertionError("the model ran")

    with pytest.raises(ValueError, match=r"'c-7' has \d+ tokens, more than scoring.max_length = 12"):
        token_stats(Untouchable(), tok, LONG, max_length=12, truncation="error", names=["c-7", "b", "c", "d"])
    with pytest.raises(ValueError, match="unknown mode 'cut'"):
        token_stats(model, tok, LONG, max_length=12, truncation="cut")


def test_score_table_records_truncation_and_warns_above_the_threshold(tiny_lm, capsys):
    import pandas as pd

    from mialab.scoring.run import score_split

    split = pd.DataFrame({"id": ["a", "b", "c", "d"], "text": LONG, "label": [1, 0, 1, 0]})
    table = score_split(tiny_lm, split, {**SPEC, "max_length": 12, "methods": ["loss"]})
    assert table["truncated"].tolist() == [True, False, True, False]
    assert "2 of 4 texts are longer than scoring.max_length = 12" in capsys.readouterr().err
    score_split(tiny_lm, split, {**SPEC, "max_length": 12, "methods": ["loss"], "truncation_warn": 0.5})
    assert "longer than" not in capsys.readouterr().err  # 50% is not above 50%
    whole = score_split(tiny_lm, split, {**SPEC, "max_length": 12, "methods": ["loss"], "truncation": "sliding_window"})
    assert not whole["truncated"].any() and (whole["n_tokens"] > table["n_tokens"]).tolist() == [True, False, True, False]
