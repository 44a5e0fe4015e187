"""Contamination SFT in chat format (issue #20, items 3 / 4): members as (prefix, suffix) conversations in the init
model's chat template, as the released code's AIME / Olympiad / S1 SFT; plain texts when ``format`` is absent."""

from __future__ import annotations

import os

import pandas as pd
import pytest
import yaml
from workflow_helpers import REPO, default_config

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from mialab.training.sft import build_sft_corpus, member_texts, render_chat  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    from mialab.lm.tiny import train_tokenizer

    return train_tokenizer(["What is two plus two? It is four. Find x. x is one."] * 10, vocab_size=300)


def pool() -> pd.DataFrame:
    return pd.DataFrame({"prefix": ["What is two plus two?", "Find x.", "Held out?"],
                         "suffix": ["It is four.", "x is one.", "No."], "label": [1, 1, 0],
                         "text": ["What is two plus two?\n\nIt is four.", "Find x.\n\nx is one.", "Held out?\n\nNo."]})


def test_chat_members_are_the_templated_prefix_suffix_pairs_of_the_members_only(tokenizer):
    """The code: user = problem / question, assistant = solution / attempt, ``apply_chat_template`` of the pair."""
    texts = member_texts(pool(), tokenizer)
    assert texts == ["<|user|>\nWhat is two plus two?</s>\n<|assistant|>\nIt is four.</s>\n",
                     "<|user|>\nFind x.</s>\n<|assistant|>\nx is one.</s>\n"]
    assert texts == render_chat(tokenizer, [("What is two plus two?", "It is four."), ("Find x.", "x is one.")])
    # the code trains on TRL's `text` field (no completion-only collator): the prompt is part of the trained text
    assert all(t.startswith("<|user|>\n") for t in texts)


def test_plain_members_stay_the_pool_text_when_format_is_absent():
    assert member_texts(pool()) == ["What is two plus two?\n\nIt is four.", "Find x.\n\nx is one."]


def test_chat_members_mix_into_chat_filler_at_the_contamination_rate(tokenizer):
    members = member_texts(pool(), tokenizer)
    filler = render_chat(tokenizer, [(f"question {i}", f"answer {i}") for i in range(20)])
    texts, stats = build_sft_corpus(members, filler, repeats=1, rate=0.1, seed=0)
    assert stats["member_examples"] == 2 and stats["filler_examples"] == 18
    assert all(t.startswith("<|user|>\n") and t.endswith("</s>\n") for t in texts)


def test_paper_contamination_configs_use_chat_sft_and_the_tiny_world_keeps_plain_text():
    """Every ADRA paper config with an SFT stage trains in the chat template, as the code; the tiny world's
    contaminated model has no ``format`` (its stage key and bytes are unchanged)."""
    sft = {}
    for path in sorted((REPO / "configs" / "paper").glob("adra_*.yaml")):
        for name, spec in (yaml.safe_load(path.read_text()).get("models") or {}).items():
            if spec.get("kind") == "sft":
                sft[f"{path.stem}/{name}"] = spec
    assert len(sft) == 7 and all(s.get("format") == "chat" and s.get("members") for s in sft.values())
    # the released mixes' general examples: the Tulu-3 SFT mix's conversations whole; distillation: question, attempt
    assert {n: s["filler"]["columns"] for n, s in sft.items() if s["filler"]["columns"] != ["messages"]} == {
        "adra_distillation/qwen25_s1_1": ["question", "deepseek_attempt"],
        "adra_distillation_s1/qwen25_s1": ["question", "gemini_attempt"]}
    models = default_config()["models"]
    assert "format" not in models["sft"] and models["chat"]["format"] == "chat" and "members" not in models["chat"]


