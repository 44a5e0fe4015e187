"""RL contamination and LaRA in the workflow: stage plans, the stage protocol, and (slow) an end-to-end
run of a reduced tiny world in a scratch directory."""

from __future__ import annotations

import copy
import json
import re

import fake_vllm
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score
from workflow_helpers import REPO, default_config, make_workdir, planned_jobs, suite_world_config

from mialab.data.registry import get_family
from mialab.data.rl_corpus import pool_questions
from mialab.data.sampling import sample_split
from mialab.lm.loading import load_tokenizer
from mialab.text.spans import BLANK
from mialab.lara.plan import LaRAPlan
from mialab.lara.stages import (
    EVALUATED,
    REFERENCE,
    aligned_features,
    backend_specs,
    instruction_model,
    known_nonmembers,
    perturbation_table,
    score_table,
    stage_questions,
)
from mialab.pipeline.config import ConfigError, check_config
from mialab.pipeline.plan import Plan
from mialab.training.plan import RLPlan

AIME_POOL = {"family": "aime", "source": [str(REPO / "resources/data/aime/aime_1983_2023.json"),
                                          str(REPO / "resources/data/aime/aime_2024.json")],
             "max_words": 64, "solution_prefix_ratio": 0.25,
             "membership": {"rule": "random", "years": [2014, 2024], "seed": 0}}


@pytest.fixture(scope="module")
def aime_pool() -> pd.DataFrame:
    return get_family("aime")(AIME_POOL)


# --- stage plans -------------------------------------------------------------------------------

def test_rl_checkpoints_of_one_run_share_its_key_and_only_the_run_config_changes_it():
    plan = Plan(default_config())
    run = plan.rl_run("grpo_e1")
    assert run.key == plan.rl_run("grpo_e2").key and run.dir == f"results/rl/{run.key}"
    assert plan.model_path("grpo_e1") == f"results/rl/{run.key}/epoch-1/model"
    assert plan.model_path("grpo_e2") == f"results/rl/{run.key}/epoch-2/model"
    assert plan.model("grpo_e1").key != plan.model("grpo_e2").key
    assert run.manifest["upstream"]["init"] == plan.model("sft").key
    cfg = default_config()
    cfg["models"]["grpo_e2"] = copy.deepcopy(cfg["models"]["grpo_e2"])  # YAML merge keys share nested dicts
    cfg["models"]["grpo_e2"]["reference"] = "base"
    assert Plan(cfg).rl_run("grpo_e2").key == run.key
    cfg["models"]["grpo_e2"]["train"]["lr"] *= 2  # a different learning rate: a different run
    changed = Plan(cfg)
    assert changed.rl_run("grpo_e2").key != run.key and changed.rl_run("grpo_e1").key == run.key
    assert changed.scores("grpo_e2", "aime", 0).key != plan.scores("grpo_e2", "aime", 0).key


def test_rl_plan_maps_runs_to_epoch_inputs_and_rejects_stale_keys():
    plan = Plan(default_config())
    rl = RLPlan(plan)
    key = plan.rl_run("grpo_e1").key
    assert rl.spec(key)["init"] == "sft" and rl.manifest(key, 2)["epoch"] == 2
    assert rl.previous(key, 1) == [] and rl.previous(key, 2) == [f"results/rl/{key}/epoch-1/trainer"]
    with pytest.raises(KeyError, match="no configured rl model belongs to this run"):
        rl.spec("0123456789ab")


def test_a_run_on_one_splits_members_reads_that_split_and_is_another_run():
    plan = Plan(default_config())
    key = plan.rl_run("grpo_e1").key
    assert RLPlan(plan).member_split(key) == []          # the whole pool's members: no split read
    assert "member_split" not in plan.rl_run("grpo_e1").manifest["upstream"]
    cfg = copy.deepcopy(default_config())
    for name in ("grpo_e1", "grpo_e2"):
        cfg["models"][name]["members"] = {"dataset": "aime", "split_seed": 1}
    split_plan = Plan(cfg)
    run = split_plan.rl_run("grpo_e1")
    assert run.key != key and run.key == split_plan.rl_run("grpo_e2").key
    assert run.manifest["upstream"]["member_split"] == split_plan.split("aime", 1).key
    assert RLPlan(split_plan).member_split(run.key) == [split_plan.split("aime", 1).path("split.parquet")]


