"""The leakage / shift checks and the paraphrased setting as workflow stages (rules/leakage.smk,
rules/paraphrase.smk): planned for every split, real runs of the cheap rules on WikiMIA rows in a
scratch directory, a planted duplicate failing its split's job, keys and report tables.

The blind baseline separating a shifted split and not a random one is tested on the package
function in tests/test_leakage.py (test_blind_baseline_separates_*, ..._does_not_separate_...).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from snakemake.utils import validate
from workflow_helpers import (
    REPO,
    default_config,
    foundation_config,
    make_workdir,
    planned_jobs,
    snakemake,
    validated,
    write_config,
)

from mialab.checks import leakage
from mialab.data.paraphrase_experiments import APPLY_TO, EXPERIMENTS
from mialab.data.registry import get_family
from mialab.data.sampling import sample_split
from mialab.pipeline.plan import PARAPHRASE_EXPERIMENTS, Plan

WIKIMIA = REPO / "resources" / "data" / "wikimia" / "WikiMIA_length64.parquet"
# the model-free jobs run one at a time, each on one thread (this machine is shared)
RUN = ("--cores", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def tiny_config(datasets: dict, seeds=(0,)) -> dict:
    """Foundation config with only ``datasets`` (no model trains on them) and the given seeds."""
    cfg = foundation_config()
    cfg["seeds"] = list(seeds)
    cfg["datasets"] = datasets
    cfg["models"] = {"control": cfg["models"]["control"]}
    return cfg


def wikimia_entry(n: int, **extra) -> dict:
    entry = copy.deepcopy(default_config()["datasets"]["wikimia"])
    entry["split"]["n_per_class"] = n
    return {**entry, **extra}


def one(folder: Path, pattern: str) -> Path:
    (path,) = folder.glob(pattern)
    return path


# --- the DAG --------------------------------------------------------------------------------------

def test_leakage_checks_are_planned_for_every_split_of_the_default_config(tmp_path):
    cfg = default_config()
    wd = make_workdir(tmp_path, cfg)
    cfg = validated(cfg)   # the plan as the workflow builds it: schema defaults filled in
    out = snakemake(wd, "-n").stdout
    jobs = planned_jobs(wd)
    assert jobs["leakage_check"] == len(cfg["datasets"]) and jobs["leakage_summary"] == 1   # one job: every seed
    assert "paraphrase" not in jobs and "paraphrase_pool" not in jobs   # no dataset asks for it
    plan = Plan(cfg)
    for ds in cfg["datasets"]:
        for seed in cfg["seeds"]:
            st = plan.leakage(ds, seed)
            assert st.dir in out and st.manifest["upstream"]["splits"][str(seed)] == plan.split(ds, seed).key
    assert "results/leakage/summary.md" in out
    # the per-dataset target checks that dataset's splits, nothing of the others
    out = snakemake(wd, "-n", "dataset_aime").stdout
    assert plan.leakage("aime", 1).dir in out and "results/leakage/wikimia/" not in out


def test_paraphrase_rule_is_planned_when_a_dataset_asks_for_it(tmp_path):
    cfg = foundation_config()
    cfg["datasets"]["wikimia"]["paraphrase"] = {"backend": "offline"}
    wd = make_workdir(tmp_path, cfg)
    jobs = planned_jobs(wd)
    assert jobs["paraphrase"] == len(cfg["seeds"]) and jobs["build_split"] == 2 * len(cfg["seeds"])
    assert jobs["leakage_check"] == 2 and "paraphrase_pool" not in jobs
    out = snakemake(wd, "-n").stdout
    plan = Plan(validated(cfg))  # the schema's defaults (the pool's prefix_rounding) are in the keys
    para = plan.paraphrased_split("wikimia", 0)
    assert para.dir.startswith("results/paraphrases/wikimia/seed-0/") and para.dir in out
    # the attacks and the checks read the paraphrased split, the other dataset its own split
    assert plan.scores("base", "wikimia", 0).manifest["upstream"]["splits"]["0"] == para.key
    assert plan.leakage("wikimia", 0).manifest["upstream"]["splits"]["0"] == para.key
    assert plan.leakage("aime", 0).manifest["upstream"]["splits"]["0"] == plan.split("aime", 0).key
    # the training setting: base trains on the paraphrased members; the attacks read the original split
    cfg["datasets"]["wikimia"]["paraphrase"]["apply_to"] = "training"
    write_config(wd, cfg)
    jobs = planned_jobs(wd)
    assert jobs["paraphrase_pool"] == 1 and "paraphrase" not in jobs
    out = snakemake(wd, "-n").stdout
    pool = Plan(cfg).member_pool("wikimia").path("pool.parquet")
    assert pool.startswith("results/paraphrases/wikimia/pool/")
    (pretrain,) = [block for block in out.split("\n\n") if "rule pretrain_model:" in block and "model=base" in block]
    assert pool in pretrain


def test_unknown_leakage_and_paraphrase_keys_are_rejected(tmp_path):
    cfg = foundation_config()
    cfg["leakage"] = {"blind_warning": 0.7}
    wd = make_workdir(tmp_path, cfg)
    proc = snakemake(wd, "-n", check=False)
    assert proc.returncode != 0 and "blind_warning" in proc.stdout + proc.stderr
    cfg = foundation_config()
    cfg["datasets"]["wikimia"]["paraphrase"] = {"backend": "wordnet"}
    write_config(wd, cfg)
    proc = snakemake(wd, "-n", check=False)
    assert proc.returncode != 0 and "wordnet" in proc.stdout + proc.stderr


# --- keys -----------------------------------------------------------------------------------------

def test_keys_of_the_new_stages_follow_only_what_determines_them():
    base = Plan(default_config())
    cfg = default_config()
    cfg["leakage"]["blind_warn"] = 0.7
    other = Plan(cfg)
    assert other.leakage("wikimia", 0).key != base.leakage("wikimia", 0).key
    assert other.split("wikimia", 0).key == base.split("wikimia", 0).key
    assert other.scores("base", "wikimia", 0).key == base.scores("base", "wikimia", 0).key
    # defaults filled in by the schema or not: the same keys
    cfg = default_config()
    cfg["leakage"] = {}
    assert Plan(cfg).leakage("aime", 1).key == Plan({**cfg, "leakage": dict(leakage.DEFAULTS)}).leakage("aime", 1).key
    # the evaluation setting: the split records it, the model does not change, only this dataset's keys do
    cfg = default_config()
    cfg["datasets"]["wikimia"]["paraphrase"] = {"backend": "offline"}
    para = Plan(cfg)
    assert para.split("wikimia", 0).manifest["paraphrase"]["setting"] == {"evaluate": "paraphrased"}
    assert para.split("wikimia", 0).key != base.split("wikimia", 0).key
    assert para.model("base").key == base.model("base").key
    assert para.scores("base", "wikimia", 0).key != base.scores("base", "wikimia", 0).key
    assert para.scores("sft", "aime", 0).key == base.scores("sft", "aime", 0).key
    assert "paraphrase" not in base.split("wikimia", 0).manifest   # verbatim keys are what they were
    # the training setting: models that train on the dataset's members follow the paraphrased pool
    cfg["datasets"]["wikimia"]["paraphrase"]["apply_to"] = "training"
    train = Plan(cfg)
    assert train.member_pool("wikimia").dir.startswith("results/paraphrases/wikimia/pool/")
    assert train.model("base").key != base.model("base").key and train.model("control").key == base.model("control").key
    assert train.split("wikimia", 0).manifest["paraphrase"]["setting"] == {"train": "paraphrased", "evaluate": "original"}
    assert train.evaluated_split("wikimia", 0) == train.split("wikimia", 0)
    # the plan's table of ADRA's semantics is the package's
    for apply_to, exp in PARAPHRASE_EXPERIMENTS.items():
        assert APPLY_TO[apply_to] == exp["experiment"] and EXPERIMENTS[exp["experiment"]] == exp["setting"]


def test_schema_defaults_are_the_package_defaults():
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    props = schema["properties"]["leakage"]["properties"]
    assert {k: v["default"] for k, v in props.items()} == leakage.DEFAULTS
    opts = leakage.leakage_options({"allow_duplicates": ["aime"]}, "aime", ["aime", "wikimia"])
    assert opts["allow_duplicates"] is True
    assert leakage.leakage_options({"allow_duplicates": ["aime"]}, "wikimia", ["aime", "wikimia"])["allow_duplicates"] is False
    with pytest.raises(KeyError, match="unknown dataset"):
        leakage.leakage_options({"allow_duplicates": ["aimee"]}, "aime", ["aime", "wikimia"])


# --- real runs of the cheap rules -----------------------------------------------------------------

def test_leakage_target_writes_a_table_per_split_and_the_summary(tmp_path):
    """The `leakage` target on WikiMIA rows (24 + 24, seed 0): pool, split, check, summary."""
    wd = make_workdir(tmp_path, tiny_config({"wikimia": wikimia_entry(24)}))
    snakemake(wd, *RUN, "leakage")
    r = wd / "results"
    table = pd.read_parquet(one(r, "leakage/wikimia/*/seed-0/leakage.parquet"))
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["dataset"], row["seed"], row["setting"]) == ("wikimia", 0, "original")
    assert (row["n_members"], row["n_nonmembers"]) == (24, 24)
    assert (row["dup_exact"], row["dup_ngram"], row["dup_embedding"]) == (0, 0, 0)
    assert 0.0 <= row["blind_auroc"] <= 1.0 and row["blind_folds"] == 5 and row["blind_warn"] == 0.6
    assert row["members_words_mean"] == pytest.approx(64, abs=1) and row["length_auroc"] == pytest.approx(0.5, abs=0.2)
    folder = one(r, "leakage/wikimia/*/seed-0/leakage.parquet").parent
    manifest = json.loads((folder.parent / "manifest.json").read_text())
    assert manifest["stage"] == "leakage" and manifest["key"] == folder.parent.name and manifest["seeds"] == [0]
    assert manifest["upstream"]["splits"]["0"] == one(r, "splits/wikimia/seed-0/*/split.parquet").parent.name
    details = json.loads((folder / "leakage.json").read_text())
    assert set(details["duplicates"]) == {"exact", "ngram", "embedding"} and details["options"]["embed"]
    md = (r / "leakage/summary.md").read_text()
    assert "| wikimia | 0 | original | 24 | 24 | 0 | 0 / 0 / 0 |" in md
    assert "No split exceeds its blind-baseline or overlap threshold." in md   # a random partition: no shift
    csv = pd.read_csv(r / "leakage/summary.csv")
    assert list(csv["dataset"]) == ["wikimia"] and "blind_auroc" in csv.columns
    assert planned_jobs(wd, "leakage") == {}   # nothing left to do


def test_paraphrase_rule_keeps_ids_and_changes_texts(tmp_path):
    """The offline paraphrase of a WikiMIA split (16 + 16, seed 0), then its (embedding-free) check."""
    cfg = tiny_config({"wikimia_para": wikimia_entry(16, paraphrase={"backend": "offline",
                                                                     "options": {"rate": 0.5, "seed": 0}})})
    cfg["leakage"] = {"embed": False}
    wd = make_workdir(tmp_path, cfg)
    snakemake(wd, *RUN, "leakage")
    r = wd / "results"
    original = pd.read_parquet(one(r, "splits/wikimia_para/seed-0/*/split.parquet"))
    para_file = one(r, "paraphrases/wikimia_para/seed-0/*/split.parquet")
    para = pd.read_parquet(para_file)
    assert para["id"].tolist() == original["id"].tolist() and para["label"].tolist() == original["label"].tolist()
    assert (para["setting"] == "paraphrased").all()
    changed = para["text"] != original["text"]
    assert changed.mean() > 0.3
    assert (para["text"] == para["prefix"] + " " + para["suffix"]).all()
    manifest = json.loads((para_file.parent / "manifest.json").read_text())
    assert manifest["paraphrase"]["setting"] == {"evaluate": "paraphrased"}
    assert manifest["paraphrase"]["n_changed"] == int(changed.sum())
    assert manifest["upstream"]["split"] == one(r, "splits/wikimia_para/seed-0/*/split.parquet").parent.name
    split_manifest = json.loads(one(r, "splits/wikimia_para/seed-0/*/manifest.json").read_text())
    assert split_manifest["paraphrase"]["apply_to"] == "evaluation"
    # the leakage check of that dataset ran on the paraphrased split
    row = pd.read_parquet(one(r, "leakage/wikimia_para/*/seed-0/leakage.parquet")).iloc[0]
    assert row["setting"] == "paraphrased"
    assert "| wikimia_para | 0 | paraphrased | 16 | 16 | 0 | 0 / 0 / n/a |" in (r / "leakage/summary.md").read_text()


def test_training_setting_builds_a_pool_with_paraphrased_members_for_the_training_rules(tmp_path):
    """apply_to: training: paraphrase_pool rewrites the pool's members (non-members, ids and order
    kept) into the pool a contaminating model reads; the evaluated split stays verbatim."""
    entry = wikimia_entry(16, paraphrase={"backend": "offline", "apply_to": "training", "options": {"rate": 0.5, "seed": 0}})
    pd.read_parquet(WIKIMIA).iloc[:64].to_parquet(tmp_path / "wikimia64.parquet")   # a small pool: 32 members
    entry["pool"]["source"] = str(tmp_path / "wikimia64.parquet")
    cfg = tiny_config({"wikimia_train": entry})
    wd = make_workdir(tmp_path, cfg)
    validated = copy.deepcopy(cfg)
    validate(validated, str(REPO / "schemas" / "config.schema.yaml"))       # the workflow's view: defaults filled in
    target = Plan(validated).member_pool("wikimia_train").path("pool.parquet")
    snakemake(wd, *RUN, target)
    r = wd / "results"
    original = pd.read_parquet(one(r, "pools/wikimia_train/*/pool.parquet"))
    para = pd.read_parquet(wd / target)
    assert para["id"].tolist() == original["id"].tolist() and para["label"].tolist() == original["label"].tolist()
    members = original["label"] == 1
    assert (para.loc[~members, "text"] == original.loc[~members, "text"]).all()
    assert (para.loc[members, "text"] != original.loc[members, "text"]).mean() > 0.3
    assert set(para.loc[members, "setting"]) == {"paraphrased"}
    manifest = json.loads((wd / target).with_name("manifest.json").read_text())
    assert manifest["paraphrase"]["setting"] == {"train": "paraphrased", "evaluate": "original"}
    assert not list(r.glob("paraphrases/wikimia_train/seed-*"))        # the evaluated split is not paraphrased


def test_planted_cross_class_duplicate_fails_its_split_and_leaves_nothing(tmp_path):
    raw = pd.read_parquet(WIKIMIA)
    members, nonmembers = raw[raw["label"] == 1].head(12).copy(), raw[raw["label"] == 0].head(12).copy()
    nonmembers.iloc[0, nonmembers.columns.get_loc("input")] = "  " + members["input"].iloc[3].upper() + " "
    source = tmp_path / "planted.parquet"
    pd.concat([members, nonmembers, members.iloc[[5, 7, 5]]]).to_parquet(source, index=False)   # 3 exact repeats
    entry = wikimia_entry(12)
    entry["pool"] = {"family": "wikimia", "source": str(source), "prefix_ratio": 0.5, "membership": {"rule": "label"}}
    cfg = tiny_config({"planted": entry})
    cfg["leakage"] = {"embed": False}   # the exact check is enough here (and needs no encoder)
    wd = make_workdir(tmp_path / "wd", cfg)
    proc = snakemake(wd, *RUN, "leakage", check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "Error in rule leakage_check" in out and "dataset=planted" in out
    log = one(wd / "results/logs/leakage_check/planted", "*.log").read_text()
    pool = pd.read_parquet(one(wd / "results/pools/planted", "*/pool.parquet"))
    assert json.loads(one(wd / "results/pools/planted", "*/manifest.json").read_text())["exact_repeats_dropped"] == 3
    twins = pool[pool["text"].map(leakage.normalise) == leakage.normalise(members["input"].iloc[3])]
    assert sorted(twins["label"]) == [0, 1]
    assert "dataset 'planted' seed 0: cross-class duplicates found" in log and "(exact)" in log
    assert all(i in log for i in twins["id"])
    assert not list((wd / "results").glob("leakage/planted/**/*.*"))   # no table, json or manifest
    assert not (wd / "results/leakage/summary.md").exists()
    # allowed for this dataset: the split passes and the duplicate is reported
    cfg["leakage"]["allow_duplicates"] = ["planted"]
    write_config(wd, cfg)
    snakemake(wd, *RUN, "leakage")
    row = pd.read_parquet(one(wd / "results", "leakage/planted/*/seed-0/leakage.parquet")).iloc[0]
    assert row["dup_exact"] == 1 and row["dup_embedding"] == -1
    assert "| planted | 0 | original | 12 | 12 | 0 | 1 / 1 / n/a |" in (wd / "results/leakage/summary.md").read_text()


# --- the report tables ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def leakage_rows() -> pd.DataFrame:
    pool = get_family("wikimia")({"source": str(WIKIMIA)})   # WikiMIA's own labels: a date shift
    splits = [sample_split(pool, 30, seed=s) for s in (0, 1)]
    rows = [leakage.report_row(leakage.run_check(split, {**leakage.DEFAULTS, "embed": False}, seed=s, name="t"),
                               dataset="wikimia", seed=s, shared=shared, overlap_warn=leakage.DEFAULTS["overlap_warn"])
            for s, split, shared in zip((0, 1), splits, leakage.seed_overlaps(splits))]
    return pd.DataFrame(rows)


def test_summary_warns_per_split_above_the_threshold(leakage_rows):
    assert leakage_rows["blind_warning"].all()   # 2023 events vs older ones: separable without a model
    md = leakage.summary_markdown(leakage_rows)
    warnings = [line for line in md.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 2 and "wikimia seed 1" in warnings[1] and "> 0.6" in warnings[1]
    agg = leakage.per_dataset(leakage_rows)
    assert agg.loc[0, "blind_auroc_mean"] == pytest.approx(leakage_rows["blind_auroc"].mean())
    assert agg.loc[0, "dup_embedding"] == -1 and agg.loc[0, "blind_warnings"] == 2


def test_seeds_sharing_candidates_are_counted_and_flagged_above_the_threshold(leakage_rows):
    """A pool too small for disjoint splits: each seed's split shares most of its candidates with another's, so
    the rows, the dataset's aggregate and the leakage summary flag it; disjoint seeds are not flagged."""
    split = lambda ids: pd.DataFrame({"id": [f"c{i}" for i in ids]})
    assert leakage.seed_overlaps([split(range(0, 10)), split(range(8, 18)), split(range(2, 12))]) == [8, 4, 8]
    assert leakage.seed_overlaps([split(range(5))]) == [0]
    pool = get_family("wikimia")({"source": str(WIKIMIA)}).groupby("label").head(40)   # 40 per class
    splits = [sample_split(pool, 30, seed=s) for s in (0, 1, 2)]                      # 30 per class each
    shared = leakage.seed_overlaps(splits)
    assert all(n >= 2 * (30 + 30 - 40) for n in shared)                                 # at least 20 per class
    rows = pd.DataFrame([leakage.report_row(leakage.run_check(sp, {**leakage.DEFAULTS, "embed": False}, seed=s, name="t"),
                                            dataset="small", seed=s, shared=n, overlap_warn=0.25)
                         for s, sp, n in zip((0, 1, 2), splits, shared)])
    assert rows["overlap_warning"].all() and rows["n_shared"].tolist() == shared
    agg = leakage.per_dataset(rows).iloc[0]
    assert (agg["n_shared"], agg["n_candidates"], agg["overlap_warning"]) == (max(shared), 60, True)
    assert f"WARNING: small: two seeds' splits share {max(shared)} of 60 candidates (> 25%)" in leakage.summary_markdown(rows)
    assert (leakage_rows["n_shared"] == 0).all() and not leakage_rows["overlap_warning"].any()   # disjoint seeds


