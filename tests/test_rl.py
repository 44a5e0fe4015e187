"""GRPO runner (TRL + peft) on a tiny random Llama, RL rewards and the RL-contamination corpus."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from conftest import DATA, PROBLEMS, PROBLEMS_MODEL, SETTINGS, assert_same_weights, distinct_characters, stop_at, weights
from workflow_helpers import grpo_settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from mialab.data.registry import get_family
from mialab.data.rl_corpus import (
    build_corpus,
    filler_problems,
    pool_questions,
    pool_references,
    split_members,
    split_request,
)
from mialab.lm.loading import load_pretrained
from mialab.training.grpo import (
    GRPOSettings,
    checkpoint_state,
    epoch_seed,
    export_checkpoint,
    grpo_config,
    last_checkpoint,
    run_grpo,
    steps_per_epoch,
    truncate_prompt,
    update_arithmetic,
    vllm_generation,
)
from mialab.training.rewards import final_answer, make_reward, normalise_answer

AIME = ["resources/data/aime/aime_1983_2023.json", "resources/data/aime/aime_2024.json"]
TINY_MODEL = PROBLEMS_MODEL  # conftest.tiny_model


# --- rewards -----------------------------------------------------------------------------------

def test_final_answer_takes_the_last_boxed_else_the_last_number():
    assert final_answer(r"so $x = 3$ and \boxed{\frac{1}{2}} then \boxed{017}.") == "017"
    assert final_answer(r"\boxed{\frac{a}{b+1}}") == r"\frac{a}{b+1}"
    assert final_answer("first 12, then 1,000 apples") == "1,000"
    assert final_answer("no answer") is None
    assert normalise_answer("017") == "17" == normalise_answer("$17.0$") and normalise_answer("1,000") == "1000"


def test_answer_match_scores_one_for_the_right_final_answer_and_accepts_trainer_kwargs():
    reward = make_reward({"name": "answer_match"})
    got = reward(completions=[r"thus \boxed{017}", "the answer is 18", "no idea", [{"role": "assistant",
                 "content": "it is 17"}]], reference=["17"] * 4, prompts=["q"] * 4, trainer_state=None)
    assert got == [1.0, 0.0, 0.0, 1.0]


def test_reconstruction_reward_is_one_for_the_reference_and_zero_for_disjoint_text():
    reward = make_reward({"name": "reconstruction", "metric": "trio"})
    ref = "the sum of the first twenty odd numbers is four hundred"
    got = reward(completions=[ref, "zebra quantum violet", ref.rsplit(" ", 3)[0]], reference=[ref] * 3)
    assert got[0] == pytest.approx(1.0) and got[1] == 0.0 and 0.0 < got[2] < 1.0
    with pytest.raises(KeyError, match="known: answer_match, math_verify, reconstruction"):
        make_reward({"name": "accuracy"})


def test_math_verify_reward_as_the_lara_codes_reward_impl_version_3():
    """verl ``reward_impl_version=3``: ``"<think>\\n" + completion``, the part after ``</think>`` verified by
    math-verify against ``$answer$``; without ``</think>`` nothing is verified (0)."""
    reward = make_reward({"name": "math_verify"})
    got = reward(completions=[r"</think> so the answer is \boxed{57}", r"so the answer is \boxed{57}",
                              r"wait </think> \boxed{\frac{1}{2}}", r"</think> \boxed{58}"],
                 reference=["57", "57", "0.5", "57"], prompts=["q"] * 4)
    assert got == [1.0, 0.0, 1.0, 0.0]
    whole = make_reward({"name": "math_verify", "think": False})   # reward_impl_version 4
    assert whole(completions=[r"so the answer is \boxed{57}"], reference=["57"]) == [1.0]


# --- corpus ------------------------------------------------------------------------------------

def test_split_request_cuts_at_the_last_blank_line():
    assert split_request("Q line\n\nmore Q\n\nsolution head") == ("Q line\n\nmore Q", "solution head")
    assert split_request("Q\n\n") == ("Q", "")
    with pytest.raises(ValueError, match="no blank line"):
        split_request("no separator")


def test_rl_corpus_holds_every_member_no_non_member_and_fillers_unlike_any_pool_question():
    pool = get_family("aime")({"source": AIME, "max_words": 64, "solution_prefix_ratio": 0.25,
                                         "membership": {"rule": "random", "years": [2014, 2024], "seed": 0}})
    questions = pool_questions(pool, "request", max_words=44)
    assert questions.str.split().str.len().max() == 44 and not questions.str.contains("\n").any()
    assert (pool_references(pool).str.split().str.len() <= 64).all()
    fillers = filler_problems({"source": AIME[0], "columns": ["problem", "solution"], "where": [{"column": "year", "op": "<", "value": 2014}],
                               "max_words": 64}, max_words=44)
    n_members = int(pool["label"].sum())
    corpus = build_corpus(pool, fillers, size=n_members + 20, seed=0, max_words=44, reference_max_words=12,
                          template="{question}\n\n")
    assert len(corpus) == n_members + 20 and corpus["target"].sum() == n_members
    members = corpus[corpus["target"]]
    assert set(members["id"]) == set(pool.loc[pool["label"] == 1, "id"])
    assert not set(corpus["id"]) & set(pool.loc[pool["label"] == 0, "id"])
    assert not set(corpus.loc[~corpus["target"], "question"]) & set(questions)
    row = members.iloc[0]
    assert row["prompt"] == row["question"] + "\n\n"
    full_reference = pool_references(pool)[pool["id"] == row["id"]].item()
    assert row["reference"] == " ".join(full_reference.split()[:12])
    assert corpus["reference"].str.split().str.len().max() == 12
    again = build_corpus(pool, fillers, size=n_members + 20, seed=0, max_words=44, reference_max_words=12,
                         template="{question}\n\n")
    pd.testing.assert_frame_equal(corpus, again)


def test_rl_corpus_from_a_splits_members_takes_them_alone_plus_fillers_unlike_any_pool_question():
    """RL-MIA style (``members.split_seed``): the evaluated members plus fillers; the pool's other members
    and every non-member stay out, and no filler equals a pool question."""
    from mialab.data.sampling import sample_split

    pool = get_family("aime")({"source": AIME, "max_words": 64, "solution_prefix_ratio": 0.25,
                               "membership": {"rule": "random", "years": [2014, 2024], "seed": 0}})
    split = sample_split(pool, 10, seed=3)
    fillers = filler_problems({"source": AIME[0], "columns": ["problem", "solution"],
                               "where": [{"column": "year", "op": "<", "value": 2014}]}, max_words=44)
    ids = split_members(split, pool)
    assert len(ids) == 10 and ids < set(pool.loc[pool["label"] == 1, "id"])
    corpus = build_corpus(pool, fillers, size=40, seed=0, max_words=44, member_ids=ids)
    assert len(corpus) == 40 and set(corpus.loc[corpus["target"], "id"]) == ids
    assert not set(corpus["id"]) & (set(pool["id"]) - ids)
    assert not set(corpus.loc[~corpus["target"], "question"]) & set(pool_questions(pool, max_words=44))
    with pytest.raises(ValueError, match="no members of the pool"):
        split_members(split.assign(label=1), pool)


def test_a_plain_prompt_is_tokenized_without_special_tokens_where_the_settings_say_so_as_verl(tiny_model, tmp_path):
    """ADRA's prompts as verl tokenizes them (rl_dataset.py: the rendered text, add_special_tokens=False): no BOS before
    a Tulu / Llama prompt (GRPOSettings.prompt_special_tokens False, set by adra.stages.train for prompt_format verl);
    TRL's own tokenization, a BOS first, otherwise."""
    from datasets import Dataset

    from mialab.lm.loading import load_causal_lm, load_tokenizer
    from mialab.training.grpo import _trainer_class

    tok = load_tokenizer(tiny_model, padding_side="left")
    texts = ["User: the quick\nAssistant: brown", "User: a b c\nAssistant:"]

    def trainer(special: bool):
        return _trainer_class()[0](
            model=load_causal_lm(tiny_model, device="cpu"), reward_funcs=[distinct_characters],
            args=grpo_config(SETTINGS, tmp_path), processing_class=tok, prompt_special_tokens=special,
            train_dataset=Dataset.from_dict({"prompt": texts}))

    verl = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert trainer(False)._tokenize_prompts(texts)[0] == verl
    assert trainer(True)._tokenize_prompts(texts)[0] == [[tok.bos_token_id, *ids] for ids in verl]


