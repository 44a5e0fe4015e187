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
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    assert tpr_at_fpr(y, s, 0.05) == pytest.approx(tpr[fpr <= 0.05].max())
    # tied scores: the best point within the target lies on a collinear stretch sklearn drops by default
    y, s = np.array([1, 1, 0, 1, 0, 0, 0, 0]), np.array([9, 7, 7, 5, 5, 3, 2, 1])
    assert tpr_at_fpr(y, s, 0.2) == pytest.approx(2 / 3)  # (FPR 0.2, TPR 2/3); the default curve keeps only 1/3


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


# -- bootstrap intervals, paired tests, the headline table, figures -----------------------------------
def _delong_p(y, a, b) -> float:
    """DeLong's two-sided test of equal AUROC of paired scores a, b (direct, from the placements)."""
    from scipy.stats import norm

    y = np.asarray(y)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    v10, v01 = [], []
    for s in (np.asarray(a, float), np.asarray(b, float)):
        psi = (s[pos][:, None] > s[neg][None, :]) + 0.5 * (s[pos][:, None] == s[neg][None, :])
        v10.append(psi.mean(axis=1))
        v01.append(psi.mean(axis=0))
    auc = [v.mean() for v in v10]
    s10, s01 = np.cov(np.array(v10)), np.cov(np.array(v01))
    var = (s10[0, 0] + s10[1, 1] - 2 * s10[0, 1]) / len(pos) + (s01[0, 0] + s01[1, 1] - 2 * s01[0, 1]) / len(neg)
    return float(2 * norm.sf(abs(auc[0] - auc[1]) / np.sqrt(var)))


def test_vectorised_auroc_and_tpr_match_sklearn_with_ties():
    from mialab.evaluation import bootstrap as bs

    rng = np.random.default_rng(5)
    for n0 in (48, 64, 200):
        y = np.r_[np.ones(60, int), np.zeros(n0, int)]
        s = np.round(rng.normal(size=len(y)) + 0.7 * y, 1)  # rounded: many ties
        d = bs.identity([y])
        assert bs.metric_draws([s], d, "auroc")[0] == pytest.approx(roc_auc_score(y, s))
        for t in (0.0, 0.01, 0.05, 0.2):
            assert bs.metric_draws([s], d, t)[0] == pytest.approx(tpr_at_fpr(y, s, t)), (n0, t)
    assert bs.allowed_false_positives(0.01, 48) == 0 and bs.allowed_false_positives(0.05, 64) == 3


