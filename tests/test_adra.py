"""ADRA / ADRA+ / N-Sampling logic (mialab.adra): tasks and prompts, rewards, the unlabelled training
set, scoring, the report, and (slow) GRPO / SFT-ablation training with exact resume on a tiny Llama."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from workflow_helpers import grpo_settings, ns_task

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from mialab.adra.report import step_curve, summary, with_steps
from mialab.adra.rewards import (
    adra_reward,
    combine,
    distractor_references,
    membership_weights,
    pair_partners,
    parse_judge_score,
    shares_prefix_pairs,
)
from mialab.adra.training import training_set
from mialab.lm.prompts import prompt_token_ids
from mialab.n_sampling.attack import rollout_metrics, score_table, top_k_mean
from mialab.n_sampling.tasks import fit_prefix, known_templates, load_template, prompts, trainer_prompt

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron sigma tau upsilon phi chi psi "
         "omega river stone cloud field light").split()


@pytest.fixture(scope="module")
def tokenizer():
    from mialab.lm.tiny import train_tokenizer

    return train_tokenizer([" ".join(WORDS)] * 50, vocab_size=300)


def candidates(n: int = 6, words: int = 8) -> pd.DataFrame:
    """Unlabelled candidates with distinct prefixes and suffixes of ``words`` words."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        prefix = " ".join(rng.choice(WORDS, words))
        suffix = " ".join(rng.choice(WORDS, words))
        rows.append({"id": f"c{i}", "prefix": prefix, "suffix": suffix, "text": f"{prefix} {suffix}", "source": "t"})
    return pd.DataFrame(rows)


TASK = ns_task("continuation", assistant_prefix_ratio=0.25, max_new_tokens=8)


# --- rewards -----------------------------------------------------------------------------------

def test_contrastive_rule_on_hand_numbers():
    # c_all = [0.8, 0.5, 0.3], w = 0.9 -> p = 0.1 -> 0.1 * 0.8 + 0.9 * 0.5 = 0.53
    assert combine(np.array([0.8, 0.5, 0.3]), "contrastive", 0.9) == pytest.approx(0.53)
    # a likely member (w = 0) is rewarded for its own suffix only when it is the best match
    assert combine(np.array([0.8, 0.5, 0.3]), "contrastive", 0.0) == pytest.approx(0.8)
    assert combine(np.array([0.2, 0.5, 0.3]), "contrastive", 0.0) == pytest.approx(0.5)
    assert combine(np.array([0.2, 0.5]), "own", np.nan) == 0.2 and combine(np.array([0.2, 0.5]), "max", np.nan) == 0.5
    with pytest.raises(ValueError, match="known: own, max, contrastive"):
        combine(np.array([0.2]), "mean", 0.0)


def test_adra_reward_scores_each_rollout_against_its_row_references():
    own, other = "the quick brown fox jumps over the lazy dog", "seven silver swans swam south in spring"
    reward = adra_reward("trio", tau=1.5)
    values = reward([own, own, own, other], references=[[own], [own, other], [other, own], [own, other]],
                    rule=["own", "contrastive", "contrastive", "max"], weight=[np.nan, 0.9, 0.2, np.nan],
                    prompts=["p"] * 4, trainer_state=None)
    # identical text: trio = 1; disjoint: 0. Row 2: 0.1 * max(1, 0) + 0.9 * max(0) = 0.1;
    # row 3 (own suffix disjoint, the distractor identical): 0.8 * 1 + 0.2 * 1 = 1
    assert values == pytest.approx([1.0, 0.1, 1.0, 1.0])


def test_embedding_reward_ablation_is_one_plus_cos_over_two_under_the_same_rules():
    """Table 10's embedding reward (the code's embedding.py): (1 + cos) / 2, max over the row's references."""
    from mialab.similarity.metrics import embedding_cosine

    own, other = "the quick brown fox jumps over the lazy dog", "seven silver swans swam south in spring"
    reward = adra_reward("embedding", embedding_model="all-MiniLM-L6-v2")
    values = reward([own, other], references=[[own], [own, other]], rule=["own", "max"], weight=[np.nan] * 2)
    cos = embedding_cosine([other], [own], model="all-MiniLM-L6-v2")[0]
    assert values[0] == pytest.approx(1.0, abs=1e-5) and values[1] == pytest.approx(1.0, abs=1e-5)
    assert reward([other], references=[[own]], rule=["own"], weight=[np.nan])[0] == pytest.approx((1 + cos) / 2)
    with pytest.raises(ValueError, match="embedding_model"):
        adra_reward("embedding")