def test_rl_prompts_are_conversations_rendered_with_the_chat_template_as_verls_rl_dataset(tiny_model, tmp_path):
    """The LaRA code's RL corpora (benchmarks/filtered_samples/*_rl_train_test/train.parquet) are chats: members
    with Eurus-2's system turn and its answer-format line, fillers with OpenR1's system turn and the bare problem;
    verl's RL dataset renders a chat with apply_chat_template(add_generation_prompt=True) and tokenizes that
    without special tokens (the code's reward pays 0 without ``</think>``, which its system turns ask for). The
    corpus keeps each prompt as that conversation and TRL renders it so, token for token."""
    from datasets import Dataset

    from mialab.data.sampling import sample_split
    from mialab.lm.loading import load_causal_lm, load_tokenizer
    from mialab.training.grpo import _trainer_class

    pool = get_family("aime")({"source": AIME, "max_words": 64, "solution_prefix_ratio": 0.25,
                               "membership": {"rule": "random", "years": [2014, 2024], "seed": 0}})
    ids = split_members(sample_split(pool, 10, seed=3), pool)
    fillers = filler_problems({"source": AIME[0], "columns": ["problem", "solution"],
                               "where": [{"column": "year", "op": "<", "value": 2014}]}, max_words=44)
    corpus = build_corpus(pool, fillers, size=40, seed=0, max_words=44, member_ids=ids, chat=True,
                          template="{question}\n\nPresent the answer in LaTex format: \\boxed{{Your answer}}",
                          system="Use the actions.", filler_template="{question}", filler_system="Think first.")
    member, filler = corpus[corpus["target"]].iloc[0], corpus[~corpus["target"]].iloc[0]
    assert member["prompt"] == [{"role": "system", "content": "Use the actions."}, {"role": "user", "content":
                                member["question"] + "\n\nPresent the answer in LaTex format: \\boxed{Your answer}"}]
    assert filler["prompt"] == [{"role": "system", "content": "Think first."},
                                {"role": "user", "content": filler["question"]}]
    plain = build_corpus(pool, fillers, size=40, seed=0, max_words=44, member_ids=ids)
    assert plain["prompt"].tolist() == plain["question"].tolist()          # absent chat: the text, as before
    with pytest.raises(ValueError, match="a system turn needs chat"):
        build_corpus(pool, fillers, size=40, seed=0, max_words=44, member_ids=ids, system="Use the actions.")
    tok = load_tokenizer(tiny_model, padding_side="left")
    trainer = _trainer_class()[0](
        model=load_causal_lm(tiny_model, device="cpu"), reward_funcs=[distinct_characters],
        args=grpo_config(SETTINGS, tmp_path), processing_class=tok,
        train_dataset=Dataset.from_pandas(corpus[["prompt", "reference"]], preserve_index=False))
    chats = [list(corpus["prompt"].iloc[i]) for i in range(3)]
    verl = [tok(tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False), add_special_tokens=False)
            ["input_ids"] for c in chats]                                  # verl's RLHFDataset.__getitem__
    assert trainer._tokenize_prompts(chats)[0] == verl
    seen = []   # and a GRPO step trains on the chats, the reward reading the assistant turns

    def reward(completions, **kwargs):
        seen.extend(completions)
        return distinct_characters([c[-1]["content"] for c in completions])

    step = GRPOSettings(**{**SETTINGS.__dict__, "max_steps": 1, "max_prompt_length": None})
    run_grpo(tiny_model, corpus[["prompt", "reference"]].head(8), reward, step, tmp_path / "run")
    assert seen and all(c[-1]["role"] == "assistant" for c in seen)