def test_an_epoch_past_the_run_is_a_config_error():
    cfg = default_config()
    cfg["models"]["grpo_e2"]["epoch"] = 3
    with pytest.raises(ConfigError, match=r"models.grpo_e2.epoch: 3 is past the run's last epoch"):
        check_config(cfg)


def validated(cfg: dict) -> dict:
    """``cfg`` with the schema's defaults filled in (as the workflow sees it)."""
    from snakemake.utils import validate

    cfg = copy.deepcopy(cfg)
    validate(cfg, str(REPO / "schemas" / "config.schema.yaml"))
    return cfg


def test_lara_plan_checks_cross_references_and_keys_change_only_downstream():
    cfg = validated(default_config())
    lara = LaRAPlan(Plan(cfg), cfg)
    assert lara.pairs() == [("sft", "aime"), ("grpo_e1", "aime"), ("grpo_e2", "aime")]
    assert lara.scores_file("base", "aime", 0) is None
    assert lara.scores_file("sft", "aime", 0).endswith("/scores.parquet")
    bad = copy.deepcopy(cfg)
    bad["lara"]["models"] = ["sft", "gpro_e1"]
    with pytest.raises(ConfigError, match="lara.models: unknown model 'gpro_e1'"):
        LaRAPlan(Plan(bad), bad)
    bad = copy.deepcopy(cfg)
    bad["lara"]["datasets"] = ["aime", "wikimia"]  # the grpo models are evaluated on aime only
    with pytest.raises(ConfigError, match="model 'grpo_e1' is not evaluated on dataset 'wikimia'"):
        LaRAPlan(Plan(bad), bad)
    changed = copy.deepcopy(cfg)
    changed["lara"]["features"]["max_length"] = 128
    other = LaRAPlan(Plan(changed), changed)
    assert other.perturbations("aime", 0).key == lara.perturbations("aime", 0).key
    assert other.model_run("baselines", "sft", "aime").key == lara.model_run("baselines", "sft", "aime").key
    assert other.model_run("features", "sft", "aime").key != lara.model_run("features", "sft", "aime").key
    assert other.scores("sft", "aime", 0).key != lara.scores("sft", "aime", 0).key
    # one job per (model, dataset) covers every seed; a seed's tables sit in its own folder
    run = lara.score_run("sft", "aime")
    assert run.manifest["seeds"] == cfg["seeds"]
    assert set(run.manifest["upstream"]["splits"]) == {str(s) for s in cfg["seeds"]}
    assert lara.scores("sft", "aime", 1).dir == f"{run.dir}/seed-1" and lara.scores("sft", "aime", 1).key == run.key
    with pytest.raises(KeyError, match="seed 7 is not in"):
        lara.scores("sft", "aime", 7)


def test_lara_target_plans_the_rl_and_lara_jobs_and_no_other_method(tmp_path):
    jobs = planned_jobs(make_workdir(tmp_path), "lara")
    assert jobs["rl_contaminate"] == 2 and jobs["lara_perturbations"] == 1 and jobs["lara_report"] == 1
    assert jobs["lara_features"] == jobs["lara_baselines"] == jobs["lara_scores"] == 3   # one per model: all seeds
    assert not any(rule.startswith("calibdcd") for rule in jobs)


# --- the stage protocol ------------------------------------------------------------------------

def test_controls_are_pool_non_members_outside_the_split_and_never_read_its_labels(aime_pool):
    split = sample_split(aime_pool, 20, seed=1)
    controls = known_nonmembers(aime_pool, split["id"])
    assert (controls["label"] == 0).all() and not set(controls["id"]) & set(split["id"])
    assert len(controls) == int((aime_pool["label"] == 0).sum()) - 20
    questions, neighbour_pool = stage_questions(split, aime_pool, max_words=44, n_reference=15, seed=[0, 1])
    evaluated, reference = questions[questions["set"] == EVALUATED], questions[questions["set"] == REFERENCE]
    assert evaluated["id"].tolist() == split["id"].tolist() and len(reference) == 15
    assert set(reference["id"]) <= set(controls["id"]) and set(reference["text"]) <= set(neighbour_pool)
    assert not set(neighbour_pool) & set(pool_questions(split, max_words=44))
    shuffled = split.assign(label=np.random.default_rng(0).permutation(split["label"].to_numpy()))
    again, pool_again = stage_questions(shuffled, aime_pool, max_words=44, n_reference=15, seed=[0, 1])
    pd.testing.assert_frame_equal(questions, again)
    assert pool_again == neighbour_pool


