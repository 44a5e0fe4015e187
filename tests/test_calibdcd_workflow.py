"""CalibDCD in the workflow: partition around the split, cached features, calibration of every variant,
the paper's tables, stage keys, the chat post-training stage, the DAG, and (slow) a reduced tiny world."""

from __future__ import annotations

import copy
import os

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import VERSE_MODEL
from workflow_helpers import REPO, default_config, job_stats, make_workdir, planned_jobs, snakemake, suite_world_config

from mialab.calibdcd.calibrate import VARIANTS, run_calibdcd
from mialab.calibdcd.extract import add_perturbed_query, dpdllm_view_features
from mialab.calibdcd.frames import feature_frame
from mialab.calibdcd.plan import VIEWS_SCOPE, CalibDCDPlan, perturbation_options
from mialab.calibdcd.report import (
    ablations,
    beside_baselines,
    main_results,
    main_results_long,
    markdown,
    recovery,
    run_rows,
)
from mialab.calibdcd.stages import (
    attach_labels,
    calibrate_variants,
    extract_features,
    partition_around_split,
    scope_texts,
    score_column,
    veilprobe_tables,
)
from mialab.calibdcd.views import ORIGINAL, apply_view, controlled_views
from mialab.pipeline.config import ConfigError
from mialab.pipeline.plan import Plan

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pool_frame(n_per_class: int = 40) -> pd.DataFrame:
    """A split-schema pool of ``n_per_class`` members and as many non-members."""
    n = 2 * n_per_class
    return pd.DataFrame({"id": [f"t{i:03d}" for i in range(n)], "text": [f"text {i} a b" for i in range(n)],
                         "prefix": [f"text {i}" for i in range(n)], "suffix": ["a b"] * n,
                         "label": np.tile([1, 0], n_per_class).astype("int8"), "source": "test"})


# --- partition -------------------------------------------------------------------------------------

def test_partition_keeps_the_split_out_and_never_reads_its_labels():
    pool = pool_frame()
    split_ids = pool["id"].iloc[:20].tolist()                      # 10 members + 10 non-members
    parts = partition_around_split(pool, split_ids, seed=1, n_train_per_class=8, n_calibration=6)
    sup, cal, ev = parts["supervised"], parts["calibration"], parts["evaluation"]
    assert ev["id"].tolist() == sorted(split_ids)
    assert sup["label"].value_counts().to_dict() == {1: 8, 0: 8}
    labels = pool.set_index("id")["label"]
    assert (labels[cal["id"]] == 0).all() and len(cal) == 6 and list(cal.columns) == ["id"]
    assert not set(sup["id"]) & set(split_ids) and not set(cal["id"]) & set(split_ids)
    assert not set(sup["id"]) & set(cal["id"])
    flipped = pool.assign(label=np.where(pool["id"].isin(split_ids), 1 - pool["label"], pool["label"]))
    again = partition_around_split(flipped, split_ids, seed=1, n_train_per_class=8, n_calibration=6)
    for name in parts:                                             # the split's labels do not matter
        pd.testing.assert_frame_equal(parts[name], again[name])
    other_seed = partition_around_split(pool, split_ids, seed=2, n_train_per_class=8, n_calibration=6)
    assert set(other_seed["supervised"]["id"]) != set(sup["id"])
    with pytest.raises(ValueError, match="not in the pool"):
        partition_around_split(pool, ["nope"], seed=0, n_train_per_class=8, n_calibration=6)


def test_scope_texts_carry_no_label_and_keep_the_order_asked():
    pool = pool_frame(5)
    texts = scope_texts(pool, ["t003", "t001"])
    assert list(texts.columns) == ["id", "text", "prefix", "suffix"] and texts["id"].tolist() == ["t003", "t001"]
    assert len(scope_texts(pool)) == 10
    with pytest.raises(ValueError, match="not in the pool"):
        scope_texts(pool, ["t999"])


# --- features on a tiny random Llama -----------------------------------------------------------------

TINY_MODEL = VERSE_MODEL  # conftest.tiny_model
LM = {"batch_size": 2, "device": "cpu", "dtype": "float32"}  # calibdcd.lm


