"""The scoring attacks (mialab.scoring.attacks: GradNorm, ReCaLL, DC-PDD) on a tiny Llama: their definitions
computed another way, scores independent of the other texts of a job, the inputs they may read, their errors,
and (with MIMIR_CODE naming a local checkout of MIMIR, https://github.com/iamgroot42/mimir) equality with
MIMIR's implementation, whose modules are imported from that checkout and never copied here."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from mialab.lm.loading import load_causal_lm, load_tokenizer
from mialab.lm.logprobs import token_stats
from mialab.pipeline.config import ConfigError
from mialab.scoring.attacks import ATTACKS, Texts
from mialab.scoring.attacks.dc_pdd import first_occurrences, token_frequencies
from mialab.scoring.baselines import check_methods, score_columns
from mialab.scoring.run import score_splits

SENTENCES = ["the cat sat on the mat and looked at the dog", "a dog ran in the park after a red ball",
             "we read a book about the sea and the ships", "the sun rose over the hills and the river",
             "birds sang in the trees near the old house", "she wrote a letter to her friend in the city"]
TINY_MODEL = {"corpus": SENTENCES * 30, "vocab_size": 300}  # conftest.tiny_model
SCORING = {"methods": ["loss", "gradnorm", "recall", "dc_pdd"], "k": [0.2], "max_length": 128,
           "truncation": "truncate", "truncation_warn": 1.0, "dtype": "float32", "device": "cpu",
           "gradnorm": {"p": "inf"}, "recall": {"num_shots": 2, "shot_max_words": None},
           "dc_pdd": {"corpus": {"source": "corpus.csv"}, "cap": 0.01, "max_tokens": 1024}}


@pytest.fixture(scope="module")
def model(tiny_model):
    return load_causal_lm(tiny_model, dtype="float32", device="cpu"), load_tokenizer(tiny_model)


def job(model, texts, scoring=SCORING, inputs=None, split_ids=()):
    lm, tok = model
    stats = token_stats(lm, tok, texts, max_length=scoring["max_length"], truncation=scoring["truncation"])
    return Texts(lm, tok, list(texts), [str(i) for i in range(len(texts))], stats, scoring, inputs or {},
                 frozenset(split_ids))


def pool_file(tmp_path) -> str:
    pool = pd.DataFrame({"id": [f"p{i}" for i in range(6)], "text": SENTENCES, "label": [1, 0, 0, 1, 0, 0]})
    pool.to_parquet(tmp_path / "pool.parquet")
    return str(tmp_path / "pool.parquet")


def test_gradnorm_is_minus_the_mean_parameter_gradient_norm(model):
    lm, tok = model
    text = SENTENCES[0]
    lm.zero_grad()
    with torch.enable_grad():
        ids = torch.tensor([tok(text)["input_ids"]])
        lm(input_ids=ids, labels=ids).loss.backward()  # transformers' mean token loss
    expected = {p: -float(torch.stack([w.grad.norm(p) for w in lm.parameters()]).mean()) for p in (1, 2, np.inf)}
    lm.zero_grad()
    for p, name in ((1, 1), (2, 2), (np.inf, "inf")):
        got = ATTACKS.get("gradnorm").score(job(model, [text], {**SCORING, "gradnorm": {"p": name}}))
        assert got[0] == pytest.approx(expected[p], rel=1e-5)
    assert all(w.grad is None for w in lm.parameters())  # no gradient left behind


@pytest.mark.parametrize("name", ["gradnorm", "recall", "dc_pdd"])
def test_a_text_scores_the_same_alone_and_among_others(name, model, tmp_path):
    inputs = {"pool": pool_file(tmp_path)}
    scoring = SCORING
    if name == "dc_pdd":
        pd.DataFrame({"text": SENTENCES[:4]}).to_csv(tmp_path / "corpus.csv", index=False)
        scoring = {**SCORING, "dc_pdd": {**SCORING["dc_pdd"], "corpus": {"source": str(tmp_path / "corpus.csv")}}}
    attack = ATTACKS.get(name)
    both = attack.score(job(model, [SENTENCES[0], SENTENCES[3]], scoring, inputs, split_ids={"p0", "p3"}))
    alone = attack.score(job(model, [SENTENCES[3]], scoring, inputs, split_ids={"p0", "p3"}))
    assert np.isfinite(both).all() and both[0] != both[1]
    assert both[1] == alone[0]
    again = attack.score(job(model, [SENTENCES[0], SENTENCES[3]], scoring, inputs, split_ids={"p0", "p3"}))
    np.testing.assert_array_equal(both, again)


def test_recall_conditions_on_pool_non_members_outside_every_split(model, tmp_path):
    """The prefix: the pool's first non-members in no seed's split (never an evaluated candidate); the score is
    the conditional over the unconditional mean log-likelihood, the text scored after the prefix's tokens."""
    lm, tok = model
    recall = ATTACKS.get("recall")
    texts = job(model, [SENTENCES[0]], SCORING, {"pool": pool_file(tmp_path)}, split_ids={"p0", "p1"})
    assert recall.prefix(texts) == [SENTENCES[2], SENTENCES[4]]  # p1 is in a split; p3 is a member
    prefix, body = tok("".join(recall.prefix(texts)))["input_ids"], tok(SENTENCES[0])["input_ids"]
    with torch.inference_mode():
        row = torch.tensor([prefix + body])
        logp = torch.log_softmax(lm(input_ids=row).logits[0, :-1].double(), -1)
        conditional = logp.gather(-1, row[0, 1:, None]).squeeze(-1)[len(prefix) - 1:].mean()
    assert recall.score(texts)[0] == pytest.approx(float(conditional) / float(np.mean(texts.stats[0].logp)), rel=1e-5)
    none_left = job(model, [SENTENCES[0]], SCORING, {"pool": pool_file(tmp_path)},
                    split_ids={"p1", "p2", "p4", "p5"})
    with pytest.raises(ValueError, match="no non-member outside the seeds' splits"):
        recall.score(none_left)
    cut = job(model, [SENTENCES[0]], {**SCORING, "recall": {"num_shots": 2, "shot_max_words": 3}},
              {"pool": pool_file(tmp_path)}, split_ids={"p0", "p1"})
    assert recall.prefix(cut) == ["we read a", "birds sang in"]
    narrow = {**SCORING, "max_length": 8}
    assert recall.prefix(job(model, [SENTENCES[0]], narrow, {"pool": pool_file(tmp_path)}, split_ids={"p0"})) == \
        [SENTENCES[1], SENTENCES[2]]  # none fits: every shot (MIMIR's prefix[-0:]) ...
    with pytest.raises(ValueError, match="the prefix of .* tokens fills scoring.max_length = 8"):
        recall.score(job(model, [SENTENCES[0]], narrow, {"pool": pool_file(tmp_path)}, split_ids={"p0"}))