def test_llm_perturbation_backends_run_from_the_config_at_the_codes_temperatures(make_tiny_model, monkeypatch,
                                                                                    tmp_path):
    """``backend: llm`` for neighbours, blanking and paraphrases: one instruction model (``lara.llm``, here on
    vLLM), the code's prompts, temperatures (0.8, 0.3, 0.7) and answer budgets (4000, 4000, 2000). vLLM answers
    a request from its prompt and seed alone (tests/fake_vllm.py); a blanked text's variants come as the code
    asks for them, one request for a JSON array of them, so they differ (the same prompt sent once per variant
    under one seed gave one paraphrase n times: RSI 0); the offline defaults stay as they were."""
    model = make_tiny_model(["Find 1 plus 2. Compute the similar problems, paraphrased versions [BLANK]."] * 20,
                            min_frequency=1)
    cfg = copy.deepcopy(default_config())
    cfg["lara"].update(llm={"model": model, "engine": "vllm"}, neighbours={"n": 2, "backend": "llm"},
                       blank={"backend": "llm", "num_blanks": 1}, paraphrase={"backend": "llm", "n_variants": 2})
    spec = validated(cfg)["lara"]

    def answer(prompt: str, seed: int, k: int) -> str:
        if "similar problems" in prompt:
            return '["Find 3 plus 5.", "Find 7 plus 9."]'
        if "paraphrased version" in prompt:
            problem = prompt.split("Problem:\n")[1].split("\n\nOutput")[0]
            if "create 2 paraphrased versions" in prompt:       # the code's request: a list of them
                return json.dumps([problem.replace("Find", word) for word in ("Compute", "Work out")])
            return problem.replace("Find", "Compute")            # a prompt for one paraphrase gets one
        question = prompt.rsplit("1. ", 1)[1].split("\n")[0]
        return json.dumps([re.sub(r"\d", BLANK, question, count=1)])

    requests = fake_vllm.install(monkeypatch, tmp_path, load_tokenizer(model), answer)
    questions = pd.DataFrame({"id": ["q"], "text": ["Find 1 plus 2."], "set": [EVALUATED]})
    table = perturbation_table(questions, backend_specs(spec, [], instruction_model(spec)), n_neighbours=2,
                               n_variants=2)
    asked = [(r["temperature"], r["max_new_tokens"], len(r["prompt_token_ids"])) for r in requests]
    assert asked == [(0.8, 4000, 1), (0.3, 4000, 3), (0.7, 2000, 3)]   # neighbours, blanks, paraphrases
    variants = table[table["form"] == "variant"].groupby("neighbour")["text"].agg(list)
    assert len(table) == 3 * 4 and all(len(set(v)) == 2 for v in variants)   # distinct: RSI has a spread
    assert table.loc[table["form"] == "blank", "text"].tolist() == [
        "Find [BLANK] plus 2.", "Find [BLANK] plus 5.", "Find [BLANK] plus 9."]
    decoded = load_tokenizer(model).decode(requests[1]["prompt_token_ids"][0])
    assert "You are a question editor" in decoded and "You are a math problem" in load_tokenizer(model).decode(
        requests[0]["prompt_token_ids"][0])
    with pytest.raises(ValueError, match="needs the lara.llm section"):
        backend_specs(spec, [], None)
    default = backend_specs(validated(default_config())["lara"], ["a"])
    assert default["neighbours"] == {"backend": "retrieval", "pool": ["a"], "dtype": "auto"}
    assert default["blank"] == {"backend": "numbers_entities"} and default["paraphrase"]["backend"] == "wordnet"


def test_features_of_distinct_texts_are_spread_back_to_every_row():
    table = pd.DataFrame({"text": ["b", "a", "b", "c"]})
    index = pd.DataFrame({"text": ["a", "b", "c"]})
    features = np.arange(3)[:, None, None] * np.ones((3, 2, 2))
    np.testing.assert_array_equal(aligned_features(table, index, features)[:, 0, 0], [1, 0, 1, 2])
    with pytest.raises(ValueError, match="1 perturbation text"):
        aligned_features(pd.DataFrame({"text": ["d"]}), index, features)


