"""N-Sampling in the workflow: its stage keys and config checks, its jobs in the default DAG, and (slow)
the default tiny world's results table, which has an N-Sampling row for every metric beside the
passive baselines on each target, and its reconstruction report."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
from workflow_helpers import default_config, make_workdir, planned_jobs, snakemake, suite_world_config, validated

from mialab.n_sampling.attack import metric_names
from mialab.n_sampling.plan import NSamplingPlan
from mialab.pipeline.config import ConfigError
from mialab.pipeline.plan import Plan


def ns_plan(cfg: dict) -> NSamplingPlan:
    cfg = validated(cfg)
    return NSamplingPlan(Plan(cfg), cfg)


def test_the_default_config_runs_n_sampling_on_existing_models():
    cfg = default_config()
    plan = ns_plan(cfg)
    assert set(plan.pairs()) == {("sft", "aime"), ("base", "wikimia")}
    for model, dataset in plan.pairs():
        task = cfg["n_sampling"]["tasks"][dataset]
        context = cfg["models"]["base"]["architecture"]["max_position_embeddings"]
        assert task["max_prompt_tokens"] + task["max_new_tokens"] <= context, "prompt + rollout fit the context"


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
    other = copy.deepcopy(cfg)  # another dataset's task: this target is untouched
    (other_dataset,) = set(cfg["n_sampling"]["tasks"]) - {dataset}
    other["n_sampling"]["tasks"][other_dataset]["max_new_tokens"] -= 1
    assert ns_plan(other).rollouts(model, dataset, 0).key == a.rollouts(model, dataset, 0).key
    # one job per target over every seed, a folder per seed; each evaluation seed samples its own rollouts
    assert a.rollouts(model, dataset, 0).key == a.rollouts(model, dataset, 1).key == a.rollout_run(model, dataset).key
    assert a.rollouts(model, dataset, 0).dir != a.rollouts(model, dataset, 1).dir
    assert a.sampling(0)["seed"] != a.sampling(1)["seed"], "each evaluation seed samples its own rollouts"
    assert a.rollout_run(model, dataset).manifest["config"]["sampling"]["1"] == a.sampling(1)
    fewer = copy.deepcopy(cfg)
    fewer["seeds"] = cfg["seeds"][:-1]
    assert ns_plan(fewer).rollout_run(model, dataset).key != a.rollout_run(model, dataset).key


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
    (lambda c: c["n_sampling"].update(prompt_format="verl", chat_models=["sft"]),
     "chat_models: read only with n_sampling.prompt_format chat_models"),
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


def test_n_sampling_target_plans_rollouts_scores_and_a_report_per_dataset(tmp_path):
    cfg = default_config()
    jobs = planned_jobs(make_workdir(tmp_path, cfg), "n_sampling")
    n = len(cfg["n_sampling"]["targets"])  # one job per target and stage, over every seed
    assert jobs["n_sampling_rollouts"] == n and jobs["n_sampling_scores"] == n
    assert not {"adra_train", "adra_eval", "evaluate_dataset", "lara_features"} & set(jobs)
    report = planned_jobs(make_workdir(tmp_path, cfg), "adra")  # without an adra section: N-Sampling reports
    assert report["adra_report"] == 2 and "adra_train" not in report


# --- end to end (slow): the suite's world, run once per session ----------------------------------------

@pytest.mark.slow
def test_the_results_table_has_an_n_sampling_row_for_every_metric_beside_the_baselines(suite_world):
    summary = pd.read_parquet(suite_world / "results/evaluation/summary.parquet")
    expected = {f"n_sampling/{m}@{how}" for m in metric_names("all-MiniLM-L6-v2") for how in ("aon", "bon")}
    for model, dataset in (("sft", "aime"), ("base", "wikimia")):
        rows = summary[(summary["model"] == model) & (summary["dataset"] == dataset)]
        methods = set(rows["method"])
        assert expected <= methods and {"loss", "zlib", "min_k_plus_plus@0.2"} <= methods, (model, dataset)
        assert (rows.loc[rows["method"].isin(expected), "n_seeds"] == len(suite_world_config()["seeds"])).all()
        assert rows.loc[rows["method"].isin(expected), "auroc_mean"].between(0, 1).all()
    assert not summary.loc[summary["model"] == "control", "method"].str.startswith("n_sampling/").any()
    md = (suite_world / "results/evaluation/summary.md").read_text()
    assert "n_sampling/lcs_ratio_ref@bon" in md and "n_sampling/embedding_cosine@aon" in md


@pytest.mark.slow
def test_rollouts_follow_the_schema_with_n_per_candidate(suite_world):
    cfg = suite_world_config()["n_sampling"]
    for dataset, model in (("aime", "sft"), ("wikimia", "base")):
        paths = sorted((suite_world / f"results/n_sampling/rollouts/{model}/{dataset}").rglob("rollouts.parquet"))
        assert len(paths) == len(suite_world_config()["seeds"])
        rollouts = pd.read_parquet(paths[0])
        assert list(rollouts.columns) == ["id", "sample", "text", "n_tokens", "finish_reason"]
        assert (rollouts.groupby("id").size() == cfg["n"]).all()
        assert rollouts["n_tokens"].le(cfg["tasks"][dataset]["max_new_tokens"]).all()
        (split,) = (suite_world / f"results/splits/{dataset}/seed-0").glob("*/split.parquet")
        assert set(rollouts["id"]) == set(pd.read_parquet(split)["id"])


@pytest.mark.slow
def test_the_report_gives_n_sampling_top5_mean_beside_the_best_passive_baseline(suite_world):
    for dataset, model in (("aime", "sft"), ("wikimia", "base")):
        report = pd.read_csv(suite_world / f"results/adra/report/{dataset}/adra.csv")
        rows = report[report["model"] == model].set_index("attack")
        assert set(rows.index) == {"n_sampling", "passive"}
        assert 0 <= rows.loc["n_sampling", "top5_mean"] <= 1
        assert rows.loc["n_sampling", "n_seeds"] == len(suite_world_config()["seeds"])
        # the score tables' methods: the passive baselines and the scoring attacks (config.yaml's scoring.methods)
        assert rows.loc["passive", "best_metric"] in {"loss", "r_loss", "zlib", "min_k@0.2", "min_k_plus_plus@0.2",
                                                      "gradnorm", "recall", "dc_pdd"}
        assert (suite_world / f"results/adra/report/{dataset}/steps.png").stat().st_size > 1000
