"""The main test: the suite's world (config.yaml at smaller method sizes, one seed) from an empty results/, then
caching and partial reruns; the README's own world planned and run to its splits; the README world's contamination
bounds on three seeds (its two and one more), scored on the suite world's models (the README world's: the same keys).

Runs the real workflow (tokenizer, two pretrained models, DeepSpeed SFT, all baselines, report)
in a scratch directory. Slow: minutes on 2 CPU cores.
"""

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from mialab.pipeline.config import walk_config
from workflow_helpers import (default_config, foundation_config, job_stats, make_workdir, planned_jobs, planned_outputs,
                              snakemake, suite_world_config, write_config)

pytestmark = pytest.mark.slow

#: The README world's passive baselines, the methods its contamination bounds read (every one a forward pass).
PASSIVE = ["loss", "r_loss", "zlib", "min_k", "min_k_plus_plus"]
#: The seeds whose splits the contamination bounds read: config.yaml's two and a third, so that a bound on a weak
#: signal (R-Loss of the SFT members) rests on more candidates than the README's table (the bounds were set on three)
BOUND_SEEDS = [0, 1, 2]


@pytest.fixture(scope="module")
def world(suite_world) -> Path:
    return suite_world


def _summary(wd: Path) -> pd.DataFrame:
    summary = pd.read_parquet(wd / "results/evaluation/summary.parquet")
    return summary.set_index(["dataset", "model", "method"]).sort_index()


