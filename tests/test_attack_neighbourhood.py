"""The neighbourhood attack (mialab.scoring.attacks.neighbourhood) on a tiny Llama target and a tiny BERT
fill-mask model: its neighbours are one-token in-place swaps, seeded, the same for a text alone or among
others; its score is its definition computed by hand; a missing fill-mask model is named; and (with
MIMIR_CODE naming a local checkout of MIMIR) its neighbours and score equal those of MIMIR's ``BertModel`` and
``NeighborhoodAttack``, imported from that checkout, around the same tiny BERT."""

from __future__ import annotations

import math
import os
import sys
import types

import numpy as np
import pandas as pd
import pytest
import torch
from test_attacks import (MIMIR, SCORING, SENTENCES, TINY_MODEL, job, mimir_config, mimir_stand_ins,  # noqa: F401
                          model, needs_mimir)

from mialab.lm.logprobs import token_stats
from mialab.pipeline.config import ConfigError
from mialab.scoring.attacks import ATTACKS
from mialab.scoring.attacks.neighbourhood import head_at, load_mlm, mlm_path, neighbours
from mialab.scoring.baselines import check_methods, score_columns
from mialab.scoring.cost import prepare_attack, score_baselines

SETTINGS = {"n_neighbours": 4, "reduce": "mean", "seed": 0, "batch_size": 32}


@pytest.fixture(scope="module")
def mlm_folder(tmp_path_factory) -> str:
    """A random tiny ``BertForMaskedLM`` (seed 0) with a cased WordPiece tokenizer of the sentences, as a
    ``kind: mlm`` model's folder (mialab.training.mlm)."""
    from mialab.training.mlm import init_mlm, train_tokenizer

    tok = train_tokenizer(SENTENCES * 30, 200)
    arch = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 64}
    path = tmp_path_factory.mktemp("mlm") / "model"
    init_mlm(tok, arch, 64, seed=0).save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def mlm(mlm_folder):
    return load_mlm(mlm_folder, torch.device("cpu"))


def scoring(mlm_folder, **settings) -> dict:
    return {**SCORING, "methods": ["loss", "neighbourhood"],
            "neighbourhood": {"mlm_model": mlm_folder, **SETTINGS, **settings}}


def neighbourhood_job(model, texts, mlm_folder, **settings):  # noqa: F811
    """A score job of ``texts`` whose neighbours ``prepare`` found first, as rule prepare_attack does, into a
    prepared table (a file of the module's folder per set of texts and settings)."""
    spec = scoring(mlm_folder, **settings)
    scored = job(model, texts, spec)
    table = ATTACKS.get("neighbourhood").prepare(scored.texts, scored.ids, spec["neighbourhood"], {"mlm": mlm_folder})
    path = os.path.join(os.path.dirname(mlm_folder), f"prepared-{abs(hash((tuple(texts), repr(settings))))}.parquet")
    table.to_parquet(path)
    scored.inputs = {"prepared": path}
    return scored


def test_neighbours_are_seeded_one_token_swaps_in_place(mlm):
    mlm_model, tok = mlm
    fills = {tok.decode(i).replace("##", "") for i in range(len(tok))}
    for text in SENTENCES[:3]:
        found = neighbours(mlm_model, tok, text, 6, seed=0)
        assert len(found) == 6 and found == neighbours(mlm_model, tok, text, 6, seed=0)
        assert found == neighbours(mlm_model, tok, text, 6, seed=0, batch_size=1)   # MIMIR's one position a pass
        assert found[:3] == neighbours(mlm_model, tok, text, 3, seed=0)             # the best first
        spans = tok(text, return_offsets_mapping=True)["offset_mapping"][1:]          # every token after [CLS]
        for n in found:
            swaps = [(s, e) for s, e in spans if n[:s] == text[:s] and n.endswith(text[e:])
                     and n[s:len(n) - (len(text) - e)] in fills]
            assert swaps, f"{n!r} is no one-token swap of {text!r}"
    other = [neighbours(mlm_model, tok, t, 6, seed=1) for t in SENTENCES[:3]]
    assert other != [neighbours(mlm_model, tok, t, 6, seed=0) for t in SENTENCES[:3]]   # the dropout is seeded


