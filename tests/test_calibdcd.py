"""CalibDCD: projection algebra, FPP ranking, views, (r, lambda) selection, label isolation,
end to end on planted shifts, and the detectors' feature extractors on a tiny random Llama."""

from __future__ import annotations

import functools
import inspect
import os

import numpy as np
import pandas as pd
import pytest
from conftest import VERSE, VERSE_MODEL, tiny_mapping
from sklearn.metrics import roc_auc_score

from mialab.calibdcd.calibrate import (
    VARIANTS,
    FitCache,
    calibrate,
    fpr_threshold,
    get_detector,
    get_variant,
    recovery_analysis,
    run_calibdcd,
)
from mialab.calibdcd.classifiers import ProtoNetConfig, PrototypicalClassifier, make_classifier
from mialab.calibdcd.correction import apply_correction, correction_matrix, select_correction
from mialab.calibdcd.features import difference_columns, veilprobe_blocks, veilprobe_vector
from mialab.calibdcd.frames import feature_frame, view_matrices
from mialab.lm.loading import load_pretrained
from mialab.calibdcd.shift import (
    consensus_basis,
    false_positive_pressure,
    random_views,
    score_increase,
    shift_weights,
    top_views,
    view_basis,
)
from mialab.calibdcd.views import FAMILY_VIEWS, ORIGINAL, UNIVERSAL_VIEWS, VIEWS, apply_view, controlled_views, get_view

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHIFT = np.array([0.0, 1.0, 1.0, 0.0, 0.0, 0.0]) / np.sqrt(2)  # planted post-training direction
PAPER = dict(tau=0.95, tolerance=0.005)  # the paper's consensus threshold and selection tolerance (schema defaults)


def planted_world(seed: int, d: int = 6, n_sup: int = 100, n_cal: int = 200, n_eval: int = 1000):
    """Synthetic features with a planted post-training shift along ``SHIFT``.

    Membership signal on axis 0. In the supervised split the shift coordinate spuriously tracks
    membership, so the classifier learns to use it; under the post-trained target every output
    (calibration non-members and the evaluation pool) is pushed along it, which adds
    member-looking noise to non-members. Every controlled view pushes the calibration texts further
    along ``SHIFT`` plus a view-specific random direction.
    """
    rng = np.random.default_rng(seed)
    shift = np.zeros(d)
    shift[: len(SHIFT)] = SHIFT

    def draw(y, shift_mean, label_gain):
        z = rng.normal(size=(len(y), d))
        z[:, 0] += 1.5 * y
        return z + rng.normal(shift_mean + label_gain * y, 1.0)[:, None] * shift

    y_sup = np.repeat([0, 1], n_sup // 2)
    z_sup = draw(y_sup, 0.0, 1.0)
    y_eval = rng.integers(0, 2, n_eval)
    z_eval = draw(y_eval, 1.0, 0.0)
    z0 = draw(np.zeros(n_cal, dtype=int), 1.0, 0.0)
    views = {ORIGINAL: z0}
    for k in range(10):
        other = rng.normal(size=d)
        other /= np.linalg.norm(other)
        push = rng.uniform(0.0, 1.5) * rng.uniform(0.5, 1.5, n_cal)
        views[f"view{k}"] = z0 + push[:, None] * shift + rng.normal(0.0, 0.3, n_cal)[:, None] * other
    return z_sup, y_sup, views, z_eval, y_eval


# --- projection algebra ---------------------------------------------------------------------------

def test_planted_shift_along_one_axis_is_found_and_removed():
    rng = np.random.default_rng(0)
    n, d = 50, 5
    z0 = rng.normal(size=(n, d))
    u = rng.uniform(0.1, 1.0, n)
    bases = []
    for k in range(3):  # three views share axis 2; each adds a small private direction
        dz = np.zeros((n, d))
        dz[:, 2] = rng.uniform(1.0, 2.0, n)
        dz[:, 3 + (k % 2)] = 0.05 * rng.normal(size=n)
        bases.append(view_basis(dz, shift_weights(u), rank=3))
    basis = consensus_basis(bases, tau=0.95)
    assert basis.shape == (d, 1)
    assert abs(basis[2, 0]) == pytest.approx(1.0, abs=1e-3)
    corrected = apply_correction(z0, basis, 1.0)
    np.testing.assert_allclose(corrected[:, 2], 0.0, atol=1e-3)                       # shift axis removed
    np.testing.assert_allclose(np.delete(corrected, 2, axis=1), np.delete(z0, 2, axis=1), atol=1e-3)  # rest kept


def test_lambda_zero_is_identity_and_basis_orthonormal_and_full_correction_is_projector():
    rng = np.random.default_rng(1)
    d = 7
    bases = [np.linalg.qr(np.column_stack([np.eye(d)[:, 0] + 0.01 * rng.normal(size=d),
                                           np.eye(d)[:, 1] + 0.01 * rng.normal(size=d),
                                           rng.normal(size=d)]))[0] for _ in range(3)]
    basis = consensus_basis(bases, tau=0.95)
    assert basis.shape[1] == 2                               # the two shared directions, not the private ones
    np.testing.assert_allclose(basis.T @ basis, np.eye(2), atol=1e-12)
    z = rng.normal(size=(10, d))
    np.testing.assert_array_equal(apply_correction(z, basis, 0.0), z)
    a = correction_matrix(basis, 1.0)
    np.testing.assert_allclose(a @ a, a, atol=1e-12)         # idempotent
    np.testing.assert_allclose(a, a.T, atol=1e-12)           # symmetric: an orthogonal projector
    np.testing.assert_allclose(apply_correction(z, basis, 1.0), z @ a, atol=1e-12)
    a_half = correction_matrix(basis, 0.5)                   # bounded: shrinks the shift part by half
    np.testing.assert_allclose((z @ a_half) @ basis, 0.5 * (z @ basis), atol=1e-12)


def test_no_consensus_gives_empty_basis_and_identity_correction():
    d = 4
    bases = [np.eye(d)[:, [k]] for k in range(3)]          # three views, three different directions
    g_top = consensus_basis(bases, tau=0.95)
    assert g_top.shape == (d, 0)
    z = np.arange(8.0).reshape(2, 4)
    np.testing.assert_array_equal(apply_correction(z, g_top, 1.0), z)
    assert consensus_basis(bases, tau=0.0, max_rank=2).shape == (d, 2)   # the no-consensus ablation


def test_correction_touches_only_its_block():
    z = np.arange(12.0).reshape(2, 6)
    basis = np.array([[1.0], [0.0], [0.0]])
    out = apply_correction(z, basis, 1.0, block=slice(3, 6))
    np.testing.assert_array_equal(out[:, :3], z[:, :3])
    np.testing.assert_array_equal(out[:, 3], [0.0, 0.0])
    np.testing.assert_array_equal(out[:, 4:], z[:, 4:])
    with pytest.raises(ValueError, match="basis has 3 rows"):
        apply_correction(z, basis, 1.0)


# --- FPP ranking and weights ------------------------------------------------------------------------

def test_fpp_on_hand_numbers():
    q0 = np.array([0.20, 0.50, 0.40])
    increases = {
        "a": score_increase(q0, np.array([0.35, 0.80, 0.55])),   # +0.15 +0.30 +0.15 -> FPP 0.20 (paper B.1)
        "b": score_increase(q0, np.array([0.10, 0.60, 0.40])),   # -0.10 +0.10  0    -> 0.10 / 3
        "c": score_increase(q0, np.array([0.50, 0.20, 0.70])),   # +0.30 -0.30 +0.30 -> 0.20
        "d": score_increase(q0, np.array([0.00, 0.00, 0.00])),   # all negative -> 0
    }
    np.testing.assert_allclose(increases["b"], [0.0, 0.1, 0.0], atol=1e-12)
    fpp = false_positive_pressure(increases)
    np.testing.assert_allclose(fpp.to_numpy(), [0.20, 0.1 / 3, 0.20, 0.0], atol=1e-12)
    assert top_views(fpp, 3) == ["a", "c", "b"]              # tie a/c kept in the given order
    assert top_views(fpp, 1) == ["a"]
    assert random_views(list(fpp.index), 3, seed=5) == random_views(list(fpp.index), 3, seed=5)


def test_shift_weights_clip_at_the_95th_percentile_of_positive_increases():
    u = np.array([0.0, 0.04, 0.09, 0.16, 1.0])
    cap = np.percentile([0.04, 0.09, 0.16, 1.0], 95)             # 0.874
    np.testing.assert_allclose(shift_weights(u), np.sqrt([0.0, 0.04, 0.09, 0.16, cap]))
    np.testing.assert_array_equal(shift_weights(u, "binary"), [0, 1, 1, 1, 1])
    np.testing.assert_array_equal(shift_weights(np.zeros(3)), np.zeros(3))
    with pytest.raises(KeyError, match="known"):
        shift_weights(u, "squared")
    with pytest.raises(ValueError, match="non-finite"):
        shift_weights(np.array([0.1, np.nan]))


def test_view_basis_spans_the_weighted_shifts():
    dz = np.array([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 5.0, 0.0]])
    b = view_basis(dz, np.array([1.0, 1.0, 0.0]), rank=3)    # the third row has no score increase
    assert b.shape == (3, 1)                                 # rank capped at the non-zero singular values
    assert abs(b[0, 0]) == pytest.approx(1.0)