def test_dc_pdd_counts_documents_and_calibrates_first_occurrences(model, tmp_path):
    """f: a token counts once per corpus document it appears in (MIMIR's ``fre_dis[ids] += 1`` on a tensor),
    Laplace-smoothed over the vocabulary; alpha over a text's first occurrences, p read after an EOS token."""
    lm, tok = model
    docs = ["the the the cat", "the dog"]
    freq = token_frequencies(tok, docs, None)
    counts = np.zeros(len(tok))
    for d in docs:
        counts[sorted(set(tok(d)["input_ids"]))] += 1
    np.testing.assert_allclose(freq, (1 + counts) / (counts.sum() + len(tok)))
    assert first_occurrences([5, 7, 5, 9, 7]) == [0, 1, 3]
    corpus = tmp_path / "corpus.csv"
    pd.DataFrame({"text": SENTENCES[2:]}).to_csv(corpus, index=False)
    scoring = {**SCORING, "dc_pdd": {**SCORING["dc_pdd"], "corpus": {"source": str(corpus)}}}
    ids = tok(SENTENCES[0])["input_ids"]
    with torch.inference_mode():
        row = torch.tensor([[tok.eos_token_id, *ids]])
        p = torch.softmax(lm(input_ids=row).logits[0, :-1].double(), -1).gather(-1, row[0, 1:, None]).squeeze(-1)
    f = token_frequencies(tok, SENTENCES[2:], 1024)
    first = first_occurrences(ids)
    expected = np.minimum(p.numpy()[first] * np.log(1 / f[np.array(ids)[first]]), 0.01).mean()
    assert ATTACKS.get("dc_pdd").score(job(model, [SENTENCES[0]], scoring))[0] == pytest.approx(expected, rel=1e-5)