def test_the_fill_mask_head_reads_only_the_masked_position_of_each_row(mlm):
    """Each fill-mask pass hands the head (and the softmax) one hidden state a row, the masked position's; its
    probabilities there are those of MIMIR's full pass (every position's logits, softmax over dim 2), and the
    hook is gone afterwards."""
    mlm_model, tok = mlm
    seen = []
    handle = mlm_model.get_output_embeddings().register_forward_hook(lambda m, a, out: seen.append(tuple(a[0].shape)))
    try:
        neighbours(mlm_model, tok, SENTENCES[0], 4, seed=0, batch_size=4)
    finally:
        handle.remove()
    length = len(tok(SENTENCES[0])["input_ids"])
    assert seen and all(shape[1] == 1 for shape in seen), seen                      # [rows, 1, hidden]
    assert sum(shape[0] for shape in seen) == length - 1                            # a row per position after [CLS]
    ids = tok(SENTENCES[0], return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        embeds = mlm_model.base_model.embeddings(ids).repeat(3, 1, 1)
        full = torch.softmax(mlm_model(inputs_embeds=embeds).logits, dim=2)
        with head_at(mlm_model, [1, 2, 5]):
            read = torch.softmax(mlm_model(inputs_embeds=embeds).logits[:, 0], dim=-1)
        assert mlm_model(inputs_embeds=embeds).logits.shape == full.shape           # the hook removed
    torch.testing.assert_close(read, full[[0, 1, 2], [1, 2, 5]], rtol=1e-5, atol=1e-7)


def test_the_score_is_the_text_log_likelihood_minus_its_neighbours(model, mlm, mlm_folder):  # noqa: F811
    lm, tok = model
    text = SENTENCES[1]
    found = neighbours(*mlm, text, SETTINGS["n_neighbours"], seed=0)
    mean_logp = lambda texts: [float(np.mean(st.logp)) for st in token_stats(lm, tok, texts, max_length=128)]  # noqa: E731
    own, theirs = mean_logp([text])[0], mean_logp(found)
    attack = ATTACKS.get("neighbourhood")
    # the neighbours of one length share a pass: float rounding from each one's own pass
    assert attack.score(neighbourhood_job(model, [text], mlm_folder))[0] == pytest.approx(own - np.mean(theirs), rel=1e-6)
    assert attack.score(neighbourhood_job(model, [text], mlm_folder, reduce="max"))[0] == pytest.approx(
        own - min(theirs), rel=1e-6)                   # the text against its highest-loss neighbour


def test_neighbours_are_scored_on_their_tokens_log_likelihood_alone(model, mlm_folder, monkeypatch):  # noqa: F811
    """A neighbour's loss reads ``log p`` of its tokens and nothing else, so the statistics over the vocabulary
    are never computed for it; ``vocabulary=False``'s ``log p`` is the full pass's."""
    import mialab.lm.logprobs as logprobs

    lm, tok = model
    full = token_stats(lm, tok, SENTENCES[:3], max_length=8, truncation="sliding_window")
    alone = token_stats(lm, tok, SENTENCES[:3], max_length=8, truncation="sliding_window", vocabulary=False)
    for f, a in zip(full, alone):
        np.testing.assert_array_equal(a.logp, f.logp)
        assert a.mu.size == a.sigma.size == 0 and f.mu.size == f.logp.size
    texts = neighbourhood_job(model, [SENTENCES[1]], mlm_folder)                # the shared pass done first
    before = ATTACKS.get("neighbourhood").score(texts)

    def refused(logp, targets):
        raise AssertionError("the vocabulary's statistics were computed for a neighbour")

    monkeypatch.setattr(logprobs, "vocabulary_stats", refused)
    assert ATTACKS.get("neighbourhood").score(texts) == before


def test_a_text_scores_the_same_alone_and_among_others(model, mlm_folder):  # noqa: F811
    attack = ATTACKS.get("neighbourhood")
    both = attack.score(neighbourhood_job(model, [SENTENCES[0], SENTENCES[3]], mlm_folder))
    alone = attack.score(neighbourhood_job(model, [SENTENCES[3]], mlm_folder))
    assert np.isfinite(both).all() and both[0] != both[1]
    assert both[1] == alone[0]
    np.testing.assert_array_equal(both, attack.score(neighbourhood_job(model, [SENTENCES[0], SENTENCES[3]], mlm_folder)))


def test_the_fill_mask_model_is_named_resolved_and_priced(model, mlm_folder):  # noqa: F811
    missing = {**SCORING, "methods": ["loss", "neighbourhood"], "neighbourhood": dict(SETTINGS)}
    with pytest.raises(ConfigError, match=r"scoring\.neighbourhood\.mlm_model: the neighbourhood attack needs"):
        check_methods(missing["methods"], missing)
    attack = ATTACKS.get("neighbourhood")
    with pytest.raises(ValueError, match=r"scoring\.neighbourhood\.mlm_model"):
        attack.prepare([SENTENCES[0]], ["0"], missing["neighbourhood"], {})
    assert score_columns(scoring(mlm_folder), reference=False) == ["loss", "neighbourhood"]
    stage = types.SimpleNamespace(path=lambda name: f"results/attacks/neighbourhood/wikimia/k/{name}")
    asked = []
    plan = types.SimpleNamespace(
        config={"models": {"fill": {"kind": "mlm"}, "base": {"kind": "hf", "path": "org/bert"}},
                "scoring": {"neighbourhood": {"mlm_model": "fill"}}},
        model_path=lambda name: f"results/models/{name}/k/model",
        attack_run=lambda *args: asked.append(args) or stage)
    assert mlm_path(plan, "fill") == "results/models/fill/k/model" and mlm_path(plan, "org/bert") == "org/bert"
    assert attack.prepare_inputs(plan, "wikimia") == {"mlm": "results/models/fill/k/model"}   # a rule input
    # the score job reads the dataset's neighbours, found once whatever the target (every setting but reduce)
    assert attack.inputs(plan, "wikimia") == {"prepared": "results/attacks/neighbourhood/wikimia/k/prepared.parquet"}
    assert asked == [("neighbourhood", "wikimia", ("mlm_model", "n_neighbours", "seed", "batch_size"))]
    plan.config["scoring"]["neighbourhood"]["mlm_model"] = mlm_folder
    assert attack.prepare_inputs(plan, "wikimia") == {"mlm": mlm_folder}
    assert attack.prepare_model(plan.config["scoring"]["neighbourhood"]) == mlm_folder
    plan.config["scoring"]["neighbourhood"]["mlm_model"] = "google-bert/bert-base-uncased"
    assert attack.prepare_inputs(plan, "wikimia") == {}                                  # a hub id: prefetched
    plan.config["scoring"]["neighbourhood"]["mlm_model"] = "bert-base-uncased"           # not fetched: said at plan time
    with pytest.raises(ConfigError, match=r"scoring\.neighbourhood\.mlm_model: 'bert-base-uncased' is not a "
                                          r"configured model \(fill, base\), an existing model folder, nor a hub"):
        attack.prepare_inputs(plan, "wikimia")
    with pytest.raises(ConfigError, match=r"models\.base is a kind hf model, not a masked LM"):
        mlm_path(plan, "base")
    facts = types.SimpleNamespace(config={"scoring": {**scoring(mlm_folder), "max_length": 10}},
                                  texts=lambda d: 3, params_b=lambda m: 0.25 if m == mlm_folder else 1.0)
    work = score_baselines(facts, "m", "d")
    assert work.scored_texts == 3 * (1 + SETTINGS["n_neighbours"]) and work.scored_tokens == 30 * 5
    assert work.loads_b == (1.0,) and work.passes == 0 and work.train_flops == 0     # no fill-mask model here
    # ... but in the dataset's prepare_attack job: loaded, a pass per batch_size (32) of a text's 10 positions,
    # each over its 10 tokens
    prep = prepare_attack(facts, None, "d", {"attack": "neighbourhood"})
    assert prep.params_b == 0.25 and prep.dtype == "float32" and prep.loads_b == (0.25,)
    assert prep.passes == 3 and prep.train_flops == 2 * 0.25e9 * 3 * 10 * 10


def test_the_prepared_table_must_hold_the_jobs_texts(model, mlm_folder, tmp_path):  # noqa: F811
    scored = neighbourhood_job(model, SENTENCES[:2], mlm_folder)
    attack = ATTACKS.get("neighbourhood")
    table = pd.read_parquet(scored.inputs["prepared"])
    assert table.columns.tolist() == ["id", "text", "neighbours"] and table["text"].tolist() == SENTENCES[:2]
    assert all(len(ns) == SETTINGS["n_neighbours"] for ns in table["neighbours"])
    table.iloc[:1].to_parquet(tmp_path / "short.parquet")
    scored.inputs = {"prepared": str(tmp_path / "short.parquet")}
    with pytest.raises(ValueError, match=r"short\.parquet: no row for 1 text\(s\) of this job, e.g. id '1'"):
        attack.score(scored)
    table.assign(text=["another", SENTENCES[1]]).to_parquet(tmp_path / "other.parquet")
    scored.inputs = {"prepared": str(tmp_path / "other.parquet")}
    with pytest.raises(ValueError, match=r"other\.parquet: id '0' holds another text"):
        attack.score(scored)
    scored.inputs = {}
    with pytest.raises(ValueError, match=r"no prepared table among its inputs"):
        attack.score(scored)


# --- equality with MIMIR (its BertModel and NeighborhoodAttack, from the checkout MIMIR_CODE names) ----------

@pytest.fixture(scope="module")
def mimir_neighbourhood(model, mlm, tmp_path_factory):  # noqa: F811
    """MIMIR's ``BertModel`` around the tiny BERT (its hub loading bypassed: the model, tokenizer, name ``bert``,
    device and config set as its ``__init__`` would) and a ``NeighborhoodAttack`` of the tiny Llama (MIMIR's
    ``LanguageModel``, loaded likewise) with it. The modules MIMIR imports for features this attack does not use
    are empty stand-ins, as in tests/test_attacks.py; the MIMIR modules imported here are forgotten afterwards
    (``mimir.utils`` reads its cache path once, at import: tests/test_attacks.py sets its own)."""
    before, env = set(sys.modules), os.environ.get("MIMIR_CACHE_PATH")
    saved_config = sys.modules.get("mimir.config")
    mimir_stand_ins()
    os.environ.setdefault("MIMIR_CACHE_PATH", str(tmp_path_factory.mktemp("mimir-cache")))
    sys.path.insert(0, str(MIMIR))
    try:
        import mimir.attacks.neighborhood as nb
        from mimir.models import LanguageModel, Model
    finally:
        sys.path.remove(str(MIMIR))
    mlm_model, tok = mlm
    neigh = types.SimpleNamespace(model="bert", original_tokenization_swap=True, pct_swap_bert=0.05,
                                  neighbor_strategy="deterministic", ceil_pct=False)  # NeighborhoodConfig defaults
    config = mimir_config(neighborhood_config=neigh, max_tokens=mlm_model.config.max_position_embeddings)

    class TinyBert(nb.BertModel):
        def __init__(self):
            torch.nn.Module.__init__(self)
            self.config, self.device, self.name = config, "cpu", "bert"
            self.model, self.tokenizer = mlm_model, tok
            self.token_dropout = torch.nn.Dropout(p=0.7)

    class TinyLlama(LanguageModel):
        def __init__(self):
            Model.__init__(self, config)
            self.model, self.tokenizer = model
            self.device, self.name, self.max_length, self.stride = "cpu", "tiny", SCORING["max_length"], 32

    bert = TinyBert()
    assert bert.model.bert.embeddings is not None                       # a BertForMaskedLM, as MIMIR reads it
    attack = nb.NeighborhoodAttack.__new__(nb.NeighborhoodAttack)
    nb.Attack.__init__(attack, config, TinyLlama())
    attack.ref_model, attack.is_loaded = bert, True
    yield attack
    for name in set(sys.modules) - before:
        if name == "mimir" or name.startswith("mimir."):
            del sys.modules[name]
    if saved_config is not None:
        sys.modules["mimir.config"] = saved_config
    if env is None:
        os.environ.pop("MIMIR_CACHE_PATH", None)
    else:
        os.environ["MIMIR_CACHE_PATH"] = env


@needs_mimir
@pytest.mark.parametrize("reduce", ["mean", "max"])
def test_neighbourhood_equals_mimir(model, mlm, mlm_folder, mimir_neighbourhood, reduce):  # noqa: F811
    n = SETTINGS["n_neighbours"]
    theirs, scores = [], []
    for text in SENTENCES:
        torch.manual_seed(SETTINGS["seed"])                             # MIMIR's fix_seed, here before each text
        found = mimir_neighbourhood.get_neighbors([text], n_perturbations=n)
        theirs.append(found)
        differences = mimir_neighbourhood.attack(text, probs=None, substr_neighbors=found)  # loss - each neighbour's
        scores.append(-(np.mean(differences) if reduce == "mean" else np.min(differences)))  # run.py: np.min
    assert [neighbours(*mlm, t, n, seed=SETTINGS["seed"]) for t in SENTENCES] == theirs
    ours = ATTACKS.get("neighbourhood").score(neighbourhood_job(model, SENTENCES, mlm_folder, reduce=reduce))
    np.testing.assert_allclose(ours, scores, rtol=1e-5)


# --- the dataset's neighbours, found once (rule prepare_attack) ------------------------------------------------

def test_the_neighbours_stage_is_keyed_by_its_settings_and_texts_and_the_score_keys_follow(tmp_path, monkeypatch):
    """One ``prepare_attack`` job per dataset, whatever the target: its key moves with the settings that find the
    neighbours (not ``reduce``, which the score jobs apply), with the fill-mask model and with the splits; every
    change of its key changes the score jobs' keys too (their determinants hold its own)."""
    import copy

    from test_attack_quantile import QBERT
    from workflow_helpers import REPO, default_config, validated

    from mialab.pipeline.plan import Plan
    from mialab.pipeline.sizing import Sizing
    from mialab.scoring.cost import WORK

    monkeypatch.chdir(REPO)   # the corpora's relative paths

    def plan(*, mlm=None, split=None, device=None, **settings):
        cfg = default_config()
        if device:
            cfg["scoring"]["device"] = device
        cfg["models"]["fill"] = {**copy.deepcopy(QBERT), **(mlm or {})}
        cfg["scoring"]["methods"] = [m for m in cfg["scoring"]["methods"] if m != "quantile"]
        cfg["scoring"]["neighbourhood"] = {"mlm_model": "fill", "n_neighbours": 5, **settings}
        cfg["datasets"]["wikimia"]["split"].update(split or {})
        return Plan(validated(cfg), results=str(tmp_path / "results"))

    attack = ATTACKS.get("neighbourhood")
    base = plan()
    run = attack.prepared_run(base, "wikimia")
    assert run.dir == str(tmp_path / "results" / "attacks" / "neighbourhood" / "wikimia" / run.key)
    assert attack.inputs(base, "wikimia") == {"prepared": run.path("prepared.parquet")}
    assert attack.prepared_run(base, "aime").key != run.key
    # what the job reads (rules/scoring.smk: from the manifest): the settings its key holds, reduce not among them
    assert run.manifest["config"] == {"mlm_model": "fill", "n_neighbours": 5, "seed": 0, "batch_size": 32}
    assert run.manifest["device"] == base.config["scoring"]["device"]
    keys = lambda p: (attack.prepared_run(p, "wikimia").key, p.score_run("base", "wikimia").key,  # noqa: E731
                      p.score_run("sft", "wikimia").key)
    same = keys(base)
    for changed in (plan(n_neighbours=6), plan(seed=1), plan(batch_size=8), plan(mlm={"vocab_size": 2048}),
                    plan(split={"n_per_class": 32}), plan(device="cpu")):
        assert all(a != b for a, b in zip(keys(changed), same))
    other = keys(plan(reduce="max"))
    assert other[0] == same[0] and other[1:] != same[1:]              # the same neighbours, other scores
    sizing = Sizing(base.config, environ={})
    job = sizing.job("prepare_attack", "fill", "wikimia")
    assert job.gpus == 1 and job.params_b == sizing.params_b("fill")
    work = WORK["prepare_attack"](sizing, "fill", "wikimia", {"attack": "neighbourhood"})
    assert work.params_b == sizing.params_b("fill") and work.passes == sizing.texts("wikimia") * math.ceil(
        base.config["scoring"]["max_length"] / 32)                  # the positions of a text, 32 a pass


def test_mimirs_hub_models_are_sized_as_the_small_encoders_they_are():
    """MIMIR's fill-mask model and quantile regressor, named by hub id, are priced at their ~0.11B parameters
    (resources/model_heads.tsv), not as an unknown model (8B): the neighbours' job asks for an encoder's memory."""
    from workflow_helpers import default_config, validated

    from mialab.pipeline.sizing import UNKNOWN_PARAMS_B, Sizing
    from mialab.scoring.cost import WORK

    cfg = default_config()
    assert {"neighbourhood", "quantile"} <= set(cfg["scoring"]["methods"])     # the tiny world runs both
    cfg["scoring"]["neighbourhood"] = {"mlm_model": "google-bert/bert-base-uncased"}
    cfg["scoring"]["quantile"] = {"model": "Sreevishnu/funnel-transformer-small-imdb"}
    sizing = Sizing(validated(cfg), environ={})
    assert sizing.params_b("google-bert/bert-base-uncased") == 0.110
    assert sizing.params_b("Sreevishnu/funnel-transformer-small-imdb") == 0.116 < UNKNOWN_PARAMS_B
    job = sizing.job("prepare_attack", "google-bert/bert-base-uncased", "wikimia")
    assert job.params_b == 0.110 and sizing.resources(job, 60.0)["mem_mb"] < 10_000
    work = WORK["prepare_attack"](sizing, "google-bert/bert-base-uncased", "wikimia", {"attack": "neighbourhood"})
    assert work.params_b == work.loads_b[0] == 0.110
    assert WORK["score_baselines"](sizing, "base", "wikimia").loads_b[1:] == (0.116,)   # the regressor's base