def test_outputs_and_schemas(world):
    r = world / "results"
    cfg = suite_world_config()
    splits = sorted(r.glob("splits/*/seed-*/*/split.parquet"))
    assert len(splits) == len(cfg["datasets"]) * len(cfg["seeds"])
    for path in splits:
        split = pd.read_parquet(path)
        assert {"id", "text", "prefix", "suffix", "label", "source"} <= set(split.columns)
        n = cfg["datasets"]["aime" if "/aime/" in str(path) else "wikimia"]["split"]["n_per_class"]
        assert split["label"].value_counts().to_dict() == {1: n, 0: n}
    for model in ("base", "control", "sft"):
        (folder,) = r.glob(f"models/{model}/*/model")
        assert (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
        assert (folder.parent / "manifest.json").exists()
    scores = pd.read_parquet(next(r.glob("scores/sft/aime/*/seed-0/scores.parquet")))
    assert {"id", "label", "loss", "r_loss", "zlib", "min_k@0.2", "min_k_plus_plus@0.2"} <= set(scores.columns)
    assert "r_loss" not in pd.read_parquet(next(r.glob("scores/control/aime/*/seed-0/scores.parquet"))).columns
    for f in ("evaluation/summary.md", "evaluation/summary.csv", "evaluation/aime/roc.png", "evaluation/wikimia/roc.png"):
        assert (r / f).stat().st_size > 0
    md = (r / "evaluation/summary.md").read_text()
    assert "| aime | sft | r_loss |" in md


def test_the_readme_world_plans_every_stage_and_builds_its_splits(tmp_path):
    """config.yaml itself, as the README's first command runs it: its plan has every rule the suite's world runs
    (one job per seed where a rule is per seed), and its first stages (pools, splits and their leakage checks:
    the `splits` target) run."""
    readme, suite = default_config(), suite_world_config()
    wd = make_workdir(tmp_path, readme)
    jobs = planned_jobs(wd)
    assert set(jobs) == set(planned_jobs(make_workdir(tmp_path / "suite", suite)))
    assert jobs["build_split"] == len(readme["datasets"]) * len(readme["seeds"]) == 4
    snakemake(wd, "--cores", "2", "splits")
    for dataset, ds in readme["datasets"].items():
        paths = sorted(wd.glob(f"results/splits/{dataset}/seed-*/*/split.parquet"))
        assert len(paths) == len(readme["seeds"])
        n = ds["split"]["n_per_class"]
        assert all(pd.read_parquet(p)["label"].value_counts().to_dict() == {1: n, 0: n} for p in paths)


def _leaves(cfg: dict) -> dict:
    """``{key path: value}`` of a config's scalars and lists (:func:`mialab.pipeline.config.walk_config`'s paths)."""
    return {k: v for k, v in walk_config(cfg) if not isinstance(v, dict) and "[" not in k}


def test_the_suite_world_differs_from_the_readme_world_only_where_its_docstring_says():
    """suite_world_config's promise: the README world's models (so its weights), splits and method sizes, but for its
    one seed and the sizes it names. A size changed in config.yaml reaches the suite's world, which tests it."""
    readme, suite = _leaves(default_config()), _leaves(suite_world_config())
    assert readme.keys() == suite.keys()
    assert sorted(k for k in readme if readme[k] != suite[k]) == [
        "models.mimir_mlm.train.steps", "scoring.quantile.epochs", "seeds"]


@pytest.fixture(scope="module")
def readme_seeds(world, tmp_path_factory) -> pd.DataFrame:
    """The README world's models' seed-mean AUROCs of the passive baselines: a copy of the suite's world whose config
    is config.yaml's foundation (its datasets, base, control and sft) on the seeds BOUND_SEEDS with only the passive
    baselines, scored there and summarised as the evaluation stage does. No training job is planned: config.yaml's
    models are the suite world's, built."""
    from mialab.evaluation.stage import evaluate_tables, summarise

    wd = tmp_path_factory.mktemp("readme_seeds")
    shutil.copytree(world, wd, symlinks=True, dirs_exist_ok=True)    # keeps mtimes: nothing built is stale
    shutil.rmtree(wd / "results/scores")                            # the suite world's: the globs below read new ones
    cfg = foundation_config()                                       # config.yaml's datasets, base, control, sft
    assert set(cfg["seeds"]) < set(BOUND_SEEDS)                     # the README's seeds among them
    cfg["seeds"], cfg["scoring"]["methods"] = BOUND_SEEDS, PASSIVE
    write_config(wd, cfg)
    jobs = planned_jobs(wd, "scores")
    assert not {"train_tokenizer", "pretrain_model", "sft_contaminate"} & set(jobs), jobs
    snakemake(wd, "--cores", "2", "scores")
    tables = [(p.parts[-5], p.parts[-4], int(p.parts[-2].removeprefix("seed-")), pd.read_parquet(p))
              for p in sorted(wd.glob("results/scores/*/*/*/seed-*/scores.parquet"))]
    assert len(tables) == len(cfg["seeds"]) * 6                     # 3 models x 2 datasets
    summary = summarise(evaluate_tables(tables, [0.05]), [0.05])
    return summary.set_index(["dataset", "model", "method"]).sort_index()


def test_contamination_is_visible_and_the_control_is_not(world, readme_seeds):
    """The README world's bounds on its seed means (readme_seeds), and every method of the suite's world, MIMIR's
    attacks included, at chance on the control's seed 0."""
    s = readme_seeds
    print(s[["auroc_mean", "auroc_std", "tpr@5%fpr_mean"]].round(3).to_string())
    assert s.loc[("aime", "sft", "r_loss"), "auroc_mean"] > 0.58  # SFT members, base model as reference
    assert s.loc[("aime", "sft", "min_k_plus_plus@0.2"), "auroc_mean"] > 0.7
    assert s.loc[("aime", "base", "min_k_plus_plus@0.2"), "auroc_mean"] < 0.62  # before SFT: no signal
    assert s.loc[("wikimia", "base", "min_k@0.2"), "auroc_mean"] > 0.65  # pretraining members
    control = s.loc[("wikimia", "control")]["auroc_mean"]
    assert control.between(0.38, 0.62).all(), control  # never saw the members: chance
    control = _summary(world).loc[("wikimia", "control")]["auroc_mean"]
    assert len(control) == len(suite_world_config()["scoring"]["methods"]) - 1      # all but R-Loss: no reference
    assert control.between(0.38, 0.62).all(), control


def test_report_html(world):
    snakemake(world, "--report", "results/report.html")
    html = (world / "results/report.html").read_text(errors="ignore")
    assert "roc.png" in html and "summary.csv" in html


def test_second_run_does_nothing(world):
    assert planned_jobs(world) == {}


def test_changing_one_dataset_reruns_only_it_and_reverting_reuses(world):
    """WikiMIA's split size changes (64 to 16 a class): the dry run plans only WikiMIA's jobs; the splits, MIMIR's
    neighbours and the control's baseline scores (the score job the others' R-Loss reads) are rebuilt without
    touching AIME, leaving the stage target `scores` the other models' WikiMIA score jobs only; switching back
    finds every earlier folder, so only the tables that merge both settings would be redone."""
    before = {p: p.stat().st_mtime_ns for p in (world / "results").rglob("*.parquet") if "/aime/" in str(p)}
    cfg = suite_world_config()
    cfg["datasets"]["wikimia"]["split"]["n_per_class"] = 16
    write_config(world, cfg)
    proc = snakemake(world, "-n")
    jobs = job_stats(proc.stdout + proc.stderr)
    assert jobs["build_split"] == len(cfg["seeds"]) and jobs["evaluate_dataset"] == 1
    scoring = sum("wikimia" in m.get("datasets", ["wikimia"]) for m in cfg["models"].values()
                  if m["kind"] != "mlm")                                # not MIMIR's BERT
    assert jobs["score_baselines"] == scoring
    assert not {"build_pool", "train_tokenizer", "pretrain_model", "sft_contaminate", "rl_contaminate"} & set(jobs)
    assert not any(rule.startswith("lara_") for rule in jobs)          # LaRA reads only AIME
    (control,) = [out for rule, wildcards, outputs in planned_outputs(proc.stdout) for out in outputs
                  if rule == "score_baselines" and wildcards["model"] == "control" and out.endswith("manifest.json")]
    snakemake(world, "--cores", "2", control)
    for path in world.glob("results/splits/wikimia/seed-*/*/split.parquet"):
        n = pd.read_parquet(path)["label"].value_counts().to_dict()
        assert n in ({1: 16, 0: 16}, {1: 64, 0: 64})                     # both settings' folders side by side
    assert json.loads((world / control).read_text())["rows"] == [32] * len(cfg["seeds"])
    assert planned_jobs(world, "scores") == {"score_baselines": scoring - 1, "scores": 1}
    after = {p: p.stat().st_mtime_ns for p in before}
    assert before == after, "an aime output was rewritten"
    write_config(world, suite_world_config())
    # back to the first parameters: every split, score and method folder exists, only tables are redone
    jobs = planned_jobs(world)
    assert not {"build_split", "score_baselines", "calibdcd_features", "n_sampling_rollouts"} & set(jobs), jobs
    assert planned_jobs(world, "scores") == {}


def test_partial_rerun_of_one_dataset_touches_no_other(world):
    """`snakemake dataset_aime --forcerun score_baselines` plans AIME's score jobs (one per model that scores AIME)
    and AIME's tables, no WikiMIA job (the dry run's wildcards); a forced rerun through that target, executed,
    redoes AIME's files and touches no WikiMIA file. The executed rerun forces N-Sampling's scores (one job),
    not the five score jobs: the plan says what a forced rule reruns, and the execution of a dataset's score jobs
    without touching the other's is test_changing_one_dataset_reruns_only_it_and_reverting_reuses's."""
    proc = snakemake(world, "-n", "dataset_aime", "--forcerun", "score_baselines")
    out = proc.stdout + proc.stderr
    scoring_aime = sum("aime" in m.get("datasets", ["aime"]) for m in suite_world_config()["models"].values()
                       if m["kind"] != "mlm")
    assert job_stats(out)["score_baselines"] == scoring_aime == 5
    wildcards = re.findall(r"^\s*wildcards: (.*)$", out, re.M)
    assert len(wildcards) > scoring_aime and all("dataset=aime" in w for w in wildcards), wildcards
    wikimia = {p: p.stat().st_mtime_ns for p in (world / "results").rglob("*") if "wikimia" in str(p) and p.is_file()}
    aime = sorted((world / "results").glob("n_sampling/scores/*/aime/*/seed-*/scores.parquet")) + \
        sorted((world / "results/evaluation/aime").glob("*.parquet"))
    assert len(aime) > 3
    old = [p.stat().st_mtime_ns for p in aime]
    proc = snakemake(world, "--cores", "2", "dataset_aime", "--forcerun", "n_sampling_scores")
    assert "rule n_sampling_scores" in proc.stdout + proc.stderr
    assert all(p.stat().st_mtime_ns > t for p, t in zip(aime, old))
    assert wikimia == {p: p.stat().st_mtime_ns for p in wikimia}