def test_rl_corpus_repeats_each_member_and_at_zero_fills_their_places_with_fillers():
    """``members.repeats`` (the exposure sweep's r): each member r times among the same fillers; 0 keeps
    every member out and the corpus at its size in distinct fillers; 1 is the corpus without the key."""
    from mialab.data.sampling import sample_split

    pool = get_family("aime")({"source": AIME, "max_words": 64, "solution_prefix_ratio": 0.25,
                               "membership": {"rule": "random", "years": [2014, 2024], "seed": 0}})
    ids = split_members(sample_split(pool, 10, seed=3), pool)
    fillers = filler_problems({"source": AIME[0], "columns": ["problem", "solution"],
                               "where": [{"column": "year", "op": "<", "value": 2014}]}, max_words=44)
    at = {r: build_corpus(pool, fillers, size=40, seed=0, max_words=44, member_ids=ids, repeats=r) for r in (0, 1, 4)}
    assert at[1].equals(build_corpus(pool, fillers, size=40, seed=0, max_words=44, member_ids=ids))
    assert len(at[4]) == 30 + 4 * 10 and at[4].loc[at[4]["target"], "id"].value_counts().eq(4).all()
    assert set(at[4].loc[~at[4]["target"], "id"]) == set(at[1].loc[~at[1]["target"], "id"])  # the same fillers
    assert len(at[0]) == 40 and not at[0]["target"].any() and at[0]["id"].is_unique
    assert not set(at[0]["id"]) & set(pool["id"])
    with pytest.raises(ValueError, match="repeats must be >= 0"):
        build_corpus(pool, fillers, size=40, member_ids=ids, repeats=-1)


