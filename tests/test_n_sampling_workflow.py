"""N-Sampling in the workflow: its stage keys and config checks, its jobs in the DAG, and (slow) a
reduced tiny world run end to end whose results table has an N-Sampling row for every metric."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest

from mialab.adra.attack import metric_names
from mialab.adra.plan import NSamplingPlan
from mialab.config import ConfigError
from mialab.workflow import Plan
from snakemake.utils import validate

from workflow_helpers import REPO, default_config, make_workdir, planned_jobs, snakemake


def validated(cfg: dict) -> dict:
    """``cfg`` checked against the schema with its defaults filled in, as the workflow sees it."""
    validate(cfg, str(REPO / "schemas" / "config.schema.yaml"))
    return cfg


def ns_plan(cfg: dict) -> NSamplingPlan:
    cfg = validated(cfg)
    return NSamplingPlan(Plan(cfg), cfg)


def test_keys_change_only_downstream_of_what_changed():
    cfg = default_config()
    a = ns_plan(cfg)
    model, dataset = a.pairs()[0]
    more = copy.deepcopy(cfg)
    more["n_sampling"]["n"] += 1
    b = ns_plan(more)
    assert b.rollouts(model, dataset, 0).key != a.rollouts(model, dataset, 0).key
    assert b.scores(model, dataset, 0).key != a.scores(model, dataset, 0).key  # N is checked when scoring
    assert Plan(more).scores(model, dataset, 0).key == Plan(cfg).scores(model, dataset, 0).key
    metric = copy.deepcopy(cfg)
    metric["n_sampling"]["metrics"]["n_min"] = 2
    c = ns_plan(metric)
    assert c.rollouts(model, dataset, 0).key == a.rollouts(model, dataset, 0).key
    assert c.scores(model, dataset, 0).key != a.scores(model, dataset, 0).key
    assert a.rollouts(model, dataset, 0).key != a.rollouts(model, dataset, 1).key
    assert a.sampling(0)["seed"] != a.sampling(1)["seed"], "each evaluation seed samples its own rollouts"


def test_scores_are_provided_only_for_targets():
    plan = ns_plan(default_config())
    model, dataset = plan.pairs()[0]
    assert plan.scores_file(model, dataset, 1).endswith("/scores.parquet")
    assert plan.scores_file("control", dataset, 1) is None
    assert ns_plan({k: v for k, v in default_config().items() if k != "n_sampling"}).pairs() == []


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["n_sampling"]["targets"].append({"model": "bse", "dataset": "aime"}), "unknown model 'bse'"),
    (lambda c: c["n_sampling"]["targets"].append({"model": "base", "dataset": "aim"}), "not evaluated on dataset"),
    (lambda c: c["n_sampling"]["tasks"].pop(c["n_sampling"]["targets"][0]["dataset"]), "no task for dataset"),
    (lambda c: c["n_sampling"]["tasks"][c["n_sampling"]["targets"][0]["dataset"]].update(template="wiki"),
     "known: .*continuation"),
    (lambda c: c["n_sampling"].update(chat_models=["chat", "gpt"]), "chat_models: unknown model 'gpt'"),
])
def test_config_errors_name_the_key(edit, message):
    cfg = default_config()
    edit(cfg)
    with pytest.raises(ConfigError, match=message):
        ns_plan(cfg)


def test_a_wrong_type_is_rejected_before_any_job(tmp_path):
    cfg = default_config()
    cfg["n_sampling"]["n"] = "four"
    proc = snakemake(make_workdir(tmp_path, cfg), "-n", check=False)
    assert proc.returncode != 0 and "not of type 'integer'" in proc.stdout + proc.stderr


def test_n_sampling_target_plans_rollouts_and_scores_of_every_target_and_seed(tmp_path):
    cfg = default_config()
    jobs = planned_jobs(make_workdir(tmp_path, cfg), "n_sampling")
    n = len(cfg["n_sampling"]["targets"]) * len(cfg["seeds"])
    assert jobs["n_sampling_rollouts"] == n and jobs["n_sampling_scores"] == n
    assert not {"adra_train", "adra_eval", "evaluate_dataset", "lara_features"} & set(jobs)


# --- end to end (slow) -------------------------------------------------------------------------

def reduced_config() -> dict:
    """The tiny world cut down to N-Sampling on one pretraining setting: WikiMIA-32 (8 + 8 candidates
    per seed, two seeds), a 2-layer model pretrained 30 steps with the members mixed in 5 times."""
    cfg = default_config()
    cfg["seeds"] = [0, 1]
    wiki = cfg["datasets"]["wikimia32"]
    wiki["split"]["n_per_class"] = 8
    cfg["datasets"] = {"wikimia32": wiki}
    for section in ("calibdcd", "lara", "adra"):
        cfg.pop(section, None)
    cfg["tokenizer"] = {"vocab_size": 1024, "corpora": ["resources/data/wikimia/WikiMIA_length32.parquet"]}
    base = copy.deepcopy(cfg["models"]["base"])
    base.pop("reference")
    base.update(members=[{"dataset": "wikimia32", "repeats": 5}], filler_fraction=0.05)
    base["architecture"] = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "max_position_embeddings": 128}
    base["train"].update(steps=30, batch_size=4, seq_len=128)
    cfg["models"] = {"base": base}
    ns = cfg["n_sampling"]
    ns["targets"] = [{"model": "base", "dataset": "wikimia32"}]
    ns["tasks"] = {"wikimia32": {**ns["tasks"]["wikimia32"], "max_new_tokens": 12, "max_prompt_tokens": 96}}
    ns["n"] = 2
    return cfg


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    wd = make_workdir(tmp_path_factory.mktemp("n_sampling_world"), reduced_config())
    snakemake(wd, "--cores", "2", timeout=3600)
    return wd


@pytest.mark.slow
def test_the_results_table_has_an_n_sampling_row_for_every_metric_beside_the_baselines(world):
    summary = pd.read_parquet(world / "results/evaluation/summary.parquet")
    methods = set(summary["method"])
    expected = {f"n_sampling/{m}@{how}" for m in metric_names("all-MiniLM-L6-v2") for how in ("aon", "bon")}
    assert expected <= methods and {"loss", "min_k_plus_plus@0.2"} <= methods
    assert (summary.loc[summary["method"].isin(expected), "n_seeds"] == 2).all()
    md = (world / "results/evaluation/summary.md").read_text()
    assert "n_sampling/lcs_ratio_ref@bon" in md


@pytest.mark.slow
def test_rollouts_follow_the_schema_with_n_per_candidate(world):
    rollouts = pd.read_parquet(next((world / "results/n_sampling/rollouts").rglob("rollouts.parquet")))
    assert list(rollouts.columns) == ["id", "sample", "text", "n_tokens", "finish_reason"]
    assert (rollouts.groupby("id").size() == 2).all() and rollouts["n_tokens"].le(12).all()
    assert rollouts["id"].nunique() == 16