# --- views -----------------------------------------------------------------------------------------

TEXT = "The quick brown fox jumps over the lazy dog.\n  Second line: 42 {braces} <tags> ü"


@pytest.mark.parametrize("family", sorted(FAMILY_VIEWS))
def test_views_change_only_prefix_or_boundary(family):
    names = controlled_views(family)
    assert len(names) == 10 and len(set(names)) == 10 and ORIGINAL not in names
    for name in names + [ORIGINAL]:
        view = get_view(name)
        query = view(TEXT)
        assert query.count(TEXT) == 1
        assert query == view.before + TEXT + view.after
        assert query[len(view.before):len(query) - len(view.after)] == TEXT
    assert apply_view(ORIGINAL, [TEXT]) == [TEXT]
    assert len({get_view(n)(TEXT) for n in names}) == 10     # all distinct queries


def test_view_registry_errors_list_known_names():
    with pytest.raises(KeyError, match="known: .*cue_answer"):
        get_view("cue_banana")
    with pytest.raises(KeyError, match="known: .*qwen"):
        controlled_views("mistral")
    assert len(UNIVERSAL_VIEWS) == 8
    assert len(VIEWS) == 1 + 8 + 2 * len(FAMILY_VIEWS)


def test_tiny_views_match_the_tiny_tokenizers_chat_template(tiny_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    chat = tok.apply_chat_template([{"role": "user", "content": TEXT}], tokenize=False, add_generation_prompt=True)
    prefill = tok.apply_chat_template([{"role": "assistant", "content": TEXT}], tokenize=False,
                                      continue_final_message=True)
    assert get_view("tiny_chat")(TEXT) == chat
    assert get_view("tiny_assistant_prefill")(TEXT) == prefill


# --- (r, lambda) selection ---------------------------------------------------------------------------

def test_selection_rule_on_a_constructed_table():
    table = pd.DataFrame([(r, lam) for r in (3, 4, 5, 6) for lam in (0.7, 0.8, 0.9, 1.0)], columns=["rank", "lam"])
    table["J"] = 0.0
    j = {(3, 0.7): 0.080, (3, 0.8): 0.090, (3, 0.9): 0.094, (3, 1.0): 0.095,
         (4, 0.7): 0.097, (5, 1.0): 0.100, (6, 1.0): 0.099}
    for (r, lam), v in j.items():
        table.loc[(table["rank"] == r) & (table["lam"] == lam), "J"] = v
    assert select_correction(table, tolerance=0.0) == (5, 1.0)           # plain argmax
    assert select_correction(table, tolerance=0.003) == (4, 0.7)          # smallest r within 0.003
    assert select_correction(table, tolerance=0.0065) == (3, 0.9)         # smallest r, then smallest lambda
    assert select_correction(table, tolerance=0.05) == (3, 0.7)
    harmful = table.assign(J=-0.01)
    assert select_correction(harmful, 0.005) == (0, 0.0)                      # identity beats every harm
    one = pd.DataFrame({"rank": [3], "lam": [0.9], "J": [-0.01]})
    assert select_correction(one, 0.005, allow_identity=False) == (3, 0.9)
    with pytest.raises(ValueError, match="non-finite"):
        select_correction(table.assign(J=np.nan), 0.005)


# --- calibration and labels ---------------------------------------------------------------------------

def test_calibration_reads_no_evaluation_labels():
    z_sup, y_sup, views, z_eval, y_eval = planted_world(3)
    ids = [f"p{i}" for i in range(len(z_eval))]
    sup = feature_frame([f"s{i}" for i in range(len(z_sup))], ORIGINAL, z_sup)
    sup_labels = pd.DataFrame({"id": sup["id"], "label": y_sup})
    cal = pd.concat([feature_frame([f"c{i}" for i in range(len(views[ORIGINAL]))], v, z) for v, z in views.items()])
    pool = feature_frame(ids, ORIGINAL, z_eval)
    for fn in (calibrate, run_calibdcd):
        assert not any("pool" in p and "label" in p for p in inspect.signature(fn).parameters)
    first = run_calibdcd(sup, sup_labels, cal, pool, detector="dpdllm", **PAPER)
    rng = np.random.default_rng(0)
    aucs = set()
    for _ in range(2):
        shuffled = rng.permutation(y_eval)                    # evaluation labels enter only after scoring
        again = run_calibdcd(sup, sup_labels, cal, pool, detector="dpdllm", **PAPER)
        pd.testing.assert_frame_equal(first.scores, again.scores)
        pd.testing.assert_frame_equal(first.objective, again.objective)
        aucs.add(round(roc_auc_score(shuffled, again.scores["score_calibrated"]), 6))
    assert len(aucs) == 2
    with pytest.raises(ValueError, match="feature columns"):
        run_calibdcd(sup, sup_labels, cal, pool.assign(label=y_eval), detector="dpdllm", **PAPER)
    with pytest.raises(ValueError, match="overlaps the supervised split"):
        run_calibdcd(sup, sup_labels, pd.concat([cal, sup]), pool, detector="dpdllm", **PAPER)


def test_end_to_end_planted_shift_calibrated_auc_not_below_original():
    gains = []
    for seed in range(3):
        z_sup, y_sup, views, z_eval, y_eval = planted_world(seed)
        fit = calibrate(z_sup, y_sup, views, detector="dpdllm", **PAPER, seed=seed)
        assert fit.basis.shape[1] >= 1
        assert np.abs(fit.basis.T @ SHIFT).max() > 0.95       # the planted direction is found
        auc_original = roc_auc_score(y_eval, fit.original.score(z_eval))
        auc_calibrated = roc_auc_score(y_eval, fit.score(z_eval))
        assert auc_calibrated >= auc_original
        gains.append(auc_calibrated - auc_original)
        recovery = recovery_analysis(fit, views)
        assert recovery["view"] == fit.views[0] and recovery["flagged"] > 0
        assert 0 < recovery["recovered"] <= recovery["flagged"]
    assert np.mean(gains) > 0.01


def test_fpr_threshold_on_hand_numbers():
    scores = np.arange(1.0, 101.0)                           # 1 .. 100
    assert fpr_threshold(scores, 0.05) == 95.0              # 96..100 (5 of 100) strictly above
    assert fpr_threshold(scores[:39], 0.05) == 38.0         # floor(1.95) = 1 above
    assert fpr_threshold(scores, 0.0) == 100.0


def test_recovery_counts_match_their_definition():
    z_sup, y_sup, views, _, _ = planted_world(4)
    fit = calibrate(z_sup, y_sup, views, detector="dpdllm", **PAPER, seed=0)
    rec = recovery_analysis(fit, views)
    z0, zv = views[ORIGINAL], views[rec["view"]]
    t0 = fpr_threshold(fit.original.score(z0))
    assert (fit.original.score(z0) > t0).mean() <= 0.05
    flagged = fit.original.score(zv) > t0
    assert rec["flagged"] == flagged.sum()
    assert rec["recovered"] == (flagged & (fit.score(zv) <= fpr_threshold(fit.score(z0)))).sum()


def test_ablation_variants():
    z_sup, y_sup, views, _, _ = planted_world(5)
    fits = {name: calibrate(z_sup, y_sup, views, detector="dpdllm", **PAPER, variant=name, seed=7)
            for name in VARIANTS}
    assert len(fits["calibdcd"].views) == 3 and len(fits["top1"].views) == 1
    assert fits["top1"].views == fits["calibdcd"].views[:1]
    assert fits["random3"].views == calibrate(z_sup, y_sup, views, detector="dpdllm", **PAPER, variant="random3",
                                              seed=7).views
    assert (fits["fixed_r3_l09"].rank, fits["fixed_r3_l09"].lam) == (3, 0.9)
    assert fits["full_correction"].lam == 1.0
    assert set(fits["full_correction"].objective["lam"]) == {1.0}
    # without the agreement filter the basis is the top-r of the 4 directions the 3 views' shifts span
    # (the shared one and 3 private ones); with it, only the shared direction is kept
    no_consensus = fits["no_consensus"].objective
    assert (no_consensus["basis_dim"] == np.minimum(no_consensus["rank"], 4)).all()
    assert (fits["calibdcd"].objective["basis_dim"] == 1).all()
    with pytest.raises(KeyError, match="known: .*top1"):
        get_variant("top2")
    with pytest.raises(KeyError, match="known: .*veilprobe"):
        get_detector("mink")


def test_variants_sharing_fits_equal_separate_calibrations_and_fit_fewer_networks(monkeypatch):
    """One FitCache for every variant: the same calibrations and scores as fitting each variant alone,
    with the original network fitted once and identity corrections reusing it."""
    import mialab.calibdcd.calibrate as calibrate_module

    z_sup, y_sup, views, z_eval, _ = planted_world(8, d=12)
    rng = np.random.default_rng(1)
    views = {v: np.hstack([np.ones((len(z), 12)), z]) for v, z in views.items()}
    z_sup, z_eval = (np.hstack([rng.normal(size=(len(z), 12)), z]) for z in (z_sup, z_eval))
    fitted = []
    monkeypatch.setattr(calibrate_module, "make_classifier",
                        lambda name, seed=0: fitted.append(name) or make_classifier(name, seed))
    alone = {v: calibrate(z_sup, y_sup, views, detector="veilprobe", **PAPER, variant=v, seed=2) for v in VARIANTS}
    n_alone, fitted[:] = len(fitted), []
    cache = FitCache()
    shared = {v: calibrate(z_sup, y_sup, views, detector="veilprobe", **PAPER, variant=v, seed=2, fits=cache)
              for v in VARIANTS}
    assert n_alone == 2 * len(VARIANTS)
    distinct = {(f.rank, f.lam, f.basis.tobytes()) for f in alone.values() if f.rank}
    assert len(fitted) == 1 + len(distinct) < n_alone
    for v in VARIANTS:
        assert (shared[v].rank, shared[v].lam, shared[v].views) == (alone[v].rank, alone[v].lam, alone[v].views)
        np.testing.assert_array_equal(shared[v].score(z_eval), alone[v].score(z_eval))
        np.testing.assert_array_equal(shared[v].original.score(z_eval), alone[v].original.score(z_eval))


def test_veilprobe_corrects_only_the_output_block():
    blocks = veilprobe_blocks(16)                            # encoder part 4: [enc | diff | dec | diff]
    assert (blocks["input"], blocks["output"]) == (slice(0, 8), slice(8, 16))
    z_sup, y_sup, views, z_eval, _ = planted_world(6, d=8)
    rng = np.random.default_rng(0)
    text_block = rng.normal(size=(len(views[ORIGINAL]), 8))     # input-derived: the same under every view
    views = {v: np.hstack([text_block, z]) for v, z in views.items()}
    fit = calibrate(np.hstack([rng.normal(size=(len(z_sup), 8)), z_sup]), y_sup, views, detector="veilprobe", **PAPER)
    assert fit.block == blocks["output"] and fit.basis.shape == (8, 1)
    assert abs(fit.basis[:len(SHIFT), 0] @ SHIFT) > 0.95
    z = np.hstack([rng.normal(size=(len(z_eval), 8)), z_eval])
    corrected = fit.transform(z)
    np.testing.assert_array_equal(corrected[:, :8], z[:, :8])
    assert not np.allclose(corrected[:, 8:], z[:, 8:])


def test_veilprobe_vector_orders_the_code_features_in_blocks():
    f_o = np.array([[1.0, 2.0, 3.0, 4.0]])                    # [encoder (2) | decoder (2)]
    f_p = np.array([[1.5, 2.0, 2.0, 4.0]])
    z = veilprobe_vector(f_o, f_p)
    np.testing.assert_array_equal(z, [[1.0, 2.0, 0.5, 0.0, 3.0, 4.0, 1.0, 0.0]])
    assert difference_columns(8).tolist() == [False, False, True, True, False, False, True, True]
    # the same coordinates as the code's [f_original, |f_perturbed - f_original|]
    assert sorted(z[0]) == sorted(np.concatenate([f_o[0], np.abs(f_p - f_o)[0]]))
    with pytest.raises(ValueError, match="VeilProbe feature length"):
        veilprobe_blocks(10)


def test_veilprobe_classifier_prunes_the_differences_the_t_test_rejects():
    rng = np.random.default_rng(1)
    y = np.repeat([0, 1], 30)
    X = rng.normal(size=(60, 8))
    X[:, 2] += 3.0 * y                                        # a difference feature that separates
    clf = make_classifier("veilprobe_protonet", seed=0).fit(X, y)
    assert clf.zeroed_.tolist() == [False, False, False, True, False, False, True, True]
    noisy = X.copy()
    noisy[:, [3, 6, 7]] = rng.normal(size=(60, 3)) * 100      # pruned coordinates do not move the scores
    np.testing.assert_array_equal(clf.score(noisy), clf.score(X))
    assert not make_classifier("protonet", seed=0).fit(X, y).zeroed_.any()


# --- classifiers ---------------------------------------------------------------------------------------

def test_prototypical_network_is_deterministic_under_a_seed():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 30)
    x = rng.normal(size=(60, 12)) + y[:, None] * 0.8
    cfg = ProtoNetConfig(epochs=20)                          # shorter than VeilProbe's 50, same procedure
    s1 = PrototypicalClassifier(seed=3, config=cfg).fit(x, y).score(x)
    s2 = PrototypicalClassifier(seed=3, config=cfg).fit(x, y).score(x)
    s3 = PrototypicalClassifier(seed=4, config=cfg).fit(x, y).score(x)
    np.testing.assert_array_equal(s1, s2)
    assert not np.array_equal(s1, s3)
    assert ((s1 > 0) & (s1 < 1)).all() and roc_auc_score(y, s1) > 0.8