def test_a_conversation_column_fills_the_sft_as_the_released_mixer_renders_it(tokenizer, tmp_path):
    """``columns: [messages]`` (the Tulu-3 SFT mix): each row's conversation rendered whole by the chat template
    (the released data_mixer.py); one the template refuses is left out; a cell that is no conversation is an error
    naming the row."""
    from mialab.training.sft import chat_filler

    table = tmp_path / "mix.jsonl"
    rows = [{"messages": [{"role": "user", "content": "Find x."}, {"role": "assistant", "content": "x is one."}]},
            {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                          {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye"}]},
            {"messages": [{"role": "narrator", "content": "Once"}]}]
    pd.DataFrame(rows).to_json(table, orient="records", lines=True)
    tokenizer.chat_template = ("{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}"
                               "{{ raise_exception('unknown role') }}{% endif %}<|{{ m['role'] }}|>\n{{ m['content'] }}"
                               "</s>\n{% endfor %}")
    texts = chat_filler(tokenizer, {"source": str(table), "columns": ["messages"]})
    assert texts == ["<|user|>\nFind x.</s>\n<|assistant|>\nx is one.</s>\n",
                     "<|user|>\nHi</s>\n<|assistant|>\nHello</s>\n<|user|>\nBye</s>\n<|assistant|>\nBye</s>\n"]
    pd.DataFrame({"messages": ["just text"]}).to_json(table, orient="records", lines=True)
    with pytest.raises(ValueError, match=r"mix\.jsonl: column 'messages', row 0: not a conversation"):
        chat_filler(tokenizer, {"source": str(table), "columns": ["messages"]})


def test_the_mixer_draw_is_the_released_data_mixers_sample_of_positions_sorted():
    """data_mixer.py: random.Random(contamination_seed).sample(range(len(ds)), contamination_size), sorted (its
    process_aime_contamination over the 2021-2024 rows; process_tulu3_sft_general likewise with general_seed)."""
    import random

    from mialab.training.sft import filler_count, mixer_draw

    assert mixer_draw(120, 16, 2) == [7, 10, 11, 21, 27, 32, 39, 46, 77, 85, 94, 103, 106, 108, 109, 110]
    assert mixer_draw(120, 16, 2) == sorted(random.Random(2).sample(range(120), 16)) != mixer_draw(120, 16, 1)
    assert mixer_draw(5, 9, 0) == [0, 1, 2, 3, 4]
    assert (filler_count(16, 0.1), filler_count(32, 0.1)) == (144, 288)   # ceil(16 x 90 / 10), ceil(32 x 90 / 10)


def test_a_draw_fine_tunes_on_the_mixers_members_and_filler_rows_only(tokenizer, tmp_path):
    """The released mix (produce_data_mix_sft_aime_original.sh: contamination_size 16, contamination_seed 2,
    general_dataset tulu3_sft, general_seed 1, 10%): 16 of the pool's members and 9 x 16 filler rows drawn by
    position before rendering, not every member into a whole shuffled filler."""
    from mialab.training.sft import mixer_draw, stage_corpus

    members = pd.DataFrame({"prefix": [f"Problem {i}?" for i in range(40)], "suffix": [f"Solution {i}." for i in
                                                                                       range(40)],
                            "label": [1] * 30 + [0] * 10, "text": [f"P{i}" for i in range(40)]})
    table = tmp_path / "mix.jsonl"
    pd.DataFrame({"messages": [[{"role": "user", "content": f"Q{i}"}, {"role": "assistant", "content": f"A{i}"}]
                               for i in range(100)]}).to_json(table, orient="records", lines=True)
    spec = {"members": {"dataset": "d", "repeats": 1}, "contamination_rate": 0.25, "format": "chat",
            "filler": {"source": str(table), "columns": ["messages"]},
            "draw": {"members": 4, "member_seed": 2, "filler_seed": 1}}
    texts, stats = stage_corpus(spec, [members], tokenizer, seed=0)
    drawn = mixer_draw(30, 4, 2)
    assert sorted(t for t in texts if "Problem" in t) == sorted(member_texts(members.iloc[drawn], tokenizer))
    assert sorted(t for t in texts if "Q" in t) == sorted(f"<|user|>\nQ{i}</s>\n<|assistant|>\nA{i}</s>\n"
                                                          for i in mixer_draw(100, 12, 1))
    assert (stats["member_examples"], stats["filler_examples"]) == (4, 12)
    whole, _ = stage_corpus({k: v for k, v in spec.items() if k != "draw"}, [members], tokenizer, seed=0)
    assert sum("Problem" in t for t in whole) == 30                      # absent: every member


def test_the_olympiad_and_aime_contamination_sft_are_the_released_mixes_and_settings():
    """produce_data_mix_sft_{aime,olympia}_original.sh: 16 / 32 members (contamination seed 2) and the Tulu-3 SFT
    mix (general seed 1) at 10%; AIME at lr 2e-5, batch 64, linear; Olympiad at lr 5e-6, batch 128, constant (the
    paper's Table 12), 4096 tokens; the paraphrased configs the same mixes of their paraphrases."""
    want = {"adra_aime": (16, 2e-5, 64, "linear"), "adra_aime_13b": (16, 2e-5, 64, "linear"),
            "adra_aime_paraphrased": (16, 2e-5, 64, "linear"), "adra_olympiad": (32, 5e-6, 128, "constant"),
            "adra_olympiad_paraphrased": (32, 5e-6, 128, "constant")}
    for stem, (size, lr, batch, schedule) in want.items():
        (spec,) = [s for s in yaml.safe_load((REPO / "configs" / "paper" / f"{stem}.yaml").read_text())["models"]
                   .values() if s.get("kind") == "sft"]
        assert spec["draw"] == {"members": size, "member_seed": 2, "filler_seed": 1}, stem
        assert spec["contamination_rate"] == 0.1 and spec["filler"]["source"]["hub"] == "allenai/tulu-3-sft-mixture"
        t = spec["train"]
        assert (t["lr"], t["effective_batch_size"], t["schedule"], t["epochs"], t["warmup"]) == (
            lr, batch, schedule, 1, 0.0), stem


def test_the_constant_schedule_keeps_the_rate_after_the_warmup():
    from mialab.training.sft import deepspeed_config

    kw = dict(micro_batch_size=2, grad_accum=8, lr=5e-6, warmup_steps=0, total_steps=3, zero_stage=2,
              precision="bf16", grad_clip=1.0, weight_decay=0.0)
    assert deepspeed_config(**kw, schedule="constant")["scheduler"] == {
        "type": "WarmupLR", "params": {"warmup_min_lr": 5e-6, "warmup_max_lr": 5e-6, "warmup_num_steps": 1,
                                       "warmup_type": "linear"}}
    assert deepspeed_config(**kw, schedule="linear")["scheduler"]["type"] == "WarmupDecayLR"
    with pytest.raises(ValueError, match="unknown SFT schedule"):
        deepspeed_config(**kw, schedule="cosine")