def test_bootstrap_interval_of_a_perfect_and_a_random_scorer_and_width_shrinking_with_n():
    from mialab.evaluation import bootstrap as bs

    rng = np.random.default_rng(0)
    y = np.r_[np.ones(50, int), np.zeros(50, int)]
    d = bs.draw([np.arange(100), np.arange(100, 200)], [y, y], 1000, seed=1)
    perfect = bs.metric_draws([y + 0.1 * rng.random(100), y.astype(float)], d, "auroc")
    assert bs.interval(perfect) == (1.0, 1.0)
    widths = []
    for n in (40, 400, 4000):
        yn = np.r_[np.ones(n // 2, int), np.zeros(n // 2, int)]
        draws = bs.metric_draws([rng.normal(size=n)], bs.draw([np.arange(n)], [yn], 1000, seed=2), "auroc")
        lo, hi = bs.interval(draws)
        assert lo < 0.5 < hi  # a random scorer: chance inside the interval
        widths.append(hi - lo)
    # width ~ 1/sqrt(n): about sqrt(10) narrower per tenfold n
    assert 2.3 < widths[0] / widths[1] < 4.3 and 2.3 < widths[1] / widths[2] < 4.3


def test_draws_resample_distinct_candidates_per_class_shared_across_seeds():
    from mialab.evaluation import bootstrap as bs

    ids = [np.array(["a", "b", "c", "d"]), np.array(["c", "d", "e", "f"])]  # c and d are in both seeds' splits
    labels = [np.array([1, 0, 1, 0]), np.array([1, 0, 0, 1])]
    d = bs.draw(ids, labels, 300, seed=0)
    np.testing.assert_array_equal(d.weights[0][:, 2:], d.weights[1][:, :2])  # one candidate, one weight
    members = d.weights[0][:, [0, 2]].sum(1) + d.weights[1][:, [3]].sum(1)  # a, c, f
    assert (members == 3).all()  # each draw takes as many members as there are distinct members
    assert d.weights[0][:, 0].std() > 0


def test_weighted_metrics_equal_the_metrics_of_the_resampled_multiset():
    from mialab.evaluation import bootstrap as bs

    rng = np.random.default_rng(8)
    s = np.round(rng.normal(size=30), 1)
    y = np.r_[np.ones(12, int), np.zeros(18, int)]
    w = rng.integers(0, 3, size=(5, 30)).astype(float)
    w[:, 0] += 1
    w[:, -1] += 1
    auc, tpr = bs.weighted_auroc(s, y, w), bs.weighted_tpr(s, y, w, 0.1)
    for b in range(5):
        rep = np.repeat(np.arange(30), w[b].astype(int))  # the draw written out as a resampled sample
        assert auc[b] == pytest.approx(roc_auc_score(y[rep], s[rep]))
        assert tpr[b] == pytest.approx(tpr_at_fpr(y[rep], s[rep], 0.1))


def test_paired_bootstrap_agrees_with_delong_and_with_direct_counting():
    from mialab.evaluation import bootstrap as bs

    rng = np.random.default_rng(3)
    n = 300
    y = np.r_[np.ones(n // 2, int), np.zeros(n // 2, int)]
    common = rng.normal(size=n)  # shared by both scores: a paired comparison, as on the same candidates
    a = common + 1.0 * y + rng.normal(scale=0.5, size=n)
    b = common + 0.7 * y + rng.normal(scale=0.5, size=n)
    d = bs.draw([np.arange(n)], [y], 4000, seed=0)
    da, db = bs.metric_draws([a], d, "auroc"), bs.metric_draws([b], d, "auroc")
    p = bs.paired_p_value(da, db)
    assert 0.01 < _delong_p(y, a, b) < 0.1
    assert p == pytest.approx(_delong_p(y, a, b), abs=0.02)
    diff = da - db  # the p-value by counting, written out
    direct = min(1.0, 2 * min((1 + sum(x <= 0 for x in diff)) / (len(diff) + 1),
                              (1 + sum(x >= 0 for x in diff)) / (len(diff) + 1)))
    assert p == pytest.approx(direct)
    assert bs.paired_p_value(da, da) == 1.0  # a method against itself


HEADLINE = {"Loss": "loss", "Min-K%++": "min_k_plus_plus@0.2", "N-Sampling": "n_sampling/lcs_ratio_ref@aon",
            "LaRA": "lara"}
BOOT = {"resamples": 500, "level": 0.95, "seed": 0}


def _score_tables():
    """Two seeds of a baselines table (with truncation recorded) and an N-Sampling table."""
    rng = np.random.default_rng(11)
    out = []
    for seed in (0, 1):
        n = 40
        y = np.r_[np.ones(n // 2, int), np.zeros(n // 2, int)]
        ids = [f"c{seed}-{i}" for i in range(n)]
        base = pd.DataFrame({"id": ids, "label": y, "n_tokens": 10, "truncated": np.arange(n) < 3 + seed,
                             "loss": rng.normal(size=n) + y, "min_k_plus_plus@0.2": rng.normal(size=n) + 2 * y,
                             "min_k@0.2": rng.normal(size=n)})
        ns = pd.DataFrame({"id": ids, "label": y, "n_sampling/lcs_ratio_ref@aon": rng.normal(size=n),
                           "n_sampling/jaccard@bon": rng.normal(size=n)})
        out += [("m", "d", seed, base), ("m", "d", seed, ns)]
    return out


def test_headline_table_from_fixed_score_tables():
    from mialab.evaluation.headline import headline_markdown, headline_table
    from mialab.evaluation.stage import evaluate_tables, merge_tables

    tables = merge_tables(_score_tables())
    h = headline_table(tables, HEADLINE, "min_k_plus_plus@0.2", [0.01, 0.05], BOOT)
    assert list(h["family"]) == ["Loss", "Min-K%++", "N-Sampling"]  # config order; LaRA was not scored here
    per_seed = evaluate_tables(tables, [0.01, 0.05]).set_index(["method", "seed"])
    for _, r in h.iterrows():
        assert r["auroc"] == pytest.approx(per_seed.loc[r["method"], "auroc"].mean())
        assert r["tpr@5%fpr"] == pytest.approx(per_seed.loc[r["method"], "tpr@5%fpr"].mean())
        assert r["auroc_lo"] <= r["auroc"] <= r["auroc_hi"]
    r = h.set_index("family")
    assert r.loc["Min-K%++", "p_value"] == 1.0 and r.loc["Min-K%++", "delta_auroc"] == 0.0
    assert r.loc["N-Sampling", "p_value"] < 0.01 < r.loc["N-Sampling", "auroc_hi"]  # random vs a strong baseline
    assert (h["n_neg"] == 20).all() and (h["fp_allowed@0.01"] == 0).all() and (h["fp_allowed@0.05"] == 1).all()
    assert r.loc["Loss", "n_truncated"] == 3 + 4 and pd.isna(r.loc["N-Sampling", "n_truncated"])
    md = headline_markdown(h, [0.01, 0.05], 0.95, 500)
    assert "### d / m (baseline min_k_plus_plus@0.2)" in md and "| 20 (0, 1) |" in md and "| 7/80 |" in md
    assert "jaccard" not in md and "min_k@0.2" not in md  # only the fixed headline columns


def test_truncation_counts_sit_beside_the_methods_they_affect():
    from mialab.evaluation.report import markdown_table, truncation_warnings
    from mialab.evaluation.stage import evaluate_tables, summarise

    per_seed = evaluate_tables(_score_tables(), [0.05])
    cut = per_seed.set_index(["method", "seed"])["n_truncated"]
    assert cut[("loss", 0)] == 3 and cut[("loss", 1)] == 4 and pd.isna(cut[("n_sampling/jaccard@bon", 0)])
    summary = summarise(per_seed, [0.05])
    md = markdown_table(summary, ["auroc", "tpr@5%fpr"])
    assert "| truncated |" in md.splitlines()[0] + "|" or md.splitlines()[0].endswith("truncated |")
    assert any(l.startswith("| d | m | loss |") and l.endswith("| 7/80 |") for l in md.splitlines())
    assert any(l.startswith("| d | m | n_sampling/jaccard@bon |") and l.endswith("|  |") for l in md.splitlines())
    assert truncation_warnings(summary, 0.05) and not truncation_warnings(summary, 0.1)  # 7/80 = 8.75%


def test_roc_and_forest_figures_have_the_expected_panels(tmp_path):
    from PIL import Image

    from mialab.evaluation.headline import headline_table
    from mialab.evaluation.report import forest_figure, roc_figure
    from mialab.evaluation.stage import merge_tables

    tables = merge_tables(_score_tables() + [(m2, "d", s, t.drop(columns="truncated")) for m2, _, s, t in
                                            _score_tables()[::2] for m2 in ["m2"]])
    panels = {m: pd.concat([t for mm, _, _, t in tables if mm == m]) for m in ("m", "m2")}
    drawn = roc_figure(panels, HEADLINE, "d", str(tmp_path / "roc.png"))
    assert drawn == {"d / m": ["Loss", "Min-K%++", "N-Sampling"], "d / m2": ["Loss", "Min-K%++"]}
    h = headline_table(tables, HEADLINE, "min_k_plus_plus@0.2", [0.01, 0.05], BOOT)
    rows = forest_figure(h, HEADLINE, str(tmp_path / "forest.png"))
    assert rows == {"d": ["m · Loss", "m · Min-K%++", "m · N-Sampling", "m2 · Loss", "m2 · Min-K%++"]}
    for name in ("roc.png", "forest.png"):
        with Image.open(tmp_path / name) as im:
            assert im.format == "PNG" and im.size[0] > 300


def test_readme_section_is_regenerated_from_a_run_and_checked(tmp_path):
    import subprocess
    import sys

    from mialab.evaluation.headline import headline_table
    from mialab.evaluation.readme import BEGIN, END, replace_section
    from mialab.evaluation.stage import merge_tables
    from workflow_helpers import REPO

    h = headline_table(merge_tables(_score_tables()), HEADLINE, "min_k_plus_plus@0.2", [0.01, 0.05], BOOT)
    (tmp_path / "results/evaluation").mkdir(parents=True)
    h.to_parquet(tmp_path / "results/evaluation/headline.parquet")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n\n{BEGIN}\nold\n{END}\n\nafter\n")
    run = lambda *a: subprocess.run([sys.executable, str(REPO / "scripts/readme_results.py"), "--workdir", str(tmp_path),
                                     "--readme", str(readme), *a], capture_output=True, text=True, timeout=120)
    failed = run()
    assert failed.returncode != 0 and "config.yaml: the run's config, with its seeds" in failed.stderr
    (tmp_path / "config.yaml").write_text("seeds: [0, 1]\n")
    assert run("--check").returncode == 1  # the section is stale
    assert run().returncode == 0
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n\n" + BEGIN) and text.endswith(END + "\n\nafter\n") and "old" not in text
    assert "over the distinct candidates of the 2 seeds" in text  # the run's seeds, not a number in the code
    grid = [line for line in text.splitlines() if line.startswith("| ")]
    assert grid[0] == "| dataset / model | Loss | Min-K%++ | N-Sampling |" and grid[1].startswith("| d / m | ")
    split = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]
    cells = dict(zip(split(grid[0])[1:], split(grid[1])[1:]))
    row = h.set_index("family").loc["Loss"]
    assert cells["Loss"].startswith(f"{100 * row['auroc']:.1f} [{100 * row['auroc_lo']:.0f}, ")
    assert cells["Min-K%++"].endswith("(baseline)") and "sweep" not in text.lower()
    marks = {f: "▲" if r["delta_auroc"] > 0 else "▼" for f, r in h.set_index("family").iterrows()
             if r["method"] != r["baseline"] and r["p_value"] < 0.05}
    assert all(cells[f].endswith(m) for f, m in marks.items())
    assert run("--check").returncode == 0
    with pytest.raises(ValueError, match="no results section"):
        replace_section("# no markers\n", "x")
    # a sweep run elsewhere (--sweep): its figure copied to docs/figures/, one onset line per method in
    # docs/sweep.md's block (the README keeps the one table)
    from mialab.evaluation.sweep import sweep_figure, sweep_table

    sweep_dir = tmp_path / "sweep/results/sweep/exposure"
    sweep_dir.mkdir(parents=True)
    points = {0: h.assign(auroc=0.5, auroc_lo=0.4, auroc_hi=0.6),
              8: h.assign(auroc_lo=h["auroc"] - 0.01, auroc_hi=h["auroc"] + 0.01)}
    sweep = sweep_table(points)
    sweep.to_parquet(sweep_dir / "sweep.parquet")
    sweep_figure(sweep, HEADLINE, str(sweep_dir / "sweep.png"))
    doc = tmp_path / "docs/sweep.md"
    doc.parent.mkdir()
    doc.write_text("# sweep\n")
    failed = run("--sweep", str(tmp_path / "sweep"))
    assert failed.returncode != 0 and "has no sweep section" in failed.stderr  # the script never guesses where
    doc.write_text("# sweep\n\n<!-- sweep:begin (scripts/readme_results.py) -->\nold\n<!-- sweep:end -->\n\nafter\n")
    assert run("--sweep", str(tmp_path / "sweep"), "--check").returncode == 1  # the sweep's block is stale
    assert run("--sweep", str(tmp_path / "sweep")).returncode == 0
    assert readme.read_text() == text  # the README's table is the run's already
    swept = doc.read_text()
    assert "![exposure sweep](figures/sweep_exposure.png)" in swept and (tmp_path / "docs/figures/sweep_exposure.png").is_file()
    assert swept.startswith("# sweep\n\n<!-- sweep:begin") and swept.endswith("<!-- sweep:end -->\n\nafter\n") and "old" not in swept
    mink = h.set_index("family").loc["Min-K%++"]
    assert f"| d / m | Min-K%++ | 50.0 [40, 60] | {100 * mink['auroc']:.1f} [" in swept and "| onset |" in swept
    assert run("--sweep", str(tmp_path / "sweep"), "--check").returncode == 0
    assert run("--check").returncode == 0  # without a sweep run, docs/sweep.md is left as it is


def _check_rows(dataset: str, shared: int) -> pd.DataFrame:
    """Two seeds' rows of the leakage table (rule leakage_check) of 20 + 20 candidates each."""
    return pd.DataFrame([{"dataset": dataset, "seed": s, "setting": "original", "n_members": 20, "n_nonmembers": 20,
                          "n_shared": shared, "overlap_warn": 0.25, "overlap_warning": shared > 10,
                          "dup_exact": 0, "dup_ngram": 0, "dup_embedding": 0, "blind_auroc": 0.5, "blind_auroc_std": 0.05,
                          "blind_warning": False, "length_auroc": 0.5, "members_words_mean": 30.0,
                          "nonmembers_words_mean": 30.0} for s in (0, 1)])


def test_a_no_members_control_off_fifty_and_overlapping_seeds_are_warned_about_beside_their_dataset():
    """summary.md warns, and says beside the dataset, when a model no member reached (a no-members control)
    separates the classes beyond its bootstrap interval (a control within it, or a model that saw members, is
    no warning) and when two seeds' splits share more than the threshold; it gives each pool's dropped repeats."""
    from mialab.evaluation.headline import headline_table
    from mialab.evaluation.report import results_markdown
    from mialab.evaluation.stage import evaluate_tables, merge_tables, summarise

    rng = np.random.default_rng(3)
    tables = []
    for model in ("control", "m"):
        for dataset in ("d", "e"):
            for seed in (0, 1):
                y = np.r_[np.ones(20, int), np.zeros(20, int)]
                shift = 1.5 * y if dataset == "d" else 0 * y   # d's classes differ without membership
                tables.append((model, dataset, seed, pd.DataFrame({
                    "id": [f"{dataset}{seed}-{i}" for i in range(40)], "label": y,
                    "loss": rng.normal(size=40) + shift, "min_k_plus_plus@0.2": rng.normal(size=40)})))
    tables = merge_tables(tables)
    h = headline_table(tables, HEADLINE, "min_k_plus_plus@0.2", [0.05], BOOT)
    summary = summarise(evaluate_tables(tables, [0.05]), [0.05])
    checks = pd.concat([_check_rows("d", 4), _check_rows("e", 15)], ignore_index=True)
    md = lambda controls: results_markdown(summary, h, fpr_targets=[0.05], bootstrap=BOOT, truncation_warn=1.0,
                                           checks=checks, repeats={"d": 172, "e": None}, controls=controls)
    text = md(["control"])
    warnings = [line for line in text.splitlines() if line.startswith("> **Warning")]
    loss = h[(h["model"] == "control") & (h["dataset"] == "d") & (h["method"] == "loss")].iloc[0]
    assert loss["auroc_lo"] > 0.5 and len(warnings) == 2, warnings
    assert warnings[0].startswith("> **Warning (split overlap):** e: two seeds' splits share 15 of 40 candidates (> 25%)")
    assert warnings[1].startswith("> **Warning (no-members control):** d: the no-members control 'control' never saw "
                                  f"a member, yet separates the classes: AUROC Loss (`loss`) {100 * loss['auroc']:.1f} [")
    assert "Min-K%++" not in warnings[1]                           # its interval holds 50%
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith(("| d |", "| e |"))}
    assert rows["| d"].startswith("| d | original | 2 | 172 | 4 / 40 | 50.0 ± 0.0 |")
    assert rows["| d"].endswith(f"| control: Loss (`loss`) {100 * loss['auroc']:.1f} "
                                f"[{100 * loss['auroc_lo']:.1f}, {100 * loss['auroc_hi']:.1f}] ⚠ |")
    assert rows["| e"].startswith("| e | original | 2 | n/a | 15 / 40 ⚠ |") and rows["| e"].endswith("| – |")
    assert "Warning (no-members control)" not in md([]) and "control: Loss" not in md([])   # no model is one


def test_the_no_member_models_are_those_no_member_reached_through_their_whole_lineage():
    from workflow_helpers import default_config, validated

    from mialab.pipeline.plan import no_member_models

    models = {"control": {"kind": "pretrain", "members": []}, "base": {"kind": "pretrain", "members": [{"dataset": "w"}]},
              "chat": {"kind": "sft", "init": "control"}, "sft": {"kind": "sft", "init": "control", "members": {"dataset": "a"}},
              "tuned": {"kind": "sft", "init": "base"}, "rl0": {"kind": "rl", "init": "chat", "members": {"dataset": "a", "repeats": 0}},
              "rl1": {"kind": "rl", "init": "chat", "members": {"dataset": "a"}}, "given": {"kind": "hf", "path": "x"}}
    assert no_member_models(models) == ["control", "chat", "rl0"]
    assert no_member_models(validated(default_config())["models"]) == ["control"]   # the tiny world's


# -- the paper's figures beside the run's (paper_targets, mialab.evaluation.reproduction) ---------------------------
def _target(method, metric, value, dataset="d", model="m"):
    return {"method": method, "dataset": dataset, "model": model, "metric": metric, "value": value,
            "source": {"paper": "P", "table": "Table 1", "row": f"{method} {metric}"}}


def _reproduction_tables():
    """Two seeds of one (d, m), 3 members and 3 non-members each: Loss, six metric columns of the attack ``adra`` and
    two of its reconstruction columns with hand-set member means."""
    rng = np.random.default_rng(5)
    y = np.array([1, 1, 1, 0, 0, 0])
    loss = {0: [3, 2, 0.5, 1, 0, -1], 1: [1, 2, 3, -1, -2, -3]}  # AUROC 8/9 and 1; TPR@5%FPR (no FP) 2/3 and 1
    jaccard = {0: [0.5, 0.3, 0.1, 0.9, 0.9, 0.9], 1: [0.2, 0.2, 0.2, 0.0, 0.0, 0.0]}  # members' means 0.3, 0.2
    lcs = {0: [10, 20, 30, 0, 0, 0], 1: [40, 40, 40, 5, 5, 5]}  # members' means 20, 40 (words)
    out = []
    for seed in (0, 1):
        t = pd.DataFrame({"id": [f"c{seed}-{i}" for i in range(6)], "label": y, "loss": np.array(loss[seed], float),
                          "adra/jaccard@bon": jaccard[seed], "adra/lcs_length@aon": np.array(lcs[seed], float)})
        for i in range(4):
            t[f"adra/m{i}@aon"] = rng.normal(size=6) + i * y
        out.append(("m", "d", seed, t))
    return out


def test_reproduction_rows_set_the_run_s_figure_with_its_interval_beside_the_paper_s():
    """Each kind of figure on hand numbers (AUROC, TPR@5%FPR, an attack's top-5 AUROC, a reconstruction metric's
    members' mean, in % or words); the intervals are the headline's (same draws); a lost figure stays NaN."""
    from mialab.evaluation.headline import headline_table
    from mialab.evaluation.reproduction import LOST, computable, reproduction_rows
    from mialab.evaluation.stage import merge_tables

    tables = merge_tables(_reproduction_tables())
    targets = [_target("loss", "auroc", 80.0), _target("loss", "tpr@5%fpr", LOST), _target("adra", "top5_auroc", 70),
               _target("adra", "jaccard@bon", 31.5), _target("adra", "lcs_length@aon", 28)]
    rows = reproduction_rows(targets, tables, BOOT)
    assert list(rows["metric"]) == ["auroc", "tpr@5%fpr", "top5_auroc", "jaccard@bon", "lcs_length@aon"]
    r = rows.set_index("metric")
    aurocs = [[roc_auc_score(t["label"], t[c]) for c in t.columns if c.startswith("adra/")] for _, _, _, t in tables]
    top5 = np.mean([np.sort(a)[::-1][:5].mean() for a in aurocs])
    expected = {"auroc": 100 * (8 / 9 + 1) / 2, "tpr@5%fpr": 100 * (2 / 3 + 1) / 2, "top5_auroc": 100 * top5,
                "jaccard@bon": 25.0, "lcs_length@aon": 30.0}
    for metric, value in expected.items():
        assert r.loc[metric, "run"] == pytest.approx(value), metric
        assert r.loc[metric, "run_lo"] <= r.loc[metric, "run_hi"] and r.loc[metric, "n_seeds"] == 2
    assert list(r["unit"]) == ["%", "%", "%", "%", "words"]
    assert r.loc["auroc", "paper"] == 80.0 and np.isnan(r.loc["tpr@5%fpr", "paper"])
    assert r.loc["jaccard@bon", "source"] == "P Table 1, adra jaccard@bon"
    h = headline_table(tables, {"Loss": "loss"}, "loss", [0.05], BOOT).iloc[0]
    assert r.loc["auroc", "run_lo"] == pytest.approx(100 * h["auroc_lo"])
    assert r.loc["auroc", "run_hi"] == pytest.approx(100 * h["auroc_hi"])
    assert r.loc["tpr@5%fpr", "run_hi"] == pytest.approx(100 * h["tpr@5%fpr_hi"])
    # a target on another pair, or of columns these tables lack, is not computable here; asked anyway, it is an error
    others = [_target("loss", "auroc", 1, model="m2"), _target("lara", "auroc", 1), _target("n_sampling", "top5_auroc", 1)]
    assert computable([*targets, *others], tables) == targets
    with pytest.raises(ValueError, match=r"lara auroc on d / m: no column lara in the score tables"):
        reproduction_rows(others[1:2], tables, BOOT)


def test_the_reproduction_table_gives_the_difference_and_where_the_paper_falls():
    from mialab.evaluation.reproduction import ROW_COLUMNS, reproduction_markdown

    def row(paper, run, lo, hi, metric="auroc"):
        return {"dataset": "d", "model": "m", "method": "x", "metric": metric, "unit": "%", "paper": paper, "run": run,
                "run_lo": lo, "run_hi": hi, "n_seeds": 3, "source": "P Table 2, X on D"}

    rows = pd.DataFrame([row(70.0, 72.0, 65.0, 79.0), row(90.0, 72.0, 65.0, 79.0), row(60.0, 72.0, 65.0, 79.0),
                         row(np.nan, 72.0, 65.0, 79.0)]).astype(ROW_COLUMNS)
    lines = [line for line in reproduction_markdown(rows, 0.95).splitlines() if line.startswith("| d / m")]
    assert lines[0] == "| d / m | `x` | `auroc` | 70.0 | 72.0 [65.0, 79.0] | +2.0 | inside | 3 | P Table 2, X on D |"
    assert "| 90.0 | 72.0 [65.0, 79.0] | -18.0 | 11.0 above |" in lines[1]
    assert "| 60.0 | 72.0 [65.0, 79.0] | +12.0 | 5.0 below |" in lines[2]
    assert "| not in the extracted text | 72.0 [65.0, 79.0] | – | – |" in lines[3]
    assert "run [95% CI]" in reproduction_markdown(rows, 0.95)
    assert reproduction_markdown(rows.iloc[:0], 0.95).startswith("This config lists no paper figure")


def test_summary_and_method_reports_print_the_reproduction_rows_only_where_the_config_lists_targets():
    from mialab.adra.report import markdown as adra_markdown
    from mialab.evaluation.headline import headline_table
    from mialab.evaluation.report import results_markdown
    from mialab.evaluation.reproduction import reproduction_rows
    from mialab.evaluation.stage import evaluate_tables, merge_tables, summarise
    from mialab.lara.report import lara_markdown, lara_summary

    tables = merge_tables(_score_tables())
    h = headline_table(tables, HEADLINE, "min_k_plus_plus@0.2", [0.05], BOOT)
    per_seed = evaluate_tables(tables, [0.05])
    summary = summarise(per_seed, [0.05])
    rows = reproduction_rows([_target("min_k_plus_plus@0.2", "auroc", 88.8), _target("n_sampling", "jaccard@bon", 12)],
                             tables, BOOT)
    md = lambda r: results_markdown(summary, h, fpr_targets=[0.05], bootstrap=BOOT, truncation_warn=1.0, reproduction=r)
    with_rows, without = md(rows), md(rows.iloc[:0])
    assert with_rows.index("## Headline") < with_rows.index("## Reproduction") < with_rows.index("## Appendix")
    assert "| d / m | `min_k_plus_plus@0.2` | `auroc` | 88.8 |" in with_rows and "## Reproduction" not in without
    assert "| d / m | `n_sampling` | `jaccard@bon` | 12.0 |" in adra_markdown(pd.DataFrame(), "d", "x", rows, 0.95)
    assert "## Reproduction" not in adra_markdown(pd.DataFrame(), "d", "x", rows.iloc[:0], 0.95)
    lara = lara_markdown(lara_summary(per_seed, ["m"], [0.05]), [0.05], rows, 0.95)
    assert "`min_k_plus_plus@0.2` | `auroc` | 88.8" in lara and "`n_sampling`" not in lara  # LaRA's methods only