def test_judge_score_parses_the_codes_format_and_its_fallback():
    """The released code's ``_extract_reward_score`` (0-1 scale): REWARD line clamped, else the last 0.ddd / 0 / 1."""
    assert parse_judge_score("REWARD: 0.750") == 0.75
    assert parse_judge_score("reasoning...\nreward:0.2\nREWARD: 0.9") == 0.2  # the first REWARD line, any case
    assert parse_judge_score("REWARD: 7") == 1.0 and parse_judge_score("REWARD: .5") == 0.5
    assert parse_judge_score("somewhere between 0.4 and 0.65") == 0.65
    assert parse_judge_score("I cannot rate this") is None and parse_judge_score("") is None


def test_judge_reward_is_batched_in_unit_range_deterministic_and_unparsable_counts_zero(monkeypatch, caplog):
    """Table 10's judge reward: one generate call per batch over every (rollout, reference) pair, the code's
    prompt filled with problem, reference and candidate; an answer without a score counts 0.0 (the code's rule)."""
    import mialab.adra.rewards as rewards

    calls = []

    def stub(prompts: list[str]) -> list[str]:
        calls.append(prompts)
        pairs = [p.split("- Reference solution:")[1].split("- Candidate solution:") for p in prompts]
        # identical: 1; a fox against the swans: unparsable; otherwise 0.25
        return ["REWARD: 1.000" if r.split() == c.split()[:len(r.split())] else
                "no idea" if "fox" in r and "swans" in c else "REWARD: 0.250" for r, c in pairs]

    opened = []
    monkeypatch.setattr(rewards, "judge_generator", lambda **judge: opened.append(judge) or stub)
    judge = {"model": "judge-model", "engine": "hf", "backend_options": None, "temperature": 0.7, "top_p": 0.8,
             "max_new_tokens": 512, "seed": 0}
    own, other = "the quick brown fox", "seven silver swans"
    reward = adra_reward("judge", judge=judge)
    batch = dict(completions=[own, other, "a red fox"], references=[[own], [own, other], [own]],
                 rule=["own", "max", "own"], weight=[np.nan] * 3,
                 prompts=["Problem one", "Problem two", "Problem three"])
    with caplog.at_level("WARNING"):
        values = reward(**batch)
    assert values == [1.0, 1.0, 0.25] and all(0.0 <= v <= 1.0 for v in values)
    assert "1 of 4 answers have no score" in caplog.text
    assert len(calls) == 1 and len(calls[0]) == 4, "all pairs of a batch in one judge call"
    assert calls[0][1].startswith("Rate the two math problem solutions") and "Problem two" in calls[0][1]
    assert "REWARD: <number between 0 and 1 with 3 decimals>" in calls[0][0]
    assert reward(**batch) == values and len(opened) == 1, "deterministic; the judge is started once"
    with pytest.raises(ValueError, match=r"adra.reward.judge.model"):
        adra_reward("judge")


def test_judge_config_defaults_come_from_the_schema_and_a_missing_judge_fails_at_plan_time():
    """``adra.reward.judge`` is absent unless written (the other rewards' stage keys stay as they were); written, the
    schema fills the code's defaults; ``metric: judge`` without it is a plan-time error naming the key."""
    import copy

    from workflow_helpers import merged_config, validated

    from mialab.adra.plan import ADRAPlan
    from mialab.n_sampling.plan import NSamplingPlan
    from mialab.pipeline.config import ConfigError
    from mialab.pipeline.plan import Plan

    cfg = merged_config("config.yaml", "configs/tiny_adra.yaml")
    assert "judge" not in validated(copy.deepcopy(cfg))["adra"]["reward"]
    cfg["adra"]["reward"]["metric"] = "judge"
    with pytest.raises(ConfigError, match=r"adra.reward.judge: .* needs a judge model"):
        full = validated(copy.deepcopy(cfg))
        ADRAPlan(NSamplingPlan(Plan(full), full), full)
    cfg["adra"]["reward"]["judge"] = {"model": "Qwen/Qwen3-32B"}
    full = validated(cfg)
    assert full["adra"]["reward"]["judge"] == {"model": "Qwen/Qwen3-32B", "engine": "hf", "backend_options": None,
                                               "temperature": 0.7, "top_p": 0.8, "max_new_tokens": 512, "seed": 0}
    ADRAPlan(NSamplingPlan(Plan(full), full), full)
    adra_reward(**full["adra"]["reward"])  # every schema key is an argument of the reward


