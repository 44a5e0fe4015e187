"""AUROC / TPR@FPR conventions against sklearn, aggregation, and the NaN rule."""

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from mialab.evaluation.metrics import ScoreError, aggregate_over_seeds, auroc, evaluate_scores, tpr_at_fpr


def test_auroc_matches_sklearn_and_hand_value():
    y = np.array([1, 1, 0, 0])
    s = np.array([0.9, 0.4, 0.5, 0.1])
    assert auroc(y, s) == pytest.approx(0.75)  # 3 of 4 member/non-member pairs ordered correctly
    rng = np.random.default_rng(0)
    y, s = rng.integers(0, 2, 200), rng.normal(size=200)
    assert auroc(y, s) == pytest.approx(roc_auc_score(y, s))


def test_tpr_at_fpr_is_largest_tpr_within_target():
    y = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
    s = np.array([10, 9, 3, 2, 8, 1, 0.5, 0.4, 0.3, 0.2])
    assert tpr_at_fpr(y, s, 0.0) == pytest.approx(0.5)  # two members above every non-member
    assert tpr_at_fpr(y, s, 0.17) == pytest.approx(1.0)  # one false positive (1/6) allowed
    rng = np.random.default_rng(3)
    y, s = rng.integers(0, 2, 500), rng.normal(size=500)
    fpr, tpr, _ = roc_curve(y, s)
    assert tpr_at_fpr(y, s, 0.05) == pytest.approx(tpr[fpr <= 0.05].max())


def test_non_finite_scores_and_single_class_are_errors():
    with pytest.raises(ScoreError, match="non-finite"):
        auroc([1, 0], [np.nan, 0.0], "model m loss")
    with pytest.raises(ScoreError, match="inf"):
        evaluate_scores(pd.DataFrame({"label": [1, 0], "x": [np.inf, 1.0]}), ["x"], [0.05])
    with pytest.raises(ScoreError, match="both members"):
        auroc([1, 1], [0.1, 0.2])


def test_aggregate_over_seeds_mean_and_sample_std():
    per_seed = pd.DataFrame({"method": ["a", "a", "a", "b"], "seed": [0, 1, 2, 0],
                             "auroc": [0.6, 0.7, 0.8, 0.5]})
    out = aggregate_over_seeds(per_seed, ["method"], ["auroc"]).set_index("method")
    assert out.loc["a", "auroc_mean"] == pytest.approx(0.7)
    assert out.loc["a", "auroc_std"] == pytest.approx(0.1)  # ddof = 1
    assert out.loc["b", "auroc_std"] == 0.0 and out.loc["b", "n_seeds"] == 1


def test_merge_tables_joins_methods_of_one_run_and_rejects_clashes():
    from mialab.evaluation.stage import merge_tables

    a = pd.DataFrame({"id": ["x", "y"], "label": [1, 0], "n_tokens": [3, 4], "loss": [-1.0, -2.0]})
    b = pd.DataFrame({"id": ["y", "x"], "label": [0, 1], "n_sampling/jaccard@bon": [0.1, 0.9]})
    ((model, ds, seed, merged),) = merge_tables([("m", "d", 0, a), ("m", "d", 0, b)])
    assert list(merged.set_index("id").loc[["x", "y"], "n_sampling/jaccard@bon"]) == [0.9, 0.1]
    with pytest.raises(ValueError, match="come from two score tables"):
        merge_tables([("m", "d", 0, a), ("m", "d", 0, a)])
    with pytest.raises(ValueError, match="disagree on labels"):
        merge_tables([("m", "d", 0, a), ("m", "d", 0, b.assign(label=[1, 0]))])