def test_features_come_from_one_generate_call_per_sampling_setting_and_match_its_outputs(tiny_model):
    from mialab.lm.engine import rollout_generator

    texts = pd.DataFrame({"id": ["a", "b", "c"], "prefix": ["the cat walks over", "a queen sings of", "line 7: the bird"],
                          "suffix": ["the hill today", "love and war", "walks"]})
    texts["text"] = texts["prefix"] + " " + texts["suffix"]
    engine = rollout_generator(tiny_model)
    calls = []

    def generate(prompts, **sampling):
        calls.append((list(prompts), sampling))
        return engine(prompts, **sampling)

    views = [ORIGINAL, "cue_answer", "tiny_chat"]
    dets = {"dpdllm": {"reference_model": tiny_model, "length": 6, "prompt": "first_words", "max_new_tokens": 4,
                       "temperature": 0.7},
            "veilprobe": {"max_new_tokens": 4, "temperature": 0.0, "continuations": 2}}
    with pytest.raises(ValueError, match="perturbed_query"):   # VeilProbe's prompts: rule calibdcd_perturbation's
        extract_features(texts, views, generate=generate, detectors=dets, lm_options=LM)
    perturbed = add_perturbed_query(texts, query="prefix", key_token_models=[tiny_model], ratio=0.3,
                                    perturbation="surprisal", beams=10, new_tokens=10, seed=0, batch_size=2)
    texts = perturbed
    run = extract_features(texts, views, generate=generate, detectors=dets, lm_options=LM)
    assert [c[1] for c in calls] == [{"max_new_tokens": 4, "temperature": 0.7, "n": 1},
                                     {"max_new_tokens": 4, "temperature": 0.0, "n": 2}]
    for prompts, _ in calls:                                                  # distinct prompts, shortest first
        assert len(prompts) == len(set(prompts)) and [len(p) for p in prompts] == sorted(map(len, prompts))
    gens = run.generations
    assert len(gens) == 3 * 3 + 3 * 2 * 3 * 2    # dpdllm: views x texts; veilprobe: x (query, perturbed) x 2 samples
    vp = gens[gens["detector"] == "veilprobe"]
    assert vp.loc[vp["input"] == "perturbed_query", "text"].tolist() == \
        [t for t in perturbed["perturbed_query"] for _ in range(2)] * 3
    assert vp["sample"].tolist() == [0, 1] * 18 and set(gens.loc[gens["detector"] == "dpdllm", "sample"]) == {0}
    first_words = ["the cat walks", "a queen sings", "line 7: the"]     # DPDLLM's code: the first length // 2 words
    for (det, column, inputs), (prompts, sampling) in zip((("dpdllm", "dpdllm_prompt", first_words),
                                                           ("veilprobe", "query", texts["prefix"].tolist())), calls):
        plain = gens[(gens["detector"] == det) & (gens["view"] == "cue_answer") & (gens["input"] == column)]
        n = sampling["n"]
        assert plain["prompt"].tolist() == [p for p in apply_view("cue_answer", inputs) for _ in range(n)]
        assert plain["text"].tolist() == [t for t in inputs for _ in range(n)]
        got = engine(prompts, **sampling)                                   # the same engine call, the same outputs
        lookup = {p: got[i * n:(i + 1) * n] for i, p in enumerate(prompts)}
        assert plain["output"].tolist() == [o for p in plain["prompt"].iloc[::n] for o in lookup[p]]
    assert list(run.features) == ["dpdllm"]                                   # VeilProbe's: veilprobe_tables
    dp = run.features["dpdllm"]
    assert dp.shape == (9, 2 + 6) and dp.groupby("view")["id"].apply(list).to_dict() == {v: ["a", "b", "c"] for v in views}
    # the same features as the per-view stage entry of mialab.calibdcd.extract, fed the same outputs
    own = dict(zip(gens.loc[gens["detector"] == "dpdllm", "prompt"], gens.loc[gens["detector"] == "dpdllm", "output"]))
    for view in views:
        expected = dpdllm_view_features(texts, view, generate=lambda ps: [own[p] for p in ps],
                                        reference_model=tiny_model, length=6, prompt="first_words", device="cpu")
        np.testing.assert_allclose(dp[dp["view"] == view].filter(like="z"), expected.filter(like="z"), atol=1e-6)
    calls.clear()
    same = {det: {**spec, "temperature": 0.0, "continuations": 1} for det, spec in dets.items()}
    extract_features(texts, views, generate=generate, detectors=same, lm_options=LM)
    assert len(calls) == 1                                                    # equal settings share one call
    with pytest.raises(KeyError, match="unknown detector"):
        extract_features(texts, views, generate=generate, detectors={"zlib": {}}, lm_options={})


def test_veilprobe_queries_the_whole_text_by_default(tiny_model):
    """VeilProbe's code queries the target with the whole text (its sampler stores the Item as the Prefix): the
    schema's default; ``query: prefix`` is the option. The perturbation stage makes the queries, so the features
    (through its key) and the mapping models (they train on the features job's generations) follow it."""
    from mialab.calibdcd.stages import perturb_pool
    from mialab.lm.engine import rollout_generator

    cfg = validated(default_config())
    plan = CalibDCDPlan(Plan(cfg), cfg)
    assert plan.perturbation("wikimia").manifest["config"]["query"] == "text"
    other = default_config()
    other["calibdcd"]["detectors"]["veilprobe"]["query"] = "prefix"
    other = validated(other)
    mine = CalibDCDPlan(Plan(other), other)
    assert mine.perturbation("wikimia").key != plan.perturbation("wikimia").key
    assert mine.features("chat", "wikimia", "original").key != plan.features("chat", "wikimia", "original").key
    texts = pd.DataFrame({"id": ["a", "b"], "prefix": ["the cat walks over", "a queen sings of"],
                          "suffix": ["the hill today", "love and war"]})
    texts["text"] = texts["prefix"] + " " + texts["suffix"]
    options = {"key_token_models": [tiny_model], "perturbation": "surprisal", "ratio": 0.3, "beams": 10,
               "new_tokens": 10, "seed": 0}
    for query, column in (("text", "text"), ("prefix", "prefix")):
        queries = perturb_pool(texts, {**options, "query": query}, LM)
        assert queries["query"].tolist() == texts[column].tolist()
        run = extract_features(texts.merge(queries, on="id"), [ORIGINAL], generate=rollout_generator(tiny_model),
                               detectors={"veilprobe": {"max_new_tokens": 2, "temperature": 0.0}}, lm_options=LM)
        gens = run.generations
        assert gens.loc[gens["input"] == "query", "prompt"].tolist() == texts[column].tolist()


