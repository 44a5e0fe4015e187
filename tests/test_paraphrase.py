"""The paraphrase engine: offline WordNet rewriting on real text, LLM backends, split semantics."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from mialab.data.paraphrase import (
    candidate_edits,
    common_synonym,
    get_paraphraser,
    llm_paraphraser,
    load_paraphrase_template,
    paraphrase_setting,
    paraphrase_split,
)
from mialab.data.registry import get_family
from mialab.data.sampling import sample_split

ROOT = Path(__file__).resolve().parents[1]
WIKIMIA = ROOT / "resources" / "data" / "wikimia" / "WikiMIA_length64.parquet"
AIME = ROOT / "resources" / "data" / "aime" / "aime_1983_2023.json"
FIX = ROOT / "tests" / "fixtures"
MATH = re.compile(r"\$[^$]*\$")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


@pytest.fixture(scope="module")
def offline():
    return get_paraphraser("offline", rate=0.5, seed=0)


@pytest.fixture(scope="module")
def wikimia_texts() -> list[str]:
    return pd.read_parquet(WIKIMIA)["input"].tolist()[:60]


def content_words(text: str) -> set[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return {w for w in re.findall(r"[a-z]+", text.lower()) if w not in ENGLISH_STOP_WORDS}


def test_safe_synonym_choices():
    assert common_synonym("primarily") == "chiefly"  # SemCor: primarily 28, chiefly 11 in that sense
    assert common_synonym("found") is None  # may be the past tense of "find"
    assert common_synonym("study") is None  # noun and verb senses
    assert common_synonym("year") is None  # only "twelvemonth"/"yr": rare or too short


def test_candidate_edits_phrases_and_coordination():
    text = "For example, members and supporters do not agree, in spite of $x + 2 = 3$."
    edits = {text[s:e]: new for s, e, new in candidate_edits(text)}
    assert edits["For example"] == "For instance"
    assert edits["members and supporters"] == "supporters and members"
    assert edits["do not"] == "don't" and edits["in spite of"] == "despite"
    assert not any("$" in old for old in edits)


def test_offline_rewrites_keep_ids_numbers_and_most_words(offline, wikimia_texts):
    out = offline(wikimia_texts)
    assert len(out) == len(wikimia_texts)
    changed = [a != b for a, b in zip(wikimia_texts, out)]
    assert sum(changed) >= 0.6 * len(out)
    for src, new, edits in zip(wikimia_texts, out, map(candidate_edits, wikimia_texts)):
        assert (src != new) == bool(edits)  # every text with a safe edit gets at least one
        assert sorted(NUMBER.findall(src)) == sorted(NUMBER.findall(new))
        words = content_words(src)
        assert len(words & content_words(new)) >= 0.8 * len(words)
    assert offline(wikimia_texts) == out  # seeded by (seed, text)
    assert get_paraphraser("offline", rate=0.5, seed=1)(wikimia_texts) != out


def test_offline_keeps_latex(offline):
    solutions = pd.read_json(AIME)["solution"].tolist()[:15]
    out = offline(solutions)
    assert sum(a != b for a, b in zip(solutions, out)) >= 10
    for src, new in zip(solutions, out):
        assert MATH.findall(src) == MATH.findall(new)


def test_paraphrase_split_keeps_rows_and_shared_prefixes(offline):
    pool = get_family("s1")({"source": str(FIX / "s1k_1_1.jsonl")})
    split = sample_split(pool, 3, seed=0)
    para = paraphrase_split(split, offline)
    assert para[["id", "label", "pair_id"]].equals(split[["id", "label", "pair_id"]])
    assert (para["text"] == para["prefix"] + "\n\n" + para["suffix"]).all()
    assert (para.groupby("pair_id")["prefix"].nunique() == 1).all()
    assert (para["text"] != split["text"]).any() and (para["setting"] == "paraphrased").all()


def test_paraphrase_setting_semantics(offline):
    pool = get_family("wikimia")({"source": str(WIKIMIA)})
    split = sample_split(pool, 10, seed=0)
    parts, manifest = paraphrase_setting(split, offline, experiment="existing_model")
    assert list(parts) == ["evaluate"] and (parts["evaluate"]["setting"] == "paraphrased").all()
    assert manifest["setting"] == {"evaluate": "paraphrased"} and manifest["paraphraser"]["backend"] == "offline"
    parts, manifest = paraphrase_setting(split, offline, experiment="finetune")
    assert manifest["setting"] == {"train": "paraphrased", "evaluate": "original"}
    assert parts["evaluate"]["text"].equals(split["text"]) and (parts["evaluate"]["setting"] == "original").all()
    assert parts["train"]["id"].equals(split["id"])
    assert manifest["n_changed"] == int((parts["train"]["text"] != split["text"]).sum()) > 0
    with pytest.raises(KeyError, match="existing_model, finetune"):
        paraphrase_setting(split, offline, experiment="pretrain")


def test_the_workflow_stages_record_the_setting_and_refuse_a_paraphraser_that_changes_nothing(offline):
    from mialab.data.paraphrase import Paraphraser, paraphrased_pool, paraphrased_split

    pool = get_family("wikimia")({"source": str(WIKIMIA)}).head(40)
    split = sample_split(pool, 10, seed=0)
    out, info = paraphrased_split(split, offline, name="dataset 'wikimia' seed 0")
    assert out["id"].tolist() == split["id"].tolist() and info["setting"] == {"evaluate": "paraphrased"}
    out, info = paraphrased_pool(pool, offline, name="dataset 'wikimia' pool")
    assert info["n_rows"] == int((pool["label"] == 1).sum()) and 0 < info["n_changed"] <= info["n_rows"]
    assert info["setting"] == {"train": "paraphrased", "evaluate": "original"}
    same = Paraphraser("offline", {}, lambda texts: list(texts))
    with pytest.raises(ValueError, match="pool: the offline paraphraser changed none of"):
        paraphrased_pool(pool, same, name="dataset 'wikimia' pool")


def test_templates_and_generic_llm_backend():
    assert "mathematical content" in load_paraphrase_template(family="aime")
    assert "reasoning trace" in load_paraphrase_template(family="s1_1")
    assert load_paraphrase_template(family="wikimia") == load_paraphrase_template()
    with pytest.raises(FileNotFoundError, match="known: chat, default, math, reasoning"):
        load_paraphrase_template(template="nope")
    calls = []

    def generate(prompts: list[str]) -> list[str]:  # an engine that echoes the text in upper case
        calls.append(len(prompts))
        return [p.split("Text:\n", 1)[1].split("\n\nParaphrase:")[0].upper() for p in prompts]

    para = llm_paraphraser(generate, family="bookmia", batch_size=2)
    assert para(["one", "two", "three"]) == ["ONE", "TWO", "THREE"] and calls == [2, 1]
    with pytest.raises(ValueError, match="empty"):
        llm_paraphraser(lambda ps: [""] * len(ps))(["text"])


def test_hf_backend_with_a_tiny_llama(tmp_path, wikimia_texts):
    from mialab.lm.tiny import init_model, llama_config, save_model, train_tokenizer

    tok = train_tokenizer(wikimia_texts, vocab_size=300)
    # 1,024 positions: the paraphrase prompt of a WikiMIA text is ~560 of this 300-token vocabulary's tokens
    config = llama_config(len(tok), hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=1024,
                          tokenizer=tok)
    save_model(init_model(config, seed=0), tok, tmp_path)
    para = get_paraphraser("hf", model=str(tmp_path), max_new_tokens=6, temperature=1.0, batch_size=2,
                           device="cpu", dtype="float32", seed=0)
    out = para(wikimia_texts[:3])
    assert len(out) == 3 and all(out) and para(wikimia_texts[:3]) == out
    assert para.options["model"] == str(tmp_path) and para.backend == "hf"


def test_unknown_backends_and_the_llm_backends_are_the_engines(tmp_path):
    """hf / vllm paraphrase on the rollout engine, with its checks before anything loads: an engine argument
    outside vLLM's allow-list, or a model folder that declares its own code (never run for a paraphraser)."""
    import json

    from mialab.lm.loading import RemoteCodeRefused

    with pytest.raises(KeyError, match="hf, offline, vllm"):
        get_paraphraser("gemini")
    with pytest.raises(ValueError, match=r"engine_args: vLLM engine argument\(s\) worker_extension_cls not allowed"):
        get_paraphraser("vllm", model="any", engine_args={"worker_extension_cls": "evil.Ext"})
    (tmp_path / "config.json").write_text(json.dumps({"auto_map": {"AutoModelForCausalLM": "evil.EvilModel"}}))
    for backend in ("hf", "vllm"):
        with pytest.raises(RemoteCodeRefused, match="config.json declare"):
            get_paraphraser(backend, model=str(tmp_path))


def test_paraphrase_members_rewrites_only_the_members_of_a_pool(offline):
    from mialab.data.paraphrase import paraphrase_members, paraphraser_for

    pool = get_family("wikimia")({"source": str(WIKIMIA)}).head(40)
    out = paraphrase_members(pool, offline)
    members = (pool["label"] == 1).to_numpy()
    assert out["id"].tolist() == pool["id"].tolist() and out["label"].tolist() == pool["label"].tolist()
    assert out.loc[~members, "text"].tolist() == pool.loc[~members, "text"].tolist()
    assert (out.loc[members, "text"] != pool.loc[members, "text"]).mean() > 0.3
    assert set(out.loc[members, "setting"]) == {"paraphrased"} and set(out.loc[~members, "setting"]) == {"original"}
    assert (out["text"] == out["prefix"] + " " + out["suffix"]).all()
    # the workflow's entry: the dataset's config entry names the backend and its options
    para = paraphraser_for({"backend": "offline", "apply_to": "training", "options": {"rate": 0.5, "seed": 0}},
                           family="wikimia")
    assert para.backend == "offline" and para(pool["text"].head(5).tolist()) == offline(pool["text"].head(5).tolist())