def test_distractors_are_other_candidates_seeded_and_a_pair_partner_comes_first():
    ids = [f"c{i}" for i in range(10)]
    targets = [f"target of {i}" for i in ids]
    refs = distractor_references(ids, targets, 7, seed=3)
    for i, r in zip(ids, refs):
        assert r[0] == f"target of {i}" and len(r) == 8
        assert f"target of {i}" not in r[1:], "a candidate is never its own distractor"
    assert refs == distractor_references(ids, targets, 7, seed=3)
    assert refs != distractor_references(ids, targets, 7, seed=4)
    forced = distractor_references(ids, targets, 7, seed=3, forced={"c0": "c5", "c5": "c0"})
    assert forced[0][1] == "target of c5" and forced[5][1] == "target of c0"


def test_membership_weights_are_min_max_normalised_lower_for_members_and_ignore_labels():
    scores = pd.DataFrame({"id": ["a", "b", "c"], "label": [1, 0, 1], "min_k_plus_plus@0.2": [-1.0, -3.0, -2.0]})
    w = membership_weights(scores, "min_k_plus_plus@0.2", ["c", "a", "b"])
    np.testing.assert_allclose(w, [0.5, 0.0, 1.0])  # the highest score (most member-like) gets w = 0
    shuffled = scores.assign(label=[0, 1, 0])
    np.testing.assert_array_equal(membership_weights(shuffled, "min_k_plus_plus@0.2", ["c", "a", "b"]), w)
    with pytest.raises(KeyError, match="known: min_k_plus_plus@0.2"):
        membership_weights(scores.drop(columns="label"), "zlib", ["a"])


# --- tasks and prompts -------------------------------------------------------------------------

def test_templates_load_without_the_trailing_newline_and_unknown_names_list_the_known_ones():
    assert load_template("continuation") == "{prefix}"
    assert {"continuation", "wikipedia", "math"} <= set(known_templates())
    assert load_template("math").endswith("{prefix}")
    with pytest.raises(KeyError, match="known: .*continuation"):
        load_template("contnuation")


def test_fit_prefix_drops_the_first_words_until_the_prompt_fits(tokenizer):
    prefix, suffix = " ".join(WORDS), "river stone cloud field"
    full = len(prompt_token_ids(tokenizer, f"{prefix} river", "plain"))
    assert fit_prefix(tokenizer, "{prefix}", prefix, suffix, prompt_format="plain", ratio=0.25, max_tokens=full) == prefix
    cut = fit_prefix(tokenizer, "{prefix}", prefix, suffix, prompt_format="plain", ratio=0.25, max_tokens=12)
    assert prefix.endswith(cut) and len(cut.split()) < len(WORDS)
    assert len(prompt_token_ids(tokenizer, f"{cut} river", "plain")) <= 12
    longer = " ".join(prefix.split()[-len(cut.split()) - 1:])
    assert len(prompt_token_ids(tokenizer, f"{longer} river", "plain")) > 12, "as few words as needed are dropped"
    with pytest.raises(ValueError, match="even without prefix words"):
        fit_prefix(tokenizer, "{prefix}", prefix, " ".join(WORDS * 3), prompt_format="plain", ratio=0.5, max_tokens=4)


def test_trainer_prompts_tokenise_to_the_engine_prompt_ids(tokenizer):
    for prompt_format in ("plain", "chat", "verl"):
        text = prompts(candidates(1), tokenizer, TASK, prompt_format=prompt_format)[0]
        special = prompt_format != "verl"   # GRPOSettings.prompt_special_tokens, as adra.stages.train sets it
        ids = tokenizer(trainer_prompt(tokenizer, text, prompt_format), add_special_tokens=special)["input_ids"]
        assert ids == prompt_token_ids(tokenizer, text, prompt_format), prompt_format
    assert trainer_prompt(tokenizer, "<s>hello", "plain") == "hello"
    assert trainer_prompt(tokenizer, "<s>hello", "verl") == "<s>hello"


# --- the training set --------------------------------------------------------------------------