def test_veilprobe_trains_a_mapping_pair_per_distinct_continuation(tiny_model, tmp_path):
    """VeilProbe's mapping script reads three continuations per text (Generate1-3): the target samples
    ``continuations`` of each prompt in one engine call, distinct (one seeded request, n samples, as vLLM's ``n``),
    and each is one training pair of the mapping models."""
    from conftest import tiny_mapping

    from mialab.lm.embeddings import resolve_model_path
    from mialab.lm.engine import rollout_generator

    assert validated(default_config())["calibdcd"]["detectors"]["veilprobe"]["continuations"] == 3
    texts = pd.DataFrame({"id": ["a", "b", "c"], "text": ["the cat walks over the hill today",
                                                          "a queen sings of love and war", "line 7: the bird walks"]})
    texts["query"] = texts["text"]
    texts["perturbed_query"] = ["the dog walks over the hill today", "a king sings of love and war",
                                "line 9: the bird walks"]
    engine = rollout_generator(tiny_model)
    run = extract_features(texts, [ORIGINAL], generate=engine, lm_options=LM,
                           detectors={"veilprobe": {"max_new_tokens": 6, "temperature": 0.9, "continuations": 3}})
    gens = run.generations
    assert len(gens) == 3 * 2 * 3 and gens["sample"].tolist() == [0, 1, 2] * 6
    distinct = gens.groupby(["input", "id"])["output"].nunique()
    assert (distinct == 3).all(), distinct                        # three samples of one prompt, not one text thrice
    again = extract_features(texts, [ORIGINAL], generate=engine, lm_options=LM,
                             detectors={"veilprobe": {"max_new_tokens": 6, "temperature": 0.9, "continuations": 3}})
    pd.testing.assert_frame_equal(again.generations, gens)        # seeded: the same samples
    tables = veilprobe_tables(gens, ["a"], ["cue_answer"], tokenizer=resolve_model_path(), mapping=tiny_mapping(epochs=1),
                              folders={c: str(tmp_path / c) for c in ("query", "perturbed_query")})
    assert {k: v["pairs"] for k, v in tables.logs.items()} == {"query": 9, "perturbed_query": 9}
    assert tables.original["id"].tolist() == ["a", "b", "c"]     # one feature row per text


def test_veilprobe_tables_train_on_the_original_query_and_read_every_scopes_queries(tmp_path):
    from mialab.calibdcd.features import veilprobe_vector
    from conftest import tiny_mapping

    from mialab.calibdcd.mapping import mapping_features
    from mialab.lm.embeddings import resolve_model_path

    ids, prefixes = ["a", "b", "c"], ["the cat walks over", "a queen sings of", "line 7: the bird"]
    perturbed = ["the dog walks over", "a king sings of", "line 9: the bird"]
    rows = [("veilprobe", ORIGINAL, i, col, t, t, f"out {t}") for col, texts in (("query", prefixes),
            ("perturbed_query", perturbed)) for i, t in zip(ids, texts)]
    rows.append(("dpdllm", ORIGINAL, "a", "prefix", prefixes[0], prefixes[0], "not a VeilProbe pair"))
    gens = pd.DataFrame(rows, columns=["detector", "view", "id", "input", "text", "prompt", "output"])
    cfg = tiny_mapping(epochs=1)
    folders = {c: str(tmp_path / c) for c in ("query", "perturbed_query")}
    views = ["cue_answer", "tiny_chat"]
    run = veilprobe_tables(gens, ["c", "a"], views, tokenizer=resolve_model_path(), mapping=cfg, folders=folders)
    assert {k: v["pairs"] for k, v in run.logs.items()} == {"query": 3, "perturbed_query": 3}
    assert run.original["id"].tolist() == ids and set(run.original["view"]) == {ORIGINAL}
    assert run.views[["view", "id"]].values.tolist() == [[v, i] for v in views for i in ("c", "a")]
    z = mapping_features(folders["query"], apply_view("tiny_chat", [prefixes[2], prefixes[0]]))
    zp = mapping_features(folders["perturbed_query"], apply_view("tiny_chat", [perturbed[2], perturbed[0]]))
    got = run.views[run.views["view"] == "tiny_chat"].filter(like="z").to_numpy()
    np.testing.assert_allclose(got, veilprobe_vector(z, zp), atol=1e-5)
    again = veilprobe_tables(gens, ["c", "a"], views, tokenizer=resolve_model_path(), mapping=cfg,
                             folders={c: str(tmp_path / f"again-{c}") for c in folders})
    pd.testing.assert_frame_equal(again.original, run.original)             # seeded: the same features
    with pytest.raises(ValueError, match="no original-query generation"):
        veilprobe_tables(gens, ["zz"], views, tokenizer=resolve_model_path(), mapping=cfg, folders=folders)


def test_mapping_vocab_size_trains_one_uncased_vocabulary_on_the_pairs_texts(tmp_path):
    """``mapping.vocab_size``: both mapping models read one uncased WordPiece vocabulary of at most that size,
    trained on every text and output of their pairs (no label read), the same in a second run, and the
    models' size (the cost model's) follows it."""
    import json
    from pathlib import Path

    from conftest import VERSE, tiny_mapping
    from transformers import AutoTokenizer

    from mialab.calibdcd.cost import mapping_params_b
    from mialab.lm.embeddings import resolve_model_path

    ids = [f"t{i}" for i in range(40)]
    rows = [("veilprobe", ORIGINAL, i, col, t if col == "query" else t.replace("the", "a"), t, f"Out {t[::-1]}")
            for col in ("query", "perturbed_query") for i, t in zip(ids, VERSE)]
    gens = pd.DataFrame(rows, columns=["detector", "view", "id", "input", "text", "prompt", "output"])
    cfg = tiny_mapping(epochs=1)
    runs = []
    for name in ("one", "two"):
        folders = {c: str(tmp_path / name / c) for c in ("query", "perturbed_query")}
        runs.append(veilprobe_tables(gens, ids[:4], ["cue_answer"], tokenizer=resolve_model_path(), mapping=cfg,
                                     folders=folders, vocab_size=200))
        toks = [AutoTokenizer.from_pretrained(f) for f in folders.values()]
        assert toks[0].get_vocab() == toks[1].get_vocab() and len(toks[0]) <= 200 + 5    # + BERT's special tokens
        assert toks[0].tokenize("Walks OVER the Hill") == toks[0].tokenize("walks over the hill")
        assert toks[0].tokenize("the king walks over the hill") == "the king walks over the hill".split()
        config = json.loads((Path(folders["query"]) / "config.json").read_text())
        assert config["encoder"]["vocab_size"] == len(toks[0])
    pd.testing.assert_frame_equal(runs[0].original, runs[1].original)
    pd.testing.assert_frame_equal(runs[0].views, runs[1].views)
    shape = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 1, "max_length": 32}
    assert mapping_params_b({**shape, "vocab_size": None}) == mapping_params_b(shape)
    assert mapping_params_b({**shape, "vocab_size": 4096}) < mapping_params_b(shape) / 4