def _metrics(ids: list[str], rng, sets: str, shift: float = 0.0, layers: int = 4) -> pd.DataFrame:
    n = len(ids) * layers
    return pd.DataFrame({"id": np.repeat(ids, layers), "layer": np.tile(np.arange(1, layers + 1), len(ids)),
                         "rsm": rng.normal(size=n) + shift, "dc": rng.uniform(-1, 1, size=n),
                         "rsi": rng.normal(size=n) - shift, "set": sets})


def test_score_table_reads_labels_last_and_mixes_lara_with_self_critique():
    rng = np.random.default_rng(0)
    ids = [f"q{i}" for i in range(10)]
    metrics = pd.concat([_metrics(ids, rng, EVALUATED, shift=1.0), _metrics([f"r{i}" for i in range(8)], rng,
                                                                           REFERENCE)], ignore_index=True)
    baselines = pd.DataFrame({"id": ids[::-1], "lara/recall": rng.normal(size=10), "lara/cdd": rng.uniform(size=10),
                              "lara/self_critique": np.linspace(0, 1, 10)})
    split = pd.DataFrame({"id": ids, "label": [1, 0] * 5})
    scores = score_table(metrics, baselines, split, betas=[0.0, 1.0])
    assert scores["id"].tolist() == ids and scores["label"].tolist() == split["label"].tolist()
    assert {"lara", "lara/rsm", "lara/dc", "lara/rsi", "lara/no_dc", "lara/early", "lara/late", "lara/recall",
            "lara/lara+sc@0", "lara/lara+sc@1"} <= set(scores.columns)
    # beta = 0 is LaRA's percentile rank, beta = 1 Self-Critique's
    assert (scores["lara/lara+sc@0"].rank() == scores["lara"].rank()).all()
    np.testing.assert_allclose(scores.set_index("id")["lara/lara+sc@1"], (np.arange(10)[::-1] + 1) / 10)
    shuffled = split.assign(label=split["label"].to_numpy()[::-1])
    again = score_table(metrics, baselines, shuffled, betas=[0.0, 1.0])
    pd.testing.assert_frame_equal(scores.drop(columns="label"), again.drop(columns="label"))
    with pytest.raises(ValueError, match="different ids"):
        score_table(metrics, baselines, split.iloc[:5], betas=[0.5])


def test_the_in_set_reference_reproduces_the_released_codes_optimism_on_null_data_and_is_named_so():
    """Null data (members and non-members drawn alike): standardising on the split's own label-0
    questions (the code's default) scores above chance; the held-out reference does not."""
    held, in_set = [], []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        ids = [f"q{i}" for i in range(60)]
        metrics = pd.concat([_metrics(ids, rng, EVALUATED, layers=8),
                             _metrics([f"r{i}" for i in range(30)], rng, REFERENCE, layers=8)], ignore_index=True)
        split = pd.DataFrame({"id": ids, "label": [1, 0] * 30})
        baselines = pd.DataFrame({"id": ids, "lara/self_critique": rng.normal(size=60)})
        default = score_table(metrics, baselines, split)
        code = score_table(metrics, baselines, split, reference="in_set")
        assert "lara_in_set" not in default and "lara" not in code   # every in-set column says so in its name
        assert {"lara_in_set/rsm", "lara_in_set/late", "lara_in_set/lara+sc@0.65"} <= set(code.columns)
        held.append(roc_auc_score(default["label"], default["lara"]))
        in_set.append(roc_auc_score(code["label"], code["lara_in_set"]))
        if seed == 0:   # the in-set scores read the labels: shuffling them changes the scores
            shuffled = split.assign(label=split["label"].to_numpy()[::-1])
            again = score_table(metrics, baselines, shuffled, reference="in_set")
            assert not np.allclose(again["lara_in_set"], code["lara_in_set"])
    assert np.mean(in_set) > 0.55 and 0.4 < np.mean(held) < 0.6
    with pytest.raises(ValueError, match="in_set needs at least 2 label-0"):
        score_table(metrics, baselines, split.assign(label=[1] * 59 + [0]), reference="in_set")


# --- end to end (slow): the suite's world, the session's shared run ------------------------------------