def test_classifiers_score_probabilities_and_reject_bad_input():
    rng = np.random.default_rng(1)
    y = np.repeat([0, 1], 20)
    x = rng.normal(size=(40, 3)) + y[:, None]
    nb = make_classifier("gaussian_nb").fit(x, y)
    p = nb.score(x)
    np.testing.assert_allclose(p, nb.model.predict_proba(x)[:, 1])
    assert len(np.unique(p)) > 2                             # scores, not hard 0/1 predictions
    with pytest.raises(ValueError, match="non-finite"):
        nb.score(np.full((1, 3), np.inf))
    with pytest.raises(ValueError, match="both 0"):
        make_classifier("gaussian_nb").fit(x, np.ones(40))
    with pytest.raises(KeyError, match="known: .*protonet"):
        make_classifier("svm")


# --- feature extractors -----------------------------------------------------------------------------------

def test_dpdllm_packing_is_the_keras_gpt2_preprocessors():
    from mialab.calibdcd.reference import pack

    # GPT2CausalLMPreprocessor(sequence_length=4): start, the first 3 tokens, end (5 ids: 4 targets)
    assert pack([11, 12, 13, 14, 15], 4, start=0, end=9) == [0, 11, 12, 13, 9]
    assert pack([11], 4, start=0, end=9) == [0, 11, 9]
    with pytest.raises(ValueError, match="length"):
        pack([1], 0, start=0, end=9)