# --- calibration -------------------------------------------------------------------------------------

def feature_world(seed: int = 0, d: int = 6):
    """Original-query features of 60 supervised, 40 D-cal and 50 evaluation texts; D-cal under 10 views
    pushed along a planted direction (mirrors tests/test_calibdcd.py's planted world)."""
    rng = np.random.default_rng(seed)
    shift = np.zeros(d)
    shift[1:3] = 1 / np.sqrt(2)
    ids = {"sup": [f"s{i}" for i in range(60)], "cal": [f"c{i}" for i in range(40)], "ev": [f"e{i}" for i in range(50)]}
    y_sup = np.tile([0, 1], 30)
    z_sup = rng.normal(size=(60, d)) + 1.5 * y_sup[:, None] * np.eye(d)[0] + y_sup[:, None] * shift
    z_cal = rng.normal(size=(40, d)) + shift
    z_ev = rng.normal(size=(50, d)) + 1.5 * rng.integers(0, 2, 50)[:, None] * np.eye(d)[0] + shift
    original = pd.concat([feature_frame(ids["sup"], ORIGINAL, z_sup), feature_frame(ids["cal"], ORIGINAL, z_cal),
                          feature_frame(ids["ev"], ORIGINAL, z_ev)], ignore_index=True)
    views = pd.concat([feature_frame(ids["cal"], f"view{k}", z_cal + rng.uniform(0.5, 1.5) * shift
                                     + 0.2 * rng.normal(size=(40, d))) for k in range(10)], ignore_index=True)
    return original, views, pd.DataFrame({"id": ids["sup"], "label": y_sup}), ids


def test_calibrate_variants_gives_one_column_per_variant_equal_to_the_single_runs():
    original, views, sup, ids = feature_world()
    variants = list(VARIANTS)
    run = calibrate_variants(original, views, sup, ids["cal"], ids["ev"], detector="dpdllm", variants=variants,
                             tau=0.95, tolerance=0.005, seed=3)
    assert list(run.scores.columns) == ["id", score_column("dpdllm", "original")] + [score_column("dpdllm", v) for v in variants]
    assert run.scores["id"].tolist() == ids["ev"] and "label" not in run.scores.columns
    cal = pd.concat([original[original["id"].isin(ids["cal"])], views], ignore_index=True)
    for v in ("calibdcd", "top1", "fixed_r3_l09"):
        single = run_calibdcd(original[original["id"].isin(ids["sup"])], sup, cal, original[original["id"].isin(ids["ev"])],
                              detector="dpdllm", variant=v, tau=0.95, tolerance=0.005, seed=3)
        np.testing.assert_array_equal(run.scores[score_column("dpdllm", v)], single.scores["score_calibrated"])
        np.testing.assert_array_equal(run.scores[score_column("dpdllm", "original")], single.scores["score_original"])
    assert set(run.views["variant"]) == set(variants) and run.views.groupby("variant").size().eq(10).all()
    assert run.objective.groupby("variant")["selected"].sum().le(1).all()
    assert run.summaries["fixed_r3_l09"]["rank"] == 3 and run.summaries["fixed_r3_l09"]["lam"] == 0.9


def test_labels_join_only_after_scoring_and_must_cover_the_same_ids():
    scores = pd.DataFrame({"id": ["b", "a"], "calibdcd/dpdllm/original": [0.2, 0.9]})
    split = pd.DataFrame({"id": ["a", "b"], "label": [1, 0], "text": ["x", "y"]})
    out = attach_labels(scores, split)
    assert out.columns.tolist() == ["id", "label", "calibdcd/dpdllm/original"]
    assert out["label"].tolist() == [0, 1]
    with pytest.raises(ValueError, match="other ids"):
        attach_labels(scores, split.iloc[:1])


# --- report tables on hand-made numbers -----------------------------------------------------------------

def per_seed_frame() -> pd.DataFrame:
    """Two seeds of one setting: AUC / TPR by variant (fractions)."""
    rows = []
    auc = {"original": (0.60, 0.70), "calibdcd": (0.70, 0.80), "random3": (0.65, 0.75), "full_correction": (0.50, 0.80)}
    for variant, values in auc.items():
        for seed, a in zip((0, 1), values):
            rows.append({"dataset": "wiki", "model": "chat", "seed": seed, "method": f"calibdcd/veilprobe/{variant}",
                         "auroc": a, "tpr@5%fpr": a / 2})
    rows.append({"dataset": "wiki", "model": "chat", "seed": 0, "method": "loss", "auroc": 0.5, "tpr@5%fpr": 0.1})
    return pd.DataFrame(rows)


def summaries_frame() -> pd.DataFrame:
    rows = []
    for seed, lam, flagged, recovered in ((0, 0.8, 4, 1), (1, 1.0, 0, 0)):
        rec = {"view": "cue_answer", "flagged": flagged, "recovered": recovered, "recovery_rate": None}
        base = {"kept_views": ["cue_answer"], "rank": 3, "lam": lam, "basis_dim": 1, "n_supervised": 48,
                "n_calibration": 32, "n_pool": 128, "recovery": rec}
        rows += run_rows({"dataset": "wiki", "model": "chat", "detector": "veilprobe", "seed": seed,
                          "variants": {"calibdcd": base, "random3": base}})
    return pd.DataFrame(rows)