def test_training_set_refuses_labels_and_the_sft_target_skips_the_given_words(tokenizer):
    cands = candidates()
    with pytest.raises(ValueError, match="unlabelled"):
        training_set(cands.assign(label=1), tokenizer, TASK, "adra", prompt_format="plain", seed=0, reference="suffix")
    adra = training_set(cands, tokenizer, TASK, "adra", prompt_format="plain", seed=0, reference="target")
    suffix = cands["suffix"][0].split()
    assert adra["references"][0] == [" ".join(suffix[2:])]  # floor(0.25 * 8) = 2 words given
    assert adra["prompt"][0].endswith(" ".join(suffix[:2])) and set(adra["rule"]) == {"own"}
    rand = training_set(cands, tokenizer, TASK, "adra", prompt_format="plain", seed=0, random_suffixes=2, reference="target")
    assert set(rand["rule"]) == {"max"} and all(len(r) == 3 for r in rand["references"])
    plus = training_set(cands, tokenizer, TASK, "adra_plus", prompt_format="plain", seed=0, distractors=3,
                        weights=np.linspace(0, 1, len(cands)), reference="target")
    assert set(plus["rule"]) == {"contrastive"} and all(len(r) == 4 for r in plus["references"])
    np.testing.assert_allclose(plus["weight"], np.linspace(0, 1, len(cands)))
    sft = training_set(cands, tokenizer, TASK, "adra_sft", prompt_format="plain", seed=0)
    assert sft["completion"][0] == " " + " ".join(suffix[2:])
    with pytest.raises(ValueError, match="unknown reward reference"):
        training_set(cands, tokenizer, TASK, "adra", prompt_format="plain", seed=0)


def test_the_reward_compares_with_the_whole_suffix_given_words_included_as_the_codes_target_gt(tokenizer):
    """The released code's reward reads the data scripts' target_gt (the whole solution / suffix, own first, then
    the random others'; post_training_custom_mia.py transform_example), which lexical.py's _filter_refs returns
    before the truncate_prefix_ratio it applies to the ground truth: the 25% the prompt gives is in the reference."""
    from mialab.pipeline.config import config_schema

    cands = candidates()
    own = training_set(cands, tokenizer, TASK, "adra", prompt_format="plain", seed=0, reference="suffix")
    assert own["references"].tolist() == [[s] for s in cands["suffix"]]
    rand = training_set(cands, tokenizer, TASK, "adra", prompt_format="plain", seed=0, random_suffixes=2, reference="suffix")
    plus = training_set(cands, tokenizer, TASK, "adra_plus", prompt_format="plain", seed=0, distractors=3,
                        weights=np.linspace(0, 1, len(cands)), reference="suffix")
    for rows in (rand, plus):
        assert all(refs[0] == s and set(refs) <= set(cands["suffix"]) for refs, s in zip(rows["references"],
                                                                                           cands["suffix"]))
    target = training_set(cands, tokenizer, TASK, "adra", prompt_format="plain", seed=0, random_suffixes=2, reference="target")
    assert [len(r[0].split()) for r in target["references"]] == [6] * len(cands)   # the same draw, 2 words fewer
    assert config_schema()["properties"]["adra"]["properties"]["reward_reference"]["default"] == "suffix"


def test_pair_rule_one_example_per_shared_prefix_pair_rewarded_for_the_better_suffix(tokenizer):
    cands = candidates(4)
    cands["pair_id"] = ["p0", "p0", "p1", "p1"]
    cands.loc[1, "prefix"], cands.loc[3, "prefix"] = cands.loc[0, "prefix"], cands.loc[2, "prefix"]
    assert shares_prefix_pairs(cands) and pair_partners(cands) == {"c0": "c1", "c1": "c0", "c2": "c3", "c3": "c2"}
    task = ns_task("continuation", assistant_prefix_ratio=0.0, max_new_tokens=8)
    rows = training_set(cands, tokenizer, task, "adra", prompt_format="plain", seed=0, reference="suffix")
    assert list(rows["id"]) == ["c0", "c2"] and set(rows["rule"]) == {"max"}
    assert rows["references"][0] == [cands["suffix"][0], cands["suffix"][1]]
    reward = adra_reward("trio")
    assert reward([cands["suffix"][1]], references=[rows["references"][0]], rule=["max"], weight=[np.nan]) == [1.0]
    with pytest.raises(ValueError, match="ADRA\\+ does not apply"):
        training_set(cands, tokenizer, task, "adra_plus", prompt_format="plain", seed=0, weights=np.zeros(4), reference="suffix")
    with pytest.raises(ValueError, match="assistant_prefix_ratio to 0"):
        training_set(cands, tokenizer, TASK, "adra", prompt_format="plain", seed=0, reference="suffix")
    different = cands.assign(prefix=[f"other prefix {i}" for i in range(4)])  # WikiMIA-24 Hard style pairs
    assert not shares_prefix_pairs(different)
    # the code's WikiMIA-24 Hard ADRA data (augment_sampling_method perturbed): the paired article's suffix is the
    # first random suffix, then random others, as for ADRA+'s distractors
    rand = training_set(different, tokenizer, task, "adra", prompt_format="plain", seed=0, random_suffixes=2,
                        reference="suffix")
    partner = dict(zip(different["id"], different["suffix"][[1, 0, 3, 2]]))
    assert [refs[1] for refs in rand["references"]] == [partner[i] for i in rand["id"]]