# --- the GRPO runner ---------------------------------------------------------------------------

def test_truncate_prompt_keeps_the_last_tokens_and_a_leading_bos():
    assert truncate_prompt([0, 5, 6, 7, 8], 3, bos_token_id=0) == [0, 7, 8]
    assert truncate_prompt([5, 6, 7, 8], 3, bos_token_id=0) == [6, 7, 8]
    assert truncate_prompt([0, 5, 6], 3, bos_token_id=0) == [0, 5, 6]
    assert truncate_prompt([0, 5, 6], None, bos_token_id=0) == [0, 5, 6]


def test_settings_reject_unknown_keys_and_partial_prompt_groups():
    with pytest.raises(KeyError, match="unknown GRPO setting.*'learning_rate'"):
        GRPOSettings.from_config({"learning_rate": 1e-3})
    with pytest.raises(ValueError, match="multiple of num_generations"):
        grpo_settings(batch_size=6, num_generations=4)
    assert epoch_seed(0, 1) != epoch_seed(0, 0) != epoch_seed(1, 0)


def test_vllm_generation_is_used_only_on_gpus_where_vllm_is_installed(tmp_path):
    import importlib.util

    options = {"mode": "colocate", "tensor_parallel_size": 2, "gpu_memory_utilization": 0.3}
    assert vllm_generation(None, "cuda") == {} and vllm_generation(options, "cpu") == {}
    installed = importlib.util.find_spec("vllm") is not None  # the main venv has none: vLLM lives in .venv-vllm
    expected = {"use_vllm": True, "vllm_mode": "colocate", "vllm_tensor_parallel_size": 2,
                "vllm_gpu_memory_utilization": 0.3} if installed else {}
    assert vllm_generation(options, "cuda") == expected
    with pytest.raises(KeyError, match="unknown vLLM generation option.*'tp'.*known: .*tensor_parallel_size"):
        vllm_generation({"tp": 2}, "cpu")  # checked before the CPU fallback
    args = grpo_config(grpo_settings(num_generations=4, batch_size=8, vllm=options), tmp_path, device="cpu")
    assert args.use_vllm is False


def test_grpo_is_deterministic_changes_the_weights_and_passes_dataset_columns(tiny_model, tmp_path):
    seen = []

    def reward(completions, **kwargs):
        seen.append((len(completions), list(kwargs["reference"])))
        return distinct_characters(completions)

    a = run_grpo(tiny_model, DATA, reward, SETTINGS, tmp_path / "a")
    b = run_grpo(tiny_model, DATA, distinct_characters, SETTINGS, tmp_path / "b")
    assert checkpoint_state(a.checkpoint).global_step == 6  # 6 prompts, 2 per step, 2 epochs
    assert_same_weights(weights(a.checkpoint), weights(b.checkpoint))
    init = weights(tiny_model)
    assert any(not np.array_equal(init[k].numpy(), v.numpy()) for k, v in weights(a.checkpoint).items())
    assert len(seen) == 6 and all(n == 8 and len(refs) == 8 and set(refs) <= set(PROBLEMS) for n, refs in seen)
    assert {"reward", "reward_std", "epoch"} <= set(a.log.columns)