def test_main_results_table_on_hand_numbers():
    per_seed = per_seed_frame()
    table = main_results(per_seed, "auroc")
    assert table.index.tolist() == ["VeilProbe", "VeilProbe + CalibDCD"] and table.columns.tolist() == ["wiki / chat"]
    assert table.loc["VeilProbe", "wiki / chat"] == "65.0 ± 7.1"           # mean 0.65, std(0.6, 0.7) = 0.0707
    assert table.loc["VeilProbe + CalibDCD", "wiki / chat"] == "75.0 ± 7.1"
    long = main_results_long(per_seed, ["auroc", "tpr@5%fpr"]).iloc[0]
    assert long["auroc_gain"] == pytest.approx(0.10) and long["tpr@5%fpr_gain"] == pytest.approx(0.05)
    assert long["n_seeds"] == 2
    assert "| VeilProbe | 65.0 ± 7.1 |" in markdown(table, index=True)


def test_detectors_beside_min_k_plus_plus_on_hand_numbers():
    per_seed = pd.concat([per_seed_frame(), pd.DataFrame(
        [{"dataset": "wiki", "model": "chat", "seed": s, "method": "min_k_plus_plus@0.2", "auroc": a, "tpr@5%fpr": 0.3}
         for s, a in ((0, 0.80), (1, 0.84))])], ignore_index=True)
    table = beside_baselines(per_seed, "auroc", ["min_k_plus_plus@0.2"])
    assert table.columns.tolist() == ["VeilProbe", "min_k_plus_plus@0.2"] and table.index.tolist() == ["wiki / chat"]
    assert table.loc["wiki / chat", "VeilProbe"] == "65.0 ± 7.1"            # the uncalibrated detector only
    assert table.loc["wiki / chat", "min_k_plus_plus@0.2"] == "82.0 ± 2.8"
    with pytest.raises(ValueError, match="no uncalibrated detector"):
        beside_baselines(per_seed[per_seed["method"] == "loss"], "auroc", ["min_k_plus_plus@0.2"])


def test_ablation_rows_compare_on_the_same_runs():
    table = ablations(per_seed_frame(), summaries_frame(), ["auroc", "tpr@5%fpr"]).set_index("configuration")
    assert table.loc["CalibDCD", "n"] == 2 and table.loc["CalibDCD", "auroc"] == pytest.approx(0.75)
    assert table.loc["Random-3 Views", "auroc_change"] == pytest.approx(-0.05)
    # lambda < 1 only in seed 0: CalibDCD 0.70 there, full correction 0.50
    assert table.loc["CalibDCD (λ<1)", "n"] == 1 and table.loc["CalibDCD (λ<1)", "auroc"] == pytest.approx(0.70)
    assert table.loc["Fixed Full Correction", "auroc_change"] == pytest.approx(-0.20)
    assert table.loc["Original detector", "auroc_change"] == pytest.approx(-0.10)
    assert "Top-1 View" not in table.index                                  # only the variants that ran


def test_recovery_sums_over_seeds_and_leaves_nothing_flagged_empty():
    table = recovery(summaries_frame())
    assert len(table) == 3                                                  # setting, detector total, overall
    row = table.iloc[0]
    assert (row["flagged"], row["recovered"], row["runs"]) == (4, 1, 2) and row["recovery_rate"] == 0.25
    assert table.iloc[-1]["detector"] == "all"
    empty = recovery(summaries_frame().assign(flagged=0, recovered=0))
    assert empty["recovery_rate"].isna().all()


def test_the_paper_report_sets_the_paper_targets_beside_the_run():
    """paper_report's Reproduction section: the config's targets its score tables hold (the detectors' and the
    baselines'), the same rows as the evaluation's; a target of another method or pair is left to its report."""
    from mialab.calibdcd.report import paper_report
    from mialab.evaluation.reproduction import reproduction_rows
    from mialab.evaluation.stage import merge_tables

    rng = np.random.default_rng(2)
    y = np.r_[np.ones(10, int), np.zeros(10, int)]
    scores, baselines, summaries, views = [], [], [], []
    for seed in (0, 1):
        ids = [f"w{seed}-{i}" for i in range(20)]
        scores.append(("chat", "wiki", seed, pd.DataFrame({"id": ids, "label": y, **{
            f"calibdcd/veilprobe/{v}": rng.normal(size=20) + y for v in ("original", "calibdcd", "random3")}})))
        baselines.append(("chat", "wiki", seed, pd.DataFrame({"id": ids, "label": y, "n_tokens": 9,
                                                               "min_k_plus_plus@0.2": rng.normal(size=20) + 2 * y})))
        rec = {"view": "cue_answer", "flagged": 2, "recovered": 1, "recovery_rate": 0.5}
        base = {"kept_views": ["cue_answer"], "rank": 3, "lam": 0.8, "basis_dim": 1, "n_supervised": 20,
                "n_calibration": 4, "n_pool": 40, "recovery": rec}
        summaries.append({"dataset": "wiki", "model": "chat", "detector": "veilprobe", "seed": seed,
                          "variants": {"calibdcd": base, "random3": base}})
        views.append(pd.DataFrame({"variant": "calibdcd", "view": ["cue_answer"], "fpp": [0.1], "kept": [True],
                                   "model": "chat", "dataset": "wiki", "detector": "veilprobe", "seed": seed}))
    target = {"method": "calibdcd/veilprobe/calibdcd", "dataset": "wiki", "model": "chat", "metric": "tpr@5%fpr",
              "value": 81.6, "source": {"paper": "CalibDCD", "table": "Table 3", "row": "VeilProbe + CalibDCD"}}
    others = [{**target, "method": "min_k_plus_plus@0.2", "metric": "auroc", "value": "not in the extracted text"},
              {**target, "model": "base"}, {**target, "method": "lara"}]
    boot = {"resamples": 200, "level": 0.95, "seed": 0}
    views = pd.concat(views, ignore_index=True)
    report = paper_report(scores, summaries, views, fpr_targets=[0.01], bootstrap=boot, paper_targets=[target, *others],
                          baselines=baselines, baseline_methods=["min_k_plus_plus@0.2"])
    section = report["markdown"].split("## Reproduction", 1)[1].split("\n## ", 1)[0]
    rows = reproduction_rows([target, others[0]], merge_tables([*scores, *baselines]), boot)
    lines = [line for line in section.splitlines() if line.startswith("| wiki / chat")]
    run = f"{rows['run'][0]:.1f} [{rows['run_lo'][0]:.1f}, "
    assert len(lines) == 2
    assert lines[0].startswith(f"| wiki / chat | `calibdcd/veilprobe/calibdcd` | `tpr@5%fpr` | 81.6 | {run}")
    assert "| `min_k_plus_plus@0.2` | `auroc` | not in the extracted text |" in lines[1]
    assert "Reproduction" not in paper_report(scores, summaries, views, fpr_targets=[0.01], bootstrap=boot,
                                              baselines=baselines)["markdown"]


