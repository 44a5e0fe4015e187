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