# --- scoring and the report --------------------------------------------------------------------

def test_score_table_aggregates_n_rollouts_per_candidate_and_joins_labels_last():
    split = pd.DataFrame({"id": ["a", "b"], "suffix": ["one two three four five six seven eight"] * 2,
                         "label": [1, 0]})
    rollouts = pd.DataFrame({"id": ["a", "a", "b", "b"], "sample": [0, 1, 0, 1],
                             "text": ["three four five six seven eight", "zzz", "zzz", "yyy"]})
    metrics = rollout_metrics(rollouts, split, ratio=0.25, n=2)
    table = score_table(metrics, split, "n_sampling")
    assert list(table["label"]) == [1, 0]
    assert table.loc[0, "n_sampling/lcs_ratio_ref@bon"] == 1.0  # the suffix after the 2 given words
    assert table.loc[0, "n_sampling/lcs_ratio_ref@aon"] == 0.5
    assert table.loc[1, "n_sampling/jaccard@bon"] == 0.0
    assert "n_sampling/n_cand@aon" not in table.columns
    with pytest.raises(ValueError, match="need 3 rollouts"):
        rollout_metrics(rollouts, split, ratio=0.25, n=3)


def test_top_k_mean_and_the_report_summary():
    assert top_k_mean([0.9, 0.8, 0.7, 0.6, 0.5, 0.1]) == pytest.approx(0.7)
    rows = []
    for seed in (0, 1):
        for i, m in enumerate(["a@aon", "b@aon", "c@aon", "d@aon", "e@aon", "f@aon"]):
            rows.append({"model": "m", "seed": seed, "attack": "adra", "metric": m, "auroc": 0.5 + 0.05 * i + 0.1 * seed})
            rows.append({"model": "m", "seed": seed, "attack": "adra@step4", "metric": m, "auroc": 0.5})
            rows.append({"model": "m", "seed": seed, "attack": "adra_init", "metric": m, "auroc": 0.4})
        rows.append({"model": "m", "seed": seed, "attack": "passive", "metric": "loss", "auroc": 0.6 + 0.1 * seed})
    table = summary(pd.DataFrame(rows), primary="a@aon").set_index("attack")
    assert table.loc["adra", "top5_mean"] == pytest.approx(np.mean([0.65, 0.75]))  # 0.55..0.75 (+0.1)
    assert table.loc["adra", "primary_mean"] == pytest.approx(0.55) and table.loc["adra", "best_metric"] == "f@aon"
    assert table.loc["passive", "best_mean"] == pytest.approx(0.65) and pd.isna(table.loc["passive", "top5_mean"])
    curve = step_curve(table.reset_index(), {"m": {"adra": 12}})
    assert list(zip(curve["step"], curve["top5_mean"].round(3))) == [(0, 0.4), (4, 0.5), (12, 0.7)]
    assert list(with_steps(table.reset_index(), {"m": {"adra": 12}})["step"].fillna(-1)) == [12, 4, 0, -1]


# --- training (slow: a tiny random Llama, real TRL + peft) --------------------------------------