# --- stage keys --------------------------------------------------------------------------------------

def validated(cfg: dict) -> dict:
    from snakemake.utils import validate

    cfg = copy.deepcopy(cfg)
    validate(cfg, str(REPO / "schemas" / "config.schema.yaml"))
    return cfg


def test_original_features_are_shared_by_seeds_and_survive_split_and_partition_changes():
    a = CalibDCDPlan(Plan(validated(default_config())), validated(default_config()))
    cfg = default_config()
    cfg["seeds"] = [0, 1, 2, 3, 4]
    cfg["datasets"]["wikimia"]["split"]["n_per_class"] = 48
    cfg["calibdcd"]["partition"]["n_calibration"] = 40
    cfg = validated(cfg)
    b = CalibDCDPlan(Plan(cfg), cfg)
    assert a.features("chat", "wikimia", "original").key == b.features("chat", "wikimia", "original").key
    assert a.features("chat", "wikimia", VIEWS_SCOPE).key != b.features("chat", "wikimia", VIEWS_SCOPE).key
    assert a.features("base", "wikimia", "original").key != a.features("chat", "wikimia", "original").key
    assert a.views("chat", VIEWS_SCOPE) == controlled_views("tiny") and a.views("chat", "original") == [ORIGINAL]
    with pytest.raises(ValueError, match="unknown feature scope 'views-seed-0'; known: original, views"):
        a.views("chat", "views-seed-0")
    cfg = validated(default_config())
    cfg["calibdcd"]["variants"] = ["calibdcd"]
    c = CalibDCDPlan(Plan(cfg), cfg)
    assert c.scores("chat", "wikimia", "dpdllm", 0).key != a.scores("chat", "wikimia", "dpdllm", 0).key
    assert c.features("chat", "wikimia", VIEWS_SCOPE).key == a.features("chat", "wikimia", VIEWS_SCOPE).key
    # one calibration job per (model, dataset); a (detector, seed)'s tables in their own folder
    run = a.score_run("chat", "wikimia")
    assert a.scores("chat", "wikimia", "veilprobe", 1).dir == f"{run.dir}/veilprobe/seed-1"
    assert a.scores("chat", "wikimia", "dpdllm", 0).key == run.key
    with pytest.raises(KeyError, match="detector 'nope' is not calibrated"):
        a.scores("chat", "wikimia", "nope", 0)
    assert a.lm_models() == ["control"] and a.lm_path("gpt2") == "gpt2"
    assert a.pairs() == [("base", "wikimia"), ("chat", "wikimia")]


def test_dpdllm_reference_is_fine_tuned_once_per_pool_and_keys_the_features():
    cfg = validated(default_config())
    a = CalibDCDPlan(Plan(cfg), cfg)
    ref = a.reference("wikimia")
    finetune = cfg["calibdcd"]["detectors"]["dpdllm"]["finetune"]
    assert ref.manifest["base"]["model"] == "control" and ref.manifest["finetune"]["epochs"] == finetune["epochs"]
    specs = a.detector_specs(a.lm_path, "wikimia")
    assert specs["dpdllm"]["reference_model"] == ref.path("model") and "finetune" not in specs["dpdllm"]
    assert specs["dpdllm"]["temperature"] == 0.7                               # DPDLLM's code samples at 0.7
    assert specs["veilprobe"]["max_new_tokens"] == cfg["calibdcd"]["generation"]["max_new_tokens"]
    more = default_config()
    more["seeds"] = [0, 1, 2, 3]
    more = validated(more)
    assert CalibDCDPlan(Plan(more), more).reference("wikimia").key == ref.key   # seeds do not matter
    longer = default_config()
    longer["calibdcd"]["detectors"]["dpdllm"]["finetune"]["epochs"] = 3
    longer = validated(longer)
    b = CalibDCDPlan(Plan(longer), longer)
    assert b.reference("wikimia").key != ref.key
    assert b.features("base", "wikimia", "original").key != a.features("base", "wikimia", "original").key
    assert b.partition("wikimia", 0).key == a.partition("wikimia", 0).key
    wider = default_config()
    wider["calibdcd"]["detectors"]["veilprobe"]["mapping"]["hidden_size"] = 16
    wider = validated(wider)
    c = CalibDCDPlan(Plan(wider), wider)
    assert c.veilprobe("chat", "wikimia").key != a.veilprobe("chat", "wikimia").key   # the mapping models' own stage
    assert c.features("chat", "wikimia", "original").key == a.features("chat", "wikimia", "original").key
    assert c.score_run("chat", "wikimia").key != a.score_run("chat", "wikimia").key
    assert "veilprobe" not in a.detector_specs(a.lm_path, "wikimia", VIEWS_SCOPE)      # reads the views' queries only
    assert a.detector_specs(a.lm_path, "wikimia")["veilprobe"]["temperature"] == 0.2  # VeilProbe's code
    paper = validated(yaml.safe_load((REPO / "configs/paper/calibdcd_instruct_models.yaml").read_text()))
    assert paper["calibdcd"]["detectors"]["dpdllm"]["finetune"] == {"epochs": 15, "batch_size": 4, "lr": 5e-5, "seed": 0}