def test_an_attack_is_a_method_name_with_its_checks():
    assert score_columns(SCORING, reference=False) == ["loss", "gradnorm", "recall", "dc_pdd"]
    check_methods(SCORING["methods"], SCORING)
    with pytest.raises(ConfigError, match=r"scoring.dc_pdd.corpus: DC-PDD needs a reference corpus"):
        check_methods(["dc_pdd"], {**SCORING, "dc_pdd": {"cap": 0.01, "max_tokens": 1024}})


def test_the_score_job_writes_the_attacks_columns(tiny_model, tmp_path):
    pd.DataFrame({"text": SENTENCES[3:]}).to_csv(tmp_path / "corpus.csv", index=False)
    scoring = {**SCORING, "dc_pdd": {**SCORING["dc_pdd"], "corpus": {"source": str(tmp_path / "corpus.csv")}}}
    split = pd.DataFrame({"id": ["p0", "p1"], "text": SENTENCES[:2], "label": [1, 0]})
    [table] = score_splits(tiny_model, [split], scoring,
                           attack_inputs={"recall": {"pool": pool_file(tmp_path)}, "dc_pdd": {}})
    assert list(table.columns) == ["id", "label", "n_tokens", "truncated", "loss", "gradnorm", "recall", "dc_pdd"]
    assert np.isfinite(table[["gradnorm", "recall", "dc_pdd"]].to_numpy()).all()


# --- equality with MIMIR (its attack modules, from the checkout MIMIR_CODE names) ---------------------------

MIMIR = Path(os.environ["MIMIR_CODE"]) if os.environ.get("MIMIR_CODE") else None
needs_mimir = pytest.mark.skipif(MIMIR is None, reason="MIMIR_CODE names no local checkout of MIMIR")


def mimir_stand_ins() -> None:
    """Empty modules in place of those MIMIR imports for features these tests do not use (OpenAI, OLMo, its CLI
    config: ``ExperimentConfig``, whose fields the tests give as a namespace)."""
    for name in ("openai", "hf_olmo", "simple_parsing", "simple_parsing.helpers"):
        sys.modules.setdefault(name, types.ModuleType(name))
    config_module = types.ModuleType("mimir.config")
    config_module.ExperimentConfig = object
    sys.modules["mimir.config"] = config_module


def mimir_config(**fields) -> types.SimpleNamespace:
    """The settings MIMIR's ``Model`` and attacks read, with ``fields`` added."""
    return types.SimpleNamespace(env_config=types.SimpleNamespace(cache_dir=None, compile=False), openai_config=None,
                                 pretokenized=False, **fields)


def mimir_target(model_class, model, max_length: int = SCORING["max_length"]) -> object:
    """MIMIR's ``Model`` (``model_class``) around a tiny Llama and its tokenizer (``model``), reading windows of
    ``max_length``."""
    target = model_class(mimir_config())
    target.model, target.tokenizer = model
    target.device, target.name, target.max_length, target.stride = "cpu", "tiny", max_length, 32
    return target


@pytest.fixture(scope="module")
def mimir(model, tmp_path_factory):
    """MIMIR's ``Model`` around the tiny Llama, and its attack modules. The modules MIMIR imports for features
    these attacks do not use (OpenAI, OLMo, its CLI config) are empty stand-ins."""
    mimir_stand_ins()
    sys.path.insert(0, str(MIMIR))
    os.environ["MIMIR_CACHE_PATH"] = str(tmp_path_factory.mktemp("mimir-cache"))
    try:
        import mimir.attacks.dc_pdd as dc_pdd
        import mimir.attacks.gradnorm as gradnorm
        import mimir.attacks.recall as recall
        from mimir.models import Model
    finally:
        sys.path.remove(str(MIMIR))
    target = mimir_target(Model, model)
    return types.SimpleNamespace(config=target.config, target=target, gradnorm=gradnorm, recall=recall, dc_pdd=dc_pdd)