@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tokenizer) -> str:
    import torch

    from mialab.lm.tiny import init_model, llama_config, save_model

    model = init_model(llama_config(len(tokenizer), hidden_size=64, num_layers=2, num_heads=4, tokenizer=tokenizer),
                       seed=0)
    # 40 steps on random word sequences, so that rollouts are words and the reward varies
    rng, opt = np.random.default_rng(0), torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(40):
        batch = tokenizer([" ".join(rng.choice(WORDS, 12)) for _ in range(8)], return_tensors="pt", padding=True)
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        model(**batch, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    path = tmp_path_factory.mktemp("tiny") / "model"
    save_model(model, tokenizer, path)
    return str(path)


@pytest.mark.slow
def test_judge_reward_with_the_tiny_model_as_judge_on_cpu_is_in_unit_range_and_deterministic(tiny_model):
    """The judge on the rollout engine (hf backend, CPU): whatever the tiny model answers, r in [0, 1], repeatable."""
    judge = {"model": tiny_model, "engine": "hf", "backend_options": None, "temperature": 0.7, "top_p": 0.8,
             "max_new_tokens": 8, "seed": 0}
    batch = dict(completions=["alpha beta gamma", "river stone cloud"], references=[["alpha beta gamma"]] * 2,
                 rule=["own", "own"], weight=[np.nan] * 2, prompts=["delta epsilon", "zeta eta"])
    values = adra_reward("judge", judge=judge)(**batch)
    assert len(values) == 2 and all(0.0 <= v <= 1.0 for v in values)
    assert adra_reward("judge", judge=judge)(**batch) == values


def settings(**over):
    base = dict(lr=5e-3, beta=0.005, max_steps=4, num_generations=4, batch_size=8, max_completion_length=8,
                max_prompt_length=32, save_steps=2, save_total_limit=None, temperature=1.0, top_p=0.95, top_k=50,
                lora={"r": 4, "lora_alpha": 8, "target_modules": "all-linear"}, seed=0)
    return grpo_settings(**{**base, **over})


def adapter(path) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(path, "adapter_model.safetensors"))