def test_veilprobe_key_token_models_and_mlm_model_are_resolved_models():
    paper = validated(yaml.safe_load((REPO / "configs/paper/calibdcd_instruct_models.yaml").read_text()))
    vp = paper["calibdcd"]["detectors"]["veilprobe"]
    assert vp["perturbation"] == "original" and vp["mlm_model"] == "google-bert/bert-base-cased"
    a = CalibDCDPlan(Plan(paper), paper)
    assert a.lm_models(("key_token_models", "mlm_model")) == ["gpt2_reference", "gpt2_medium", "gpt2_large"]
    key = a.perturbation("wikimia").manifest["config"]      # once per pool: every target's features read it
    assert key["key_token_models"] == [a.lm_key(m) for m in ("gpt2_reference", "gpt2_medium", "gpt2_large")]
    assert key["mlm_model"] == {"path": "google-bert/bert-base-cased"} and "key_token_model" not in key
    assert key["perturbation"] == "original" and key["beams"] == key["new_tokens"] == 10
    targets = [m for m in paper["calibdcd"]["models"]]
    for m in targets:
        features = a.features(m, "wikimia", "original").manifest
        assert features["upstream"]["perturbation"] == a.perturbation("wikimia").key
        assert set(features["config"]["detectors"]["veilprobe"]) == {"temperature", "max_new_tokens", "continuations"}
    assert "perturbation" not in a.features(targets[0], "wikimia", VIEWS_SCOPE).manifest["upstream"]
    assert a.perturbation("wikimia").key != a.perturbation("bookmia").key
    options = a.perturbation_settings(a.lm_path)
    assert options["key_token_models"] == [a.plan.model_path(m) for m in ("gpt2_reference", "gpt2_medium", "gpt2_large")]
    assert options["mlm_model"] == "google-bert/bert-base-cased"
    # a configured fill-mask model: its folder is a job input and its model key in the stage key
    cfg = default_config()
    cfg["calibdcd"]["detectors"]["veilprobe"].update(perturbation="original", mlm_model="base")
    cfg = validated(cfg)
    b = CalibDCDPlan(Plan(cfg), cfg)
    assert b.lm_models(("key_token_model", "key_token_models", "mlm_model")) == ["control", "base"]
    mlm = b.perturbation("wikimia").manifest["config"]["mlm_model"]
    assert mlm == {"model": "base", "key": b.plan.model("base").key}
    assert b.features("chat", "wikimia", "original").key != CalibDCDPlan(Plan(validated(default_config())),
                                                                        validated(default_config())).features(
        "chat", "wikimia", "original").key    # through the perturbation's key
    tiny = validated(default_config())     # the tiny world: one key-token model, surprisal
    assert perturbation_options(tiny["calibdcd"]["detectors"]["veilprobe"]) == {
        "key_token_models": ["control"], "query": "text", "ratio": 0.15, "perturbation": "surprisal", "beams": 10,
        "new_tokens": 10, "seed": 0}
    for change, message in (({"key_token_models": ["control"]}, "name the key-token models once"),
                            ({"perturbation": "original"}, "perturbation original needs an mlm_model"),
                            ({"key_token_model": None, "key_token_models": ["control", "base"]},
                             "perturbation surprisal reads one key-token model")):
        bad = default_config()
        bad["calibdcd"]["detectors"]["veilprobe"].update(change)
        bad["calibdcd"]["detectors"]["veilprobe"] = {k: v for k, v in bad["calibdcd"]["detectors"]["veilprobe"].items()
                                                     if v is not None}
        bad = validated(bad)
        with pytest.raises(ConfigError, match=message):
            CalibDCDPlan(Plan(bad), bad)


def test_unknown_calibdcd_model_is_named():
    cfg = validated(default_config())
    cfg["calibdcd"]["models"]["nope"] = {"family": "tiny"}
    with pytest.raises(ConfigError, match="calibdcd.models: unknown model 'nope'"):
        CalibDCDPlan(Plan(cfg), cfg)


# --- chat post-training (sft kind, format: chat) ---------------------------------------------------------

def test_chat_pairs_render_with_the_template_and_cap_only_the_answer(tmp_path):
    from mialab.lm.tiny import train_tokenizer
    from mialab.training.sft import build_post_training_corpus, read_chat_pairs, render_chat

    table = tmp_path / "qa.jsonl"
    pd.DataFrame({"q": ["What is  two plus two?", "Name a colour please now"], "a": ["It is four, of course.", "Red."],
                  "year": [1990, 2020]}).to_json(table, orient="records", lines=True)
    pairs = read_chat_pairs({"source": str(table), "columns": ["q", "a"], "where": [{"column": "year", "op": "<", "value": 2000}], "max_words": 2})
    assert pairs == [("What is two plus two?", "It is")]
    tok = train_tokenizer(["What is two plus two? It is four."] * 10, vocab_size=300)
    assert render_chat(tok, pairs) == ["<|user|>\nWhat is two plus two?</s>\n<|assistant|>\nIt is</s>\n"]
    with pytest.raises(ValueError, match=r"columns \[user, assistant\]"):
        read_chat_pairs({"source": str(table), "columns": ["q"]})
    examples, stats = build_post_training_corpus(["x", "y", "z"], seed=0)
    assert sorted(examples) == ["x", "y", "z"] and stats["contamination_rate"] == 0.0
    assert examples == build_post_training_corpus(["x", "y", "z"], seed=0)[0]