def test_feature_frames_round_trip():
    z = np.arange(6.0).reshape(3, 2)
    frame = pd.concat([feature_frame(["a", "b", "c"], "original", z), feature_frame(["c", "a", "b"], "v", z)])
    mats = view_matrices(frame, ["b", "c"])
    np.testing.assert_array_equal(mats["original"], z[[1, 2]])
    np.testing.assert_array_equal(mats["v"], z[[2, 0]])
    with pytest.raises(ValueError, match="lacks 1 id"):
        view_matrices(frame, ["a", "zz"])


TINY_MODEL = VERSE_MODEL  # conftest.tiny_model


@pytest.fixture(scope="module")
def tiny_split():
    texts = ["the cat walks over the hill and sings of rain today",
             "a queen sings of love and war over the quiet hill",
             "line 7: the bird walks", "numbers 12 and 7 meet under the sun at noon"]
    from mialab.text.prefix import split_words

    parts = [split_words(t, 0.5, rounding="ceil") for t in texts]
    return pd.DataFrame({"id": [f"t{i}" for i in range(4)], "text": texts, "prefix": [p for p, _ in parts],
                         "suffix": [s for _, s in parts], "label": [1, 0, 1, 0], "source": "test"})


def test_reference_probabilities_match_a_direct_forward_pass(tiny_model):
    import torch

    from mialab.calibdcd.reference import packed_rows, reference_probabilities
    from mialab.lm.loading import load_causal_lm, load_tokenizer

    parts = [["the cat walks", " over the hill and sings of rain today"], ["a queen", ""]]
    both = reference_probabilities(tiny_model, parts, length=6, device="cpu")
    np.testing.assert_array_equal(reference_probabilities(tiny_model, parts[1:], length=6, device="cpu"), both[1:])
    tok, model = load_tokenizer(tiny_model), load_causal_lm(tiny_model, device="cpu")
    for row, z in zip(packed_rows(tok, parts, 6), both):
        assert row[0] == tok.bos_token_id and row[-1] == tok.eos_token_id and len(row) <= 7
        with torch.no_grad():
            p = torch.softmax(model(torch.tensor([row[:-1]])).logits[0], -1)
        manual = [p[j, t].item() for j, t in enumerate(row[1:])]
        np.testing.assert_allclose(z[:len(manual)], manual, atol=1e-5)
        assert (z[len(manual):] == 0).all()
    assert (both[1, 3:] == 0).all() and (both[0] > 0).all()             # 'a queen' is short, the other is cut