@pytest.mark.slow
def test_rl_checkpoints_are_models_with_their_training_logs(suite_world):
    plan_dirs = sorted((suite_world / "results/rl").glob("*/epoch-*"))
    assert [p.name for p in plan_dirs] == ["epoch-1", "epoch-2"]
    (pool_path,) = suite_world.glob("results/pools/aime/*/pool.parquet")
    n_members = int(pd.read_parquet(pool_path)["label"].sum())
    corpus_size = suite_world_config()["models"]["grpo_e1"]["corpus"]["size"]
    for epoch, folder in enumerate(plan_dirs, start=1):
        assert (folder / "model/model.safetensors").exists() and (folder / "model/tokenizer.json").exists()
        assert (folder / "trainer/optimizer.pt").exists() and not (folder / "work").exists()
        log = pd.read_parquet(folder / "log.parquet")
        assert log["epoch"].max() == pytest.approx(epoch) and np.isfinite(log["reward"].dropna()).all()
        corpus = pd.read_parquet(folder / "corpus.parquet")
        assert len(corpus) == corpus_size and corpus["target"].sum() == n_members   # every member, then filler
    summary = pd.read_parquet(suite_world / "results/evaluation/summary.parquet")
    assert {"loss", "min_k@0.2", "min_k_plus_plus@0.2"} <= set(summary.loc[summary["model"] == "grpo_e1", "method"])


@pytest.mark.slow
def test_lara_outputs_follow_their_schemas_and_join_the_results_table(suite_world):
    world = suite_world_config()
    cfg = world["lara"]
    r = suite_world / "results/lara"
    n_forms = cfg["paraphrase"]["n_variants"] + 2                  # original, blanked, paraphrases
    tables = list(r.glob("perturbations/aime/*/seed-*/perturbations.parquet"))
    assert len(tables) == len(world["seeds"])
    for table_path in tables:
        table = pd.read_parquet(table_path)
        assert {"id", "role", "neighbour", "form", "variant", "text", "set"} <= set(table.columns)
        assert table.groupby("id").size().eq((cfg["neighbours"]["n"] + 1) * n_forms).all()
        assert table.loc[table["set"] == REFERENCE, "id"].nunique() == cfg["controls"]["n_reference"]
    for index_path in r.glob("features/*/aime/*/index.parquet"):
        index = pd.read_parquet(index_path)
        assert {"text", "shard", "row"} <= set(index.columns) and not index["text"].duplicated().any()
        assert (index_path.parent / "shards/shard-00000.safetensors").exists()
    metrics = pd.read_parquet(next(r.glob("scores/sft/aime/*/seed-0/metrics.parquet")))
    n_layers = world["models"]["base"]["architecture"]["num_layers"]
    assert sorted(metrics["layer"].unique()) == list(range(n_layers))   # hidden_states[0..L-1], as the code
    assert set(metrics["set"]) == {EVALUATED, REFERENCE}
    summary = pd.read_parquet(suite_world / "results/evaluation/summary.parquet")
    lara = summary[summary["method"].str.startswith("lara")]
    assert set(lara["model"]) == set(cfg["models"])
    assert {"lara", "lara/rsm", "lara/dc", "lara/rsi", "lara/early", "lara/mid", "lara/late", "lara/self_critique",
            "lara/recall", "lara/cdd", "lara/recall_lara_code", "lara/ppl_response", "lara/min_k_response@0.2",
            "lara/min_k_plus_plus_response@0.2", "lara/dime", "lara/lara+sc@0.65"} <= set(lara["method"])
    assert lara["auroc_mean"].between(0, 1).all() and (lara["n_seeds"] == len(world["seeds"])).all()
    report = (r / "report/aime/lara.md").read_text()
    assert "| aime | grpo_e2 | lara |" in report and "| aime | sft | loss |" in report
    assert (r / "report/aime/layers.png").stat().st_size > 10_000


@pytest.mark.slow
def test_lara_scores_do_not_change_when_the_evaluation_labels_are_shuffled(shuffled_world):
    (target,) = [t for t in shuffled_world["before"] if "/lara/" in t]
    before = shuffled_world["before"][target]
    after = pd.read_parquet(shuffled_world["workdir"] / target)
    shuffled = shuffled_world["splits"]["aime"]
    assert after.set_index("id")["label"].to_dict() == shuffled.set_index("id")["label"].to_dict()
    pd.testing.assert_frame_equal(before.drop(columns="label"), after.drop(columns="label"))
