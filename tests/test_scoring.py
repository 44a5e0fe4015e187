"""Passive baselines against direct, hand-written computations."""

import math
import zlib

import numpy as np
import pytest
import torch

from mialab.scoring.baselines import (check_methods, lowest_k_mean, min_k, min_k_plus_plus, r_loss, score_texts,
                                      zlib_score)
from mialab.scoring.loglik import TokenStats, stats_from_logits


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


def test_stats_from_logits_match_direct_computation_with_padding():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 6, 11)).astype(np.float32)
    ids = rng.integers(0, 11, size=(2, 6))
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    stats = stats_from_logits(torch.tensor(logits), torch.tensor(ids), torch.tensor(mask))
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
    st = stats_from_logits(torch.tensor(logits), torch.tensor(ids), torch.ones(1, 21, dtype=torch.long))[0]
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
    with pytest.raises(ValueError, match="known: loss"):
        check_methods(["los"])


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    from mialab.models.tiny import init_model, llama_config, save_model, train_tokenizer

    corpus = [f"line {i}: the {w} walks over the hill and sings of {t} today."
              for i, (w, t) in enumerate(zip(["cat", "dog", "king", "queen"] * 25, ["rain", "sun", "war", "love"] * 25))]
    tok = train_tokenizer(corpus, vocab_size=512)
    path = tmp_path_factory.mktemp("tiny") / "model"
    save_model(init_model(llama_config(512, hidden_size=64, num_layers=2, num_heads=2, tokenizer=tok), seed=0), tok, path)
    return str(path)


SPEC = {"methods": ["loss", "r_loss", "zlib", "min_k", "min_k_plus_plus"], "k": [0.2], "batch_size": 2,
        "max_length": 64, "dtype": "float32", "device": "cpu"}


def test_overlapping_splits_are_scored_once_with_the_same_scores_as_one_by_one(tiny_lm):
    import pandas as pd

    from mialab.scoring.run import score_split, score_splits

    texts = {i: f"line {i}: the {'cat dog king'.split()[i % 3]} sings of rain" + " today" * i for i in range(6)}
    split = lambda ids: pd.DataFrame({"id": ids, "text": [texts[i] for i in ids], "label": [i % 2 for i in ids]})
    splits = [split([0, 1, 2, 3]), split([2, 3, 4, 5]), split([5, 0, 3, 1])]
    refs = [s[["id"]].assign(loss=-0.1 * s["id"]) for s in splits]
    together = score_splits(tiny_lm, splits, SPEC, reference_scores=refs)
    for s, ref, table in zip(splits, refs, together):
        alone = score_split(tiny_lm, s, SPEC, reference_scores=ref)
        assert list(table["id"]) == list(s["id"]) and list(table["label"]) == list(s["label"])
        pd.testing.assert_frame_equal(table, alone, check_exact=False, rtol=1e-5)
        assert np.isfinite(table.drop(columns=["id", "label"]).to_numpy(float)).all()


def test_an_id_with_two_texts_is_an_error(tiny_lm):
    import pandas as pd

    from mialab.scoring.run import score_splits

    a = pd.DataFrame({"id": [0, 1], "text": ["the cat sings", "the dog sings"], "label": [1, 0]})
    b = pd.DataFrame({"id": [1], "text": ["the king sings"], "label": [0]})
    with pytest.raises(ValueError, match="different texts"):
        score_splits(tiny_lm, [a, b], {**SPEC, "methods": ["loss"]})