def test_reference_finetuning_is_seeded_deterministic_and_memorises(tiny_model, tmp_path):
    from safetensors.numpy import load_file

    from mialab.calibdcd.reference import FinetuneConfig, finetune_reference, reference_probabilities

    texts = ["the queen sings of war under the sun at noon", "a bird walks over the quiet hill today"]
    cfg = FinetuneConfig(epochs=3, batch_size=1, lr=3e-3, seed=1)
    logs = [finetune_reference(tiny_model, texts, str(tmp_path / f"ref{i}"), length=8, config=cfg, device="cpu")
            for i in range(2)]
    assert logs[0] == logs[1] and logs[0]["steps"] == 6 and logs[0]["texts"] == 2
    assert logs[0]["best_epoch"] == int(np.argmin(logs[0]["perplexity"])) + 1
    assert logs[0]["perplexity"][-1] < logs[0]["perplexity"][0]
    w0, w1 = (load_file(str(tmp_path / f"ref{i}" / "model.safetensors")) for i in range(2))
    assert all(np.array_equal(w0[k], w1[k]) for k in w0)                   # seeded: the same weights
    parts = [[t] for t in texts]
    before = reference_probabilities(tiny_model, parts, length=8, device="cpu")
    after = reference_probabilities(str(tmp_path / "ref0"), parts, length=8, device="cpu")
    assert after.mean() > before.mean()                                     # the texts are memorised
    with pytest.raises(ValueError, match="no text"):
        finetune_reference(tiny_model, [], str(tmp_path / "none"), length=8, config=cfg)


def test_dpdllm_extractor_on_tiny_llama(tiny_model, tiny_split):
    from mialab.calibdcd.extract import dpdllm_view_features
    from mialab.lm.engine import rollout_generator

    engine = rollout_generator(tiny_model, backend_options={"device": "cpu", "batch_size": 3})
    generate = functools.partial(engine, max_new_tokens=6, temperature=0.7, seed=3)
    outs = generate(tiny_split["prefix"].tolist())
    assert outs == generate(tiny_split["prefix"].tolist()) and len(outs) == 4   # seeded sampling: deterministic
    frame = dpdllm_view_features(tiny_split, "tiny_chat", generate=generate, reference_model=tiny_model,
                                 length=8, prompt="first_words", device="cpu")
    z = view_matrices(frame, tiny_split["id"])["tiny_chat"]
    assert z.shape == (4, 8) and np.isfinite(z).all()
    assert ((z >= 0) & (z <= 1)).all() and (z[:, 0] > 0).any()