def same(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def crashing(reward, after: int):
    """The reward, raising on its call ``after + 1``: a job killed mid-run (after the checkpoint of step 2)."""
    calls = {"n": 0}

    def crashing_reward(completions, **kwargs):
        calls["n"] += 1
        if calls["n"] > after:
            raise RuntimeError("simulated preemption")
        return reward(completions, **kwargs)

    return crashing_reward


@pytest.mark.slow
def test_adra_plus_resumed_after_a_crash_ends_with_the_uninterrupted_adapter(tiny_model, tokenizer, tmp_path):
    from mialab.adra.training import train_policy

    data = training_set(candidates(4), tokenizer, TASK, "adra_plus", prompt_format="plain", seed=0, distractors=2,
                        weights=np.array([0.0, 0.3, 0.6, 1.0]), reference="suffix").drop(columns="id")
    reward = adra_reward("trio")
    log = train_policy(tiny_model, data, "adra_plus", settings(), tmp_path / "a", reward, snapshot_steps=[2],
                       snapshot_dir=tmp_path / "a-policies")
    assert int(log["step"].max()) == 4 and np.isfinite(log["reward"].dropna()).all()
    assert {p.name for p in (tmp_path / "a-policies").iterdir()} == {"step-2", "final"}
    assert not (tmp_path / "a-policies" / "final" / "optimizer.pt").exists()
    with pytest.raises(RuntimeError, match="simulated preemption"):
        train_policy(tiny_model, data, "adra_plus", settings(), tmp_path / "b", crashing(reward, 2),
                     snapshot_steps=[2], snapshot_dir=tmp_path / "b-policies")
    assert (tmp_path / "b" / "checkpoint-2").is_dir() and not (tmp_path / "b-policies" / "final").exists()
    train_policy(tiny_model, data, "adra_plus", settings(), tmp_path / "b", reward, snapshot_steps=[2],
                 snapshot_dir=tmp_path / "b-policies")
    final_a, final_b = adapter(tmp_path / "a-policies" / "final"), adapter(tmp_path / "b-policies" / "final")
    assert same(final_a, final_b), "the resumed run must end with the uninterrupted run's adapter"
    assert same(adapter(tmp_path / "a-policies" / "step-2"), adapter(tmp_path / "b-policies" / "step-2"))
    assert not same(final_a, adapter(tmp_path / "a-policies" / "step-2")), "training changed the adapter"


@pytest.mark.slow
def test_sft_ablation_trains_a_lora_adapter_with_the_grpo_budget(tiny_model, tokenizer, tmp_path):
    from mialab.adra.training import train_policy
    from mialab.training.grpo import checkpoint_state

    data = training_set(candidates(4), tokenizer, TASK, "adra_sft", prompt_format="plain", seed=0).drop(columns="id")
    train_policy(tiny_model, data, "adra_sft", settings(), tmp_path / "w", None, snapshot_steps=[2],
                 snapshot_dir=tmp_path / "p")
    state = checkpoint_state(tmp_path / "p" / "final")
    assert state.global_step == 4 and state.train_batch_size == 2  # 8 completions / 4 rollouts = 2 prompts a step
    assert not same(adapter(tmp_path / "p" / "final"), adapter(tmp_path / "p" / "step-2"))


@pytest.mark.parametrize("cache", [None, "static"])
def test_rollouts_follow_the_schema_and_are_seeded(tokenizer, tmp_path, cache):
    """N-Sampling rollouts on the hf backend, its N samples sharing a prefill (the tiny world's) or
    with generate's preallocated (static) KV cache."""
    from mialab.lm.tiny import init_model, llama_config, save_model
    from mialab.n_sampling.stages import generate

    tiny_model = str(tmp_path / "model")  # untrained: the schema and the seeding do not need words
    save_model(init_model(llama_config(len(tokenizer), hidden_size=32, num_layers=1, num_heads=2, tokenizer=tokenizer),
                          seed=0), tokenizer, tiny_model)

    split = candidates(4).assign(label=[1, 0, 1, 0])
    sampling = {"n": 3, "temperature": 1.0, "top_p": 0.95, "top_k": 50, "seed": 7}
    kw = dict(prompt_format="plain", backend="hf", backend_options={"batch_size": 2, "device": "cpu", "cache_implementation": cache})
    (a,), (b,) = (generate(tiny_model, [split], TASK, samplings=[sampling], **kw) for _ in range(2))
    assert list(a.columns) == ["id", "sample", "text", "n_tokens", "finish_reason"]
    assert (a.groupby("id").size() == 3).all() and a["n_tokens"].le(TASK.max_new_tokens).all()
    pd.testing.assert_frame_equal(a, b)
    # one job over several seeds: each split gets exactly the rollouts it gets alone, under its own seed
    other = {**sampling, "seed": 8}
    (c,) = generate(tiny_model, [split.iloc[::-1]], TASK, samplings=[other], **kw)
    both = generate(tiny_model, [split, split.iloc[::-1]], TASK, samplings=[sampling, other], **kw)
    pd.testing.assert_frame_equal(both[0], a)
    pd.testing.assert_frame_equal(both[1], c)
    assert not a.sort_values(["id", "sample"])["text"].reset_index(drop=True).equals(
        c.sort_values(["id", "sample"])["text"].reset_index(drop=True))
    with pytest.raises(ValueError, match="2 split"):
        generate(tiny_model, [split, split], TASK, samplings=[sampling], **kw)


@pytest.mark.parametrize("pool_ratio,given,target_words", [(0.0, 25, 75), (0.25, 18, 57)])
def test_aime_candidate_gives_a_quarter_of_the_solution_once(tmp_path, pool_ratio, given, target_words):
    """The code: user turn = problem, assistant prefix = first 25% of the solution, target = the other
    75%. A pool that already cut 25% into the prefix would give 25 + 18 words and leave 57 (43.75% given)."""
    from mialab.data.registry import get_family
    from mialab.lm.prompts import prompt_text
    from mialab.text.prefix import split_assistant_prefix

    solution = " ".join(f"s{i}" for i in range(100))
    src = tmp_path / "aime.jsonl"
    pd.DataFrame([{"problem": "Find x.", "solution": solution, "year": 2024, "aime_number": 1,
                   "problem_number": 1}]).to_json(src, orient="records", lines=True)
    pool = get_family("aime")({"source": str(src), "solution_prefix_ratio": pool_ratio,
                               "membership": {"rule": "years", "member_years": [2024], "nonmember_years": [2025]}})
    row = pool.iloc[0]
    task = ns_task("continuation", assistant_prefix_ratio=0.25)
    shown, rest = split_assistant_prefix(row["suffix"], task.assistant_prefix_ratio)
    assert len(shown.split()) == given and len(rest.split()) == target_words
    assert 100 - target_words == len(row["prefix"].split()) - 2 + given  # "Find x." is 2 words
    if pool_ratio == 0:
        assert row["prefix"] == "Find x." and row["text"] == "Find x.\n\n" + solution
        assert prompt_text(None, task.template_text(), row["prefix"], row["suffix"], prompt_format="plain",
                           assistant_prefix_ratio=0.25) == "Find x. " + " ".join(f"s{i}" for i in range(25))
