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