def test_dpdllm_prompt_is_the_codes_first_words_so_the_features_read_the_target(tiny_model, tiny_split):
    """DPDLLM's code prompts with the text's first length // 2 words; the reference reads the first ``length``
    packed tokens, so a prompt as long as that (here the split's prefix) leaves the target out of the features."""
    from mialab.calibdcd.extract import dpdllm_prompts, dpdllm_view_features

    code = [" ".join(t.split(" ")[:8 // 2]) for t in tiny_split["text"]]     # generate_by_llm.py's prompt
    assert dpdllm_prompts(tiny_split, length=8, prompt="first_words") == code
    assert dpdllm_prompts(tiny_split, length=8, prompt="prefix") == tiny_split["prefix"].tolist()
    with pytest.raises(ValueError, match=r"unknown DPDLLM prompt 'suffix'; known: \['first_words', 'prefix'\]"):
        dpdllm_prompts(tiny_split, length=8, prompt="suffix")
    long = tiny_split.assign(prefix=[t + " " + t for t in tiny_split["text"]])   # 8 tokens or more
    targets = (lambda ps: ["the hill the hill the hill"] * len(ps), lambda ps: ["7 12 noon 7 12 noon"] * len(ps))

    def features(prompt):
        return [view_matrices(dpdllm_view_features(long, ORIGINAL, generate=g, reference_model=tiny_model, length=8,
                                                   prompt=prompt, device="cpu"), long["id"])[ORIGINAL] for g in targets]
    a, b = features("prefix")
    np.testing.assert_array_equal(a, b)                   # the two targets' continuations never reach the reference
    a, b = features("first_words")
    assert np.abs(a - b).max() > 1e-3


def test_key_token_perturbation_on_tiny_llama(tiny_model, tiny_split):
    from mialab.calibdcd.extract import add_perturbed_query

    surprisal = dict(key_token_models=[tiny_model], ratio=0.3, perturbation="surprisal", beams=10, new_tokens=10,
                     seed=0)
    split = add_perturbed_query(tiny_split, query="prefix", **surprisal, device="cpu")
    assert split["query"].tolist() == tiny_split["prefix"].tolist()
    assert (split["perturbed_query"] != split["query"]).all()
    again = add_perturbed_query(tiny_split, query="prefix", **surprisal, device="cpu")
    assert again["perturbed_query"].tolist() == split["perturbed_query"].tolist()
    whole = add_perturbed_query(tiny_split, query="text", **surprisal, device="cpu")   # VeilProbe's code: the text
    assert whole["query"].tolist() == tiny_split["text"].tolist()
    assert (whole["perturbed_query"] != whole["query"]).all() and (whole["perturbed_query"] != split["perturbed_query"]).all()
    with pytest.raises(ValueError, match=r"unknown VeilProbe query 'suffix'; known: \['text', 'prefix'\]"):
        add_perturbed_query(tiny_split, query="suffix", **surprisal, device="cpu")


def test_surprisal_perturbation_swaps_whole_characters_only(make_tiny_model):
    """The tiny byte-level tokenizer spells Arabic and accented letters byte by byte: every token of the text
    perturbed (ratio 1), a piece of a character is never swapped nor swapped in, so no U+FFFD appears (it did:
    the tiny world's worst WikiMIA query grew from 214 to 256 tokens, its model's whole context) and the
    characters the tokens spell stay."""
    from mialab.calibdcd.perturb import key_token_perturb, whole_tokens
    from mialab.lm.loading import load_tokenizer

    tiny_model = make_tiny_model(VERSE)                       # its embedding rows: the tokenizer's ids alone
    tok = load_tokenizer(tiny_model)
    text = "the cat (Arabic: المؤتمر) sings of Río de Oro"
    pieces = [tok.decode([i]) for i in tok(text, add_special_tokens=False)["input_ids"]]
    assert any("\ufffd" in p for p in pieces)                  # the text does hold pieces of characters
    whole = whole_tokens(tok, len(tok) + 3)                   # ids past the vocabulary decode to nothing
    assert not whole[len(tok):].any() and whole[tok("the", add_special_tokens=False)["input_ids"]].all()
    (perturbed,) = key_token_perturb(tiny_model, [text], ratio=1.0, device="cpu")
    assert "\ufffd" not in perturbed
    assert all(c in perturbed for c in "المؤتمرí")
    assert perturbed != text


# --- VeilProbe's mapping model and pruning ----------------------------------------------------------------

def test_mapping_model_training_is_seeded_and_deterministic(tmp_path):
    from safetensors.numpy import load_file

    from mialab.calibdcd.mapping import train_mapping_model
    from mialab.lm.embeddings import resolve_model_path

    vocab = resolve_model_path()                       # MiniLM's tokenizer: the bert-base-uncased vocabulary
    pairs = (["the cat walks over", "a queen sings of", "line 7 the bird", "numbers 12 and 7"],
             ["the hill today", "love and war", "walks", "meet under the sun"])
    cfg = tiny_mapping(epochs=4, lr=3e-3, seed=5)
    logs = [train_mapping_model(vocab, *pairs, str(tmp_path / f"m{i}"), config=cfg) for i in range(2)]
    assert logs[0] == logs[1] and logs[0]["steps"] == 8 and logs[0]["loss"][-1] < logs[0]["loss"][0]
    w0, w1 = (load_file(str(tmp_path / f"m{i}" / "model.safetensors")) for i in range(2))
    assert w0.keys() == w1.keys() and all(np.array_equal(w0[k], w1[k]) for k in w0)
    with pytest.raises(ValueError, match="aligned"):
        train_mapping_model(vocab, ["a"], [], str(tmp_path / "bad"), config=cfg)


def test_mapping_features_average_every_layer_over_the_positions(tmp_path):
    import torch
    from transformers import AutoTokenizer, EncoderDecoderModel

    from mialab.calibdcd.mapping import mapping_features, train_mapping_model
    from mialab.lm.embeddings import resolve_model_path

    cfg = tiny_mapping(epochs=1)
    path = str(tmp_path / "m")
    train_mapping_model(resolve_model_path(), ["the cat walks", "a queen"], ["over the hill", "sings"], path, config=cfg)
    texts = ["the cat walks over the hill", "a queen sings of love and war today"]
    z = mapping_features(path, texts)
    assert z.shape == (2, 2 * (1 + 1) * 16)
    np.testing.assert_array_equal(mapping_features(path, texts[1:]), z[1:])
    tok, model = AutoTokenizer.from_pretrained(path), load_pretrained(EncoderDecoderModel, path).eval()
    x = tok(texts[1], padding="max_length", max_length=16, truncation=True, return_tensors="pt")
    prompt = tok("[CLS]", padding="max_length", max_length=16, return_tensors="pt")["input_ids"]
    assert prompt[0, :3].tolist() == [tok.cls_token_id, tok.cls_token_id, tok.sep_token_id]
    with torch.no_grad():
        enc = model.encoder(**x, output_hidden_states=True)
        dec = model.decoder(input_ids=prompt, encoder_hidden_states=enc.last_hidden_state, output_hidden_states=True)
    manual = [h[0].mean(0).numpy() for h in (*enc.hidden_states, *dec.hidden_states)]
    np.testing.assert_allclose(z[1], np.concatenate(manual), atol=1e-5)


def test_welch_pruning_keeps_the_columns_that_separate_the_classes():
    from scipy.stats import ttest_ind

    from mialab.calibdcd.classifiers import welch_keep

    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 30)
    X = rng.normal(size=(60, 4))
    X[:, 1] += 2.0 * y                                 # separates the classes
    X[:, 2] = 1.0                                      # constant: no p-value, not kept
    keep = welch_keep(X, y)
    assert keep.tolist() == [ttest_ind(X[y == 0, j], X[y == 1, j], equal_var=False).pvalue < 0.01 for j in range(4)]
    assert keep[1] and not keep[2]
    with pytest.raises(ValueError, match="both 0"):
        welch_keep(X, np.zeros(60))


# --- VeilProbe's original key-token perturbation: OT attribution and masked-LM fill ---------------------------

@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory):
    """A random BERT masked LM (seed 0) on the packaged MiniLM's vocabulary (bert-base-uncased's), offline."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from mialab.lm.embeddings import resolve_model_path

    path = tmp_path_factory.mktemp("mlm") / "model"
    tok = AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=128)
    BertForMaskedLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def direct_ipot(a: np.ndarray, b: np.ndarray, cost: np.ndarray, iterations: int = 1000) -> tuple[float, np.ndarray]:
    """IPOT written out for one problem: P <- diag(u) (K * P) diag(v), one Sinkhorn step, weights shifted by 1e-4."""
    wa, wb, k = a + 1e-4, b + 1e-4, np.exp(-cost / 2)
    plan, v = np.full(cost.shape, 1 / cost.size), np.ones(len(b))
    for _ in range(iterations):
        q = k * plan
        u = wa / (q @ v)
        v = wb / (q.T @ u)
        plan = u[:, None] * q * v[None, :]
    return float((plan * cost).sum()), plan


def test_ipot_matches_a_direct_proximal_point_computation_on_a_tiny_cost_matrix():
    import torch

    from mialab.calibdcd.perturb import ipot, ot_distances, topp_union

    a, b = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), torch.tensor([0.1, 0.1, 0.8], dtype=torch.float64)
    cost = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 1.0], [2.0, 1.0, 0.0]], dtype=torch.float64)
    expected, plan = direct_ipot(a.numpy(), b.numpy(), cost.numpy())
    assert float(ipot(a, b, cost)) == pytest.approx(expected, rel=1e-10)
    assert float(ipot(a, a, cost)) < 0.01 < float(ipot(a, b, cost))  # near the exact OT cost: 0.4 * 1 + 0.3 * 1 ... > 0
    assert plan.sum(1) == pytest.approx(a.numpy() + 1e-4, rel=1e-6)   # converged: the marginals hold
    # the support: the union of both top-p sets, renormalised; the cost 1 - cosine of the union's embeddings
    p, q = torch.tensor([0.7, 0.3, 0.0, 0.0]), torch.tensor([[0.0, 0.0, 0.6, 0.4], [0.0, 0.7, 0.3, 0.0]])
    s1, s2, union, valid = topp_union(p, q)
    assert union[0].tolist() == [0, 1, 2, 3] and s1[0].tolist() == pytest.approx([0.7, 0.3, 0, 0])
    assert union[1][valid[1]].tolist() == [0, 1, 2] and not valid[1, 3]   # padded to the longest union
    emb = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [0.0, 1.0]])   # tokens 0, 2 and 1, 3 coincide
    near, far = ot_distances(p, torch.stack([torch.tensor([0.0, 0.0, 0.7, 0.3]), q[0]]), emb).tolist()
    assert near < 0.01 < far


def test_batched_ot_distances_equal_each_pair_computed_alone():
    """All positions' OT problems at once (padded supports, chunks) give each pair's own distance: its top-p union
    (stable order, at most topk), renormalised, 1 - cosine cost, IPOT."""
    import torch

    from mialab.calibdcd import perturb

    rng = np.random.default_rng(0)
    vocab, rows = 50, 9
    logits = rng.normal(size=(rows + 1, vocab)) * np.linspace(0.5, 8, rows + 1)[:, None]
    dist = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    dist[3, :5] = dist[3].max()                              # tied top tokens: the stable order keeps the lower ids
    dist[3] /= dist[3].sum()
    emb = rng.normal(size=(vocab, 8))
    emb[5] = 0.0                                              # a zero (pad) row: cosine 0 to every token
    unit = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)

    def alone(p, q, topk, iterations):
        def top(r):
            order = sorted(range(vocab), key=lambda i: -r[i])
            count = next((j + 1 for j, c in enumerate(np.cumsum(r[order])) if c >= 0.9999), vocab)
            return set(order[:min(count, topk)])

        u = sorted(top(p) | top(q))
        return direct_ipot(p[u] / p[u].sum(), q[u] / q[u].sum(), 1 - unit[u] @ unit[u].T, iterations)[0]

    for topk, iterations, budget in ((1000, 50, perturb.OT_BUDGET), (4, 20, perturb.OT_BUDGET), (6, 30, 1)):
        expected = [alone(dist[0], dist[a + 1], topk, iterations) for a in range(rows)]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(perturb, "OT_BUDGET", budget)               # budget 1: one position per chunk
            got = perturb.ot_distances(torch.tensor(dist[0]), torch.tensor(dist[1:]), torch.tensor(emb),
                                       topk=topk, iterations=iterations)
        assert got.shape == (rows,) and got.numpy() == pytest.approx(expected, rel=1e-10)


def test_key_positions_aggregate_the_models_top_tokens_as_the_code():
    from mialab.calibdcd.perturb import key_positions

    tokens = [["a", "b", "a", "c", "d"]] * 2
    scores = [np.array([5.0, 1.0, 3.0, 4.0, 0.0]), np.array([4.0, 2.0, 6.0, 1.0, 0.0])]
    # top 2 of each model: (a@0 5, c@3 4), (a@2 6, a@0 4) -> a: mean 5 at 0 (2 of 3), c: 4
    assert key_positions(scores, tokens, range(5), top_k=2, keep=1) == [0]
    assert key_positions(scores, tokens, range(5), top_k=2, keep=2) == [0, 3]
    assert key_positions(scores, tokens, [1, 3, 4], top_k=26, keep=13) == [1, 3, 4]   # 26 halved to 3


def test_mlm_fill_changes_exactly_the_given_spans_and_is_seeded(tiny_mlm):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from mialab.calibdcd.perturb import mlm_fill

    tok, mlm = AutoTokenizer.from_pretrained(tiny_mlm), load_pretrained(AutoModelForMaskedLM, tiny_mlm).eval()
    text = "the cat walks over the hill"
    spans = [(3, 7), (22, 27)]                                # " cat", " hill"
    out = mlm_fill(mlm, tok, text, spans, np.random.default_rng(0), top=50)
    assert out.startswith("the ") and " walks over the " in out and out != text
    head, tail = out[4:].split(" walks over the ")
    assert head != "cat" and tail != "hill" and " " not in head + tail
    assert mlm_fill(mlm, tok, text, spans, np.random.default_rng(0), top=50) == out
    assert mlm_fill(mlm, tok, text, [], np.random.default_rng(0)) == text


def test_mlm_fill_reads_a_text_longer_than_its_positions_in_a_window_around_the_mask(tiny_mlm):
    """tiny_mlm has 128 positions; a span near the end of a ~200-token text is filled (no position overflow), the
    rest of the text kept, and a short text fills as it did before the window existed."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from mialab.calibdcd.perturb import mlm_fill

    tok, mlm = AutoTokenizer.from_pretrained(tiny_mlm), load_pretrained(AutoModelForMaskedLM, tiny_mlm).eval()
    text = " ".join(["the cat walks over the hill"] * 33)
    assert len(tok(text)["input_ids"]) > 128
    start = len(text) - len(" hill")
    out = mlm_fill(mlm, tok, text, [(start, len(text))], np.random.default_rng(0), top=50)
    assert out[:start] == text[:start] and out[start + 1:] != "hill" and " " not in out[start + 1:]


def test_batched_attribution_matches_one_masked_input_at_a_time(make_tiny_model):
    import torch

    from mialab.calibdcd.perturb import _next_token_distributions, ot_attributions
    from mialab.lm.loading import load_lm

    model, tok = load_lm(make_tiny_model(VERSE, vocab_size=64), device="cpu")
    ids = tok("the cat walks over the hill")["input_ids"]
    rows = torch.tensor([ids] * 3)
    mask = torch.ones_like(rows)
    rows[1, 2], mask[1, 2], rows[2, 4], mask[2, 4] = 0, 0, 0, 0             # the code's masking: id 0, attention 0
    with torch.no_grad():
        batched = _next_token_distributions(model, rows, mask, beams=3, new_tokens=3)
        alone = torch.cat([_next_token_distributions(model, rows[i:i + 1], mask[i:i + 1], beams=3, new_tokens=3)
                           for i in range(3)])
    assert batched.shape == (3, model.config.vocab_size) and batched.sum(1).tolist() == pytest.approx([1.0] * 3)
    assert torch.allclose(batched, alone, atol=1e-6)
    scores = [ot_attributions(model, ids, beams=3, new_tokens=3, topk=16, iterations=100, batch_size=b)
              for b in (1, 4, 64)]
    assert scores[0].shape == (len(ids),) and np.isfinite(scores[0]).all() and (scores[0] > 0).any()
    assert np.allclose(scores[0], scores[1], atol=1e-6) and np.allclose(scores[0], scores[2], atol=1e-6)


@pytest.mark.slow
def test_original_key_token_perturbation_on_tiny_models(make_tiny_model, tiny_mlm, tiny_split):
    from mialab.calibdcd.extract import add_perturbed_query
    from mialab.calibdcd.perturb import original_key_token_perturb

    # three attribution models sharing a tokenizer (the code: GPT-2, -medium, -large), the byte-level minimum
    # vocabulary (260): small OT supports
    models = [make_tiny_model(VERSE, vocab_size=64, hidden_size=h) for h in (16, 32, 64)]
    texts = tiny_split.iloc[[2, 3]]
    run = functools.partial(add_perturbed_query, texts, query="prefix", key_token_models=models, ratio=0.3,
                            perturbation="original",
                            mlm_model=tiny_mlm, beams=2, new_tokens=2, ot_topk=16, ot_iterations=50, seed=0,
                            batch_size=4, device="cpu")
    split = run()
    assert (split["perturbed_query"] != split["prefix"]).all()
    assert run()["perturbed_query"].tolist() == split["perturbed_query"].tolist()          # seeded: equal twice
    direct = original_key_token_perturb(models, tiny_mlm, texts["prefix"].tolist(), beams=2, new_tokens=2,
                                        ot_topk=16, ot_iterations=50, batch_size=1, device="cpu")
    assert direct == split["perturbed_query"].tolist()                   # the same, one masked input at a time
    with pytest.raises(ValueError, match="needs an mlm_model"):
        add_perturbed_query(tiny_split, query="prefix", key_token_models=models, ratio=0.3, perturbation="original",
                            beams=2, new_tokens=2, seed=0)
    with pytest.raises(ValueError, match="surprisal perturbation reads one key-token model, got 3"):
        add_perturbed_query(tiny_split, query="prefix", key_token_models=models, ratio=0.3, perturbation="surprisal",
                            beams=2, new_tokens=2, seed=0)
    other = make_tiny_model(VERSE, vocab_size=300)                        # merges: other token ids
    with pytest.raises(ValueError, match="must share a tokenizer"):
        original_key_token_perturb([models[0], other], tiny_mlm, ["the cat walks"], beams=2, new_tokens=2,
                                   device="cpu")

@pytest.mark.slow
def test_pool_perturbation_in_parts_equals_one_pass_and_resumes(make_tiny_model, tiny_mlm, tiny_split, tmp_path,
                                                               monkeypatch):
    """Rule calibdcd_perturbation: the original perturbation written a part at a time (a requeued job reuses
    the parts on disk) gives the one pass's prompts; the fill's seed follows each text's index in the pool."""
    from mialab.calibdcd import stages
    from mialab.lm.engine import Parts

    models = [make_tiny_model(VERSE, vocab_size=64, hidden_size=h) for h in (16, 32)]
    texts = stages.scope_texts(tiny_split.iloc[[2, 3]])
    options = {"key_token_models": models, "query": "prefix", "perturbation": "original", "ratio": 0.15,
               "mlm_model": tiny_mlm, "beams": 2, "new_tokens": 2, "ot_topk": 16, "ot_iterations": 50, "seed": 0}
    lm = {"batch_size": 4, "device": "cpu"}
    whole = stages.perturb_pool(texts, options, lm)
    assert whole.columns.tolist() == ["id", "query", "perturbed_query"] and whole["id"].tolist() == texts["id"].tolist()
    monkeypatch.setattr(stages, "PERTURBATION_PART_TEXTS", 1)
    parts = Parts(tmp_path / "perturbed.parquet.parts")
    assert stages.perturb_pool(texts, options, lm, parts=parts.folder).equals(whole)
    files = sorted(parts.folder.glob("*.parquet"))
    assert len(files) == 2
    files[1].unlink()                                               # killed before its second part was written
    calls = []
    real = stages.add_perturbed_query
    monkeypatch.setattr(stages, "add_perturbed_query", lambda split, **kw: calls.append(len(split)) or real(split, **kw))
    assert stages.perturb_pool(texts, options, lm, parts=parts.folder).equals(whole) and calls == [1]   # the first part reused