@needs_mimir
def test_gradnorm_equals_mimir(model, mimir):
    attack = mimir.gradnorm.GradNormAttack(mimir.config, mimir.target)
    ours = ATTACKS.get("gradnorm").score(job(model, SENTENCES))
    theirs = [float(attack.attack(t, probs=None)) for t in SENTENCES]  # MIMIR: -mean norm, as here
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


@needs_mimir
def test_recall_equals_mimir(model, mimir, tmp_path):
    texts = job(model, SENTENCES[:2], SCORING, {"pool": pool_file(tmp_path)}, split_ids={"p0", "p1"})
    prefix = ATTACKS.get("recall").prefix(texts)
    attack = mimir.recall.ReCaLLAttack(mimir.config, mimir.target)
    avg = int(np.mean([len(model[1].encode(t)) for t in texts.texts]))
    recall_dict = {"prefix": prefix, "num_shots": len(prefix), "avg_length": avg}
    theirs = [-float(attack.attack(t, probs=mimir.target.get_probabilities(t), recall_dict=recall_dict))
              for t in texts.texts]  # MIMIR: minus the ratio (higher = non-member)
    np.testing.assert_allclose(ATTACKS.get("recall").score(texts), theirs, rtol=1e-5)


@needs_mimir
def test_dc_pdd_equals_mimir(model, mimir, tmp_path):
    """MIMIR counts C4 from the hub; its cache file takes our counts of the corpus here, and its own counting
    (``_fre_dis``) of the same documents is compared with ours."""
    lm, tok = model
    docs = SENTENCES[2:] * 2
    counts = (token_frequencies(tok, docs, 1024) * (sum(len(set(tok(d)["input_ids"])) for d in docs) + len(tok)) - 1)
    cache = Path(os.environ["MIMIR_CACHE_PATH"]) / "DC_PDD_freq_dis" / "C4" / "tiny.pt"
    cache.parent.mkdir(parents=True, exist_ok=True)
    torch.save(torch.tensor(np.round(counts), dtype=torch.float32), cache)
    attack = mimir.dc_pdd.DC_PDDAttack(mimir.config, mimir.target)
    recount = attack.fre_dis.clone()
    attack.fre_dis = torch.zeros(len(tok))
    attack._fre_dis(docs)
    np.testing.assert_allclose(attack.fre_dis.numpy(), np.round(counts))
    attack.fre_dis = recount
    pd.DataFrame({"text": docs}).to_csv(tmp_path / "corpus.csv", index=False)
    scoring = {**SCORING, "dc_pdd": {**SCORING["dc_pdd"], "corpus": {"source": str(tmp_path / "corpus.csv")}}}
    theirs = [-float(attack.attack(t, probs=None)) for t in SENTENCES]  # MIMIR: minus the mean alpha
    np.testing.assert_allclose(ATTACKS.get("dc_pdd").score(job(model, SENTENCES, scoring)), theirs, rtol=1e-5)


def test_the_score_key_holds_what_an_attacks_files_contain_and_only_for_attacks_run(tmp_path, monkeypatch):
    """A scoring attack's corpus (DC-PDD) is part of the score tables' key by its content, so an edited corpus
    gives new tables; a config that does not run the attack keeps the key it had without the attack's section."""
    import json
    import shutil

    from workflow_helpers import REPO, default_config, validated

    from mialab.pipeline.plan import Plan

    monkeypatch.chdir(REPO)
    corpus = tmp_path / "corpus.csv"
    pd.DataFrame({"text": SENTENCES}).to_csv(corpus, index=False)
    cfg = default_config()
    cfg["scoring"]["dc_pdd"] = {"corpus": {"source": str(corpus)}}
    key = lambda c: Plan(validated(json.loads(json.dumps(c)))).score_run("base", "wikimia").key
    before = key(cfg)
    assert key(cfg) == before
    pd.DataFrame({"text": SENTENCES[::-1]}).to_csv(corpus, index=False)
    assert key(cfg) != before
    without = {**cfg, "scoring": {**cfg["scoring"], "methods": ["loss", "zlib"]}}
    other = tmp_path / "other.csv"
    shutil.copy(corpus, other)
    assert key(without) == key({**without, "scoring": {**without["scoring"], "dc_pdd": {"corpus": str(other)}}})