def test_results_summary_gets_the_split_checks_beside_the_unchanged_table(tmp_path, leakage_rows):
    from mialab.evaluation.metrics import fpr_column
    from mialab.evaluation.report import markdown_table
    from mialab.evaluation.stage import evaluate_tables, summarise

    rng = np.random.default_rng(0)
    tables = [("base", "wikimia", s, pd.DataFrame({"id": [f"x{i}" for i in range(20)], "label": [0, 1] * 10,
                                                    "loss": rng.normal(size=20)})) for s in (0, 1)]
    per_seed = evaluate_tables(tables, [0.05])
    paths = {"summary": tmp_path / "s.parquet", "per_seed": tmp_path / "p.parquet"}
    summarise(per_seed, [0.05]).to_parquet(paths["summary"])
    per_seed.to_parquet(paths["per_seed"])
    leak = []
    for i, (_, row) in enumerate(leakage_rows.iterrows()):
        leak.append(tmp_path / f"l{i}.parquet")
        pd.DataFrame([row]).to_parquet(leak[-1])
    out = {k: str(tmp_path / f"out.{k}") for k in ("summary", "per_seed", "markdown", "csv", "headline",
                                                    "headline_csv", "reproduction_csv", "forest")}
    headline = tmp_path / "h.parquet"
    pd.DataFrame().to_parquet(headline)
    pool = tmp_path / "pool.json"   # the pool's manifest (rule build_pool)
    pool.write_text(json.dumps({"stage": "pools", "dataset": "wikimia", "exact_repeats_dropped": 7}))
    # run the rule's script as Snakemake would, with its `snakemake` object
    driver = f"""
import builtins, runpy
class NL(list):
    def __init__(self, items=(), **named):
        super().__init__(items); self.__dict__.update(named)
    def get(self, key, default=None): return self.__dict__.get(key, default)
builtins.snakemake = type("S", (), dict(
    input=NL(summaries=[{str(paths['summary'])!r}], per_seed=[{str(paths['per_seed'])!r}], headlines=[{str(headline)!r}],
             reproductions=[{str(headline)!r}], leakage={list(map(str, leak))!r}, pools=[{str(pool)!r}]),
    output=NL(**{out!r}), log=[{str(tmp_path / 'log')!r}], threads=1,
    params=NL(fpr_targets=[0.05], headline={{"Loss": "loss"}}, bootstrap={{"level": 0.95, "resamples": 100}},
              truncation_warn=0.05, controls=["control"])))
runpy.run_path({str(REPO / 'workflow_scripts' / 'summarize.py')!r}, run_name="__main__")
"""
    proc = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + (tmp_path / "log").read_text()
    md = Path(out["markdown"]).read_text()
    summary = pd.read_parquet(paths["summary"])
    assert markdown_table(summary, ["auroc", fpr_column(0.05)]) in md   # the results table, unchanged
    assert "## Split checks" in md
    mean, std = 100 * leakage_rows["blind_auroc"].mean(), 100 * leakage_rows["blind_auroc"].std(ddof=1)
    assert f"| wikimia | original | 2 | 7 | 0 / 60 | {mean:.1f} ± {std:.1f} |" in md and "| 0 / 0 / n/a | 2 | – |" in md
    assert len(pd.read_csv(out["csv"])) == len(summary)   # the csv is the results table alone