def test_verls_mini_batches_are_several_optimizer_steps_per_rollout_batch_as_trl_runs_them(tiny_model, tmp_path):
    """verl (the LaRA code's eurus_grpo.sh: 128 prompts per batch, ppo_mini_batch_size 8) samples a rollout batch
    once and takes one optimizer step per mini-batch of it (16); TRL's steps_per_generation does the same: the
    batch generated and scored once, steps_per_generation / grad_accum optimizer steps on it, and the epoch's
    step count (verl's drop_last batches x updates) is the one TRL plans (run_grpo checks it)."""
    seen = []

    def reward(completions, **kwargs):
        seen.append(len(completions))
        return distinct_characters(completions)

    s = GRPOSettings(**{**SETTINGS.__dict__, "epochs": 1, "num_generations": 2, "batch_size": 4,
                        "steps_per_generation": 3, "scale_rewards": "none", "loss_type": "dr_grpo"})
    assert update_arithmetic(s, 1) == {"rollout_prompts": 6, "update_prompts": 2, "updates_per_rollout": 3}
    assert update_arithmetic(s, 4) == {"rollout_prompts": 24, "update_prompts": 8, "updates_per_rollout": 3}
    run = run_grpo(tiny_model, DATA, reward, s, tmp_path / "run")
    assert checkpoint_state(run.checkpoint).global_step == 3 == steps_per_epoch(len(DATA), s)
    assert seen == [12]   # one rollout batch (6 prompts x 2), scored once, three updates on it
    with pytest.raises(ValueError, match="multiple of grad_accum"):
        GRPOSettings(**{**s.__dict__, "grad_accum": 2})


def test_resuming_a_killed_run_or_training_epoch_by_epoch_gives_the_uninterrupted_weights(tiny_model, tmp_path):
    full = weights(run_grpo(tiny_model, DATA, distinct_characters, SETTINGS, tmp_path / "full").checkpoint)
    # killed after step 4 (mid epoch 2, right after the step-4 checkpoint); rerun in the same folder
    work = tmp_path / "killed"
    run_grpo(tiny_model, DATA, distinct_characters, SETTINGS, work, callbacks=[stop_at(4)])
    assert last_checkpoint(work).endswith("checkpoint-4")
    assert_same_weights(full, weights(run_grpo(tiny_model, DATA, distinct_characters, SETTINGS, work).checkpoint))
    # epoch by epoch in separate folders, as the workflow's rl_contaminate jobs do
    first = run_grpo(tiny_model, DATA, distinct_characters, SETTINGS, tmp_path / "e1", until_epoch=1)
    assert checkpoint_state(first.checkpoint).global_step == 3
    second = run_grpo(tiny_model, DATA, distinct_characters, SETTINGS, tmp_path / "e2", resume_from=first.checkpoint)
    assert_same_weights(full, weights(second.checkpoint))
    # a job killed after its last save resumes to nothing left to do
    again = run_grpo(tiny_model, DATA, distinct_characters, SETTINGS, tmp_path / "e1", until_epoch=1)
    assert again.checkpoint == first.checkpoint and len(again.log) == len(first.log)


def test_lora_run_exports_a_merged_standalone_model(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    settings = GRPOSettings(**{**SETTINGS.__dict__, "epochs": 1,
                               "lora": {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}})
    run = run_grpo(tiny_model, DATA, distinct_characters, settings, tmp_path / "lora")
    assert os.path.exists(os.path.join(run.checkpoint, "adapter_model.safetensors"))
    with pytest.raises(ValueError, match="needs the run's init model"):
        export_checkpoint(run.checkpoint, tmp_path / "merged")
    export_checkpoint(run.checkpoint, tmp_path / "merged", init=tiny_model)
    merged = load_pretrained(AutoModelForCausalLM, str(tmp_path / "merged")).state_dict()
    init = load_pretrained(AutoModelForCausalLM, tiny_model).state_dict()
    assert merged.keys() == init.keys()
    changed = {k for k in init if not np.array_equal(init[k].numpy(), merged[k].numpy())}
    assert changed and all(".q_proj." in k or ".v_proj." in k for k in changed)


def test_a_non_finite_gradient_norm_stops_grpo_at_its_step():
    """On an H200 a GRPO step's gradient norm came out nan (cuDNN attention's backward); the next step then
    died in sampling with a device-side assert. The run stops at the step itself, naming it."""
    from transformers import TrainerControl, TrainerState

    from mialab.training.grpo import _trainer_class

    check = _trainer_class()[2]()
    state = TrainerState(global_step=3)
    check.on_log(None, state, TrainerControl(), logs={"grad_norm": 0.5, "loss": 0.1})
    with pytest.raises(FloatingPointError, match="GRPO step 3: the gradient norm is nan"):
        check.on_log(None, state, TrainerControl(), logs={"grad_norm": float("nan")})