def test_sft_schema_members_optional_but_then_need_a_rate():
    cfg = default_config()
    assert "members" not in cfg["models"]["chat"] and cfg["models"]["chat"]["format"] == "chat"
    validated(cfg)
    del cfg["models"]["sft"]["contamination_rate"]
    with pytest.raises(Exception, match="contamination_rate"):
        validated(cfg)


# --- the DAG -----------------------------------------------------------------------------------------

def test_default_dag_runs_calibdcd_for_both_models_detectors_and_seeds(tmp_path):
    jobs = planned_jobs(make_workdir(tmp_path))
    # partitions: 2 seeds; DPDLLM's reference: one per pool; features: 2 models x (original + every seed's
    # views); calibration: one job per model for its 2 detectors x 2 seeds
    assert (jobs["calibdcd_partition"], jobs["calibdcd_features"], jobs["calibdcd_calibrate"]) == (2, 4, 2)
    assert jobs["calibdcd_reference"] == 1 and jobs["calibdcd_veilprobe"] == 2        # VeilProbe: one per model
    assert jobs["calibdcd_perturbation"] == 1                  # its perturbed prompts: once per pool, for both models
    assert jobs["calibdcd_report"] == 1
    out = snakemake(tmp_path, "-n", "calibdcd").stdout
    assert "results/splits/aime" not in out                  # CalibDCD's pairs only; their baselines for the report
    assert job_stats(out)["score_baselines"] == 3          # base, chat, and control (base's R-Loss reference)
    assert "results/scores/" in out.split("rule calibdcd_report:", 1)[1].split("output:", 1)[0]


def test_no_calibdcd_section_means_no_calibdcd_job(tmp_path):
    cfg = default_config()
    del cfg["calibdcd"]
    jobs = planned_jobs(make_workdir(tmp_path, cfg))
    assert not any(rule.startswith("calibdcd") for rule in jobs)


# --- slow: the suite's world end to end (the session's shared run) --------------------------------------

@pytest.mark.slow
def test_world_outputs_schemas_and_results_table(suite_world):
    r = suite_world / "results"
    cfg = suite_world_config()["calibdcd"]
    n_seeds, variants = len(suite_world_config()["seeds"]), list(VARIANTS)
    for det in ("dpdllm", "veilprobe"):
        scores = pd.read_parquet(next(r.glob(f"calibdcd/scores/chat/wikimia/*/{det}/seed-0/scores.parquet")))
        assert scores.columns.tolist() == ["id", "label", f"calibdcd/{det}/original", *[f"calibdcd/{det}/{v}" for v in variants]]
        n = suite_world_config()["datasets"]["wikimia"]["split"]["n_per_class"]
        assert len(scores) == 2 * n and scores["label"].sum() == n
        assert np.isfinite(scores.iloc[:, 2:].to_numpy()).all()
    original = pd.read_parquet(next(r.glob("calibdcd/veilprobe/chat/wikimia/*/features-original.parquet")))
    pool = pd.read_parquet(REPO / "resources/data/wikimia/WikiMIA_length64.parquet")
    assert len(original) == len(pool) and set(original["view"]) == {ORIGINAL}    # every pool text, e0 only
    views = pd.read_parquet(next(r.glob("calibdcd/features/chat/wikimia/views/*/features-dpdllm.parquet")))
    d_cal = {i for p in r.glob("calibdcd/partitions/wikimia/seed-*/*/calibration.parquet")
             for i in pd.read_parquet(p)["id"].astype(str)}                # every seed's D-cal, each text once
    assert len(d_cal) >= cfg["partition"]["n_calibration"]
    assert views.groupby("view").size().to_dict() == {v: len(d_cal) for v in controlled_views("tiny")}
    vp_views = pd.read_parquet(next(r.glob("calibdcd/veilprobe/chat/wikimia/*/features-views.parquet")))
    assert vp_views.groupby("view").size().to_dict() == {v: len(d_cal) for v in controlled_views("tiny")}
    summary = pd.read_parquet(r / "evaluation/summary.parquet")
    methods = set(summary.loc[summary["model"] == "chat", "method"])
    assert {f"calibdcd/{d}/{v}" for d in ("dpdllm", "veilprobe") for v in ["original", *variants]} <= methods
    assert "loss" in methods
    report = (r / "calibdcd/report.md").read_text()
    for heading in ("Main results: AUC", "TPR@5%FPR", "Ablations", "False-positive recovery"):
        assert heading in report
    abl = pd.read_csv(r / "calibdcd/ablations.csv")
    assert abl.loc[abl["variant"] == "calibdcd", "n"].iloc[0] == 2 * 2 * n_seeds     # models x detectors x seeds
    assert set(abl["variant"]) == {*variants, "original"}
    main = pd.read_csv(r / "calibdcd/main.csv")
    assert len(main) == 4 and main["n_seeds"].eq(n_seeds).all()


@pytest.mark.slow
def test_calibration_reads_no_evaluation_label(shuffled_world):
    """seed 0's wikimia split with permuted labels: every calibrated score is unchanged, and the
    evaluation (the scores' label column) sees the new labels."""
    for target, before in shuffled_world["before"].items():
        if "/calibdcd/" not in target:
            continue
        after = pd.read_parquet(shuffled_world["workdir"] / target)
        pd.testing.assert_frame_equal(after.drop(columns="label"), before.drop(columns="label"))
        labels = after.merge(shuffled_world["splits"]["wikimia"][["id", "label"]], on="id", suffixes=("", "_split"))
        assert len(labels) == len(after) and (labels["label"] == labels["label_split"]).all()
