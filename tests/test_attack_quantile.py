"""The quantile-regression attack (mialab.scoring.attacks.quantile) on a tiny Llama target with a tiny BERT
regressor: the pinball loss by hand, training that lowers it and fits the quantile it is asked for, the
training set (known non-members outside every split), determinism, the error for too few known non-members,
and (with MIMIR_CODE naming a local checkout of MIMIR) the pieces of MIMIR's unfinished ``QuantileAttack``:
its ``CustomTrainer.compute_loss`` on the same tensors and its score formula."""

from __future__ import annotations

import os
import sys
import types

import numpy as np
import pandas as pd
import pytest
import torch

from mialab.lm.loading import load_causal_lm, load_tokenizer
from mialab.lm.logprobs import token_stats
from mialab.lm.tiny import save_model
from mialab.pipeline.config import ConfigError
from mialab.scoring.attacks import ATTACKS, Texts
from mialab.scoring.attacks.quantile import encode, load_regressor, pinball_loss, predict, train_regressor
from mialab.scoring.baselines import check_methods
from mialab.training.mlm import init_mlm
from test_attacks import MIMIR, mimir_stand_ins, mimir_target, needs_mimir

CATS = [f"the {a} cat sat on the {b} mat near the {c} door" for a in ("old", "red", "big", "small", "grey")
        for b, c in (("blue", "green"), ("soft", "wide"), ("long", "low"), ("warm", "dark"))]
SHIPS = [f"we read a book about the {a} sea and {b} ships in the {c} port" for a in ("cold", "calm", "deep", "wild")
         for b, c in (("tall", "north"), ("fast", "south"), ("old", "east"), ("new", "west"), ("slow", "main"))]
TEXTS = CATS + SHIPS   # 40 texts, two kinds
TINY_MODEL = {"corpus": TEXTS * 8, "vocab_size": 300}  # conftest.tiny_model
QUANTILE = {"alpha": 0.2, "epochs": 2, "lr": 1e-3, "batch_size": 4, "max_length": 24, "seed": 0}
SCORING = {"methods": ["loss", "quantile"], "k": [0.2], "max_length": 64, "truncation": "truncate",
           "truncation_warn": 1.0, "dtype": "float32", "device": "cpu"}


@pytest.fixture(scope="module")
def model(tiny_model):
    return load_causal_lm(tiny_model, dtype="float32", device="cpu"), load_tokenizer(tiny_model)


def word_tokenizer(texts: list[str]):
    """A BERT tokenizer whose vocabulary is the texts' words in sorted order (trained WordPiece breaks frequency
    ties differently from run to run)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from mialab.lm.tiny import BERT_TOKENS

    words = sorted({w for t in texts for w in t.split()})
    vocab = {t: i for i, t in enumerate([*BERT_TOKENS.values(), *words])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token=BERT_TOKENS["unk_token"]))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[
        ("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, **BERT_TOKENS)


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> str:
    """A tiny BERT masked LM (the tiny world's ``kind: mlm`` classes, untrained) saved as a model folder."""
    tok = word_tokenizer(TEXTS)
    path = tmp_path_factory.mktemp("bert") / "model"
    arch = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 32}
    save_model(init_mlm(tok, arch, 32, seed=1), tok, path)
    return str(path)


def scoring(bert: str, **settings) -> dict:
    return {**SCORING, "quantile": {"model": bert, **QUANTILE, **settings}}


def pool_file(tmp_path, labels) -> str:
    pool = pd.DataFrame({"id": [f"p{i}" for i in range(len(TEXTS))], "text": TEXTS, "label": labels})
    pool.to_parquet(tmp_path / "pool.parquet")
    return str(tmp_path / "pool.parquet")


def job(model, texts, spec, pool, split_ids=()):
    lm, tok = model
    stats = token_stats(lm, tok, texts, max_length=spec["max_length"], truncation=spec["truncation"])
    return Texts(lm, tok, list(texts), [str(i) for i in range(len(texts))], stats, spec, {"pool": pool},
                 frozenset(split_ids))


#: p0..p39: every fourth a member; the evaluated split p0..p7
LABELS = [int(i % 4 == 0) for i in range(len(TEXTS))]
SPLIT = {f"p{i}" for i in range(8)}


def test_the_pinball_loss_by_hand():
    pred, y = torch.tensor([1.0, 0.0, -2.0, 3.0]), torch.tensor([0.0, 2.0, -2.0, 1.5])
    alpha = 0.1
    # over-predictions (q > y) cost alpha a unit, under-predictions 1 - alpha
    by_hand = (0.1 * 1.0 + 0.9 * 2.0 + 0.0 + 0.1 * 1.5) / 4
    assert float(pinball_loss(pred, y, alpha)) == pytest.approx(by_hand)
    assert float(pinball_loss(y, y, alpha)) == 0.0
    with pytest.raises(ValueError, match="differ"):
        pinball_loss(pred[:, None], y, alpha)   # no broadcasting of a [B, 1] prediction against [B] labels


def test_training_fits_the_asked_quantile_of_each_kind_of_text(bert):
    """Targets the text decides up to noise (cats near +1, ships near -1): after enough epochs the loss has
    fallen, about alpha of the targets lie above their predicted quantile, and the prediction follows the kind."""
    torch.manual_seed(0)
    model, tok = load_regressor(bert, "cpu")
    noise = np.random.default_rng(0).uniform(-0.5, 0.5, len(TEXTS))
    y = torch.tensor(np.where(np.arange(len(TEXTS)) < len(CATS), 1.0, -1.0) + noise, dtype=torch.float32)
    alpha = 0.2
    losses = train_regressor(model, encode(tok, TEXTS, 24), y, alpha=alpha, epochs=60, lr=1e-2, batch_size=8,
                             generator=torch.Generator().manual_seed(0))
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    q = predict(model, tok, TEXTS, 24)
    above = (y.numpy() > q).mean()
    assert abs(above - alpha) <= 0.1, above
    cats, ships = q[:len(CATS)], q[len(CATS):]
    assert cats.mean() - ships.mean() > 1.2               # each kind its own quantile, not one constant
    assert 1.0 < cats.mean() < 1.5 and -1.0 < ships.mean() < -0.5   # the 0.8-quantile of U(-0.5, 0.5) is 0.3


def test_training_lowers_the_pinball_loss_on_the_known_nonmembers(model, bert, tmp_path):
    texts = job(model, TEXTS[:8], scoring(bert, epochs=3), pool_file(tmp_path, LABELS), SPLIT)
    _, _, losses = ATTACKS.get("quantile").fit(texts)
    per_epoch = np.array(losses).reshape(3, -1).mean(1)      # 24 known non-members: 6 steps an epoch
    assert per_epoch[-1] < per_epoch[0]


def test_the_regressor_learns_from_pool_nonmembers_outside_every_split(model, bert, tmp_path):
    texts = job(model, TEXTS[:8], scoring(bert), pool_file(tmp_path, LABELS), SPLIT | {"p9", "p30"})
    known = ATTACKS.get("quantile").training_set(texts)
    expected = [f"p{i}" for i in range(len(TEXTS)) if i % 4 and f"p{i}" not in SPLIT | {"p9", "p30"}]
    assert known["id"].tolist() == expected and known["text"].tolist() == [TEXTS[int(i[1:])] for i in expected]


def test_too_few_known_nonmembers_is_an_error_naming_the_key(model, bert, tmp_path):
    split = {f"p{i}" for i in range(33)}                    # leaves p33, p34, p35, p37, p38, p39: 6 < 2 * 4
    texts = job(model, TEXTS[:2], scoring(bert), pool_file(tmp_path, LABELS), split)
    with pytest.raises(ValueError, match=r"6 non-member\(s\).*2 \* scoring.quantile.batch_size = 8"):
        ATTACKS.get("quantile").score(texts)
    with pytest.raises(ConfigError, match="scoring.quantile.model"):
        check_methods(["quantile"], {**SCORING, "quantile": QUANTILE})


def test_the_score_is_the_loglikelihood_minus_the_predicted_quantile_and_repeats(model, bert, tmp_path):
    """Deterministic for a seed (another seed: another regressor); a text scores the same alone and among
    others; the score is the ``loss`` column's mean log-likelihood minus the fitted regressor's output."""
    pool, attack = pool_file(tmp_path, LABELS), ATTACKS.get("quantile")
    texts = job(model, TEXTS[:8], scoring(bert), pool, SPLIT)
    scores = attack.score(texts)
    np.testing.assert_array_equal(scores, attack.score(job(model, TEXTS[:8], scoring(bert), pool, SPLIT)))
    alone = attack.score(job(model, [TEXTS[3]], scoring(bert), pool, SPLIT))
    assert alone[0] == scores[3]
    other = attack.score(job(model, TEXTS[:8], scoring(bert, seed=1), pool, SPLIT))
    assert np.isfinite(scores).all() and not np.allclose(scores, other)
    regressor, tok, _ = attack.fit(texts)
    ll = np.array([np.mean(st.logp) for st in texts.stats])
    np.testing.assert_allclose(scores, ll - predict(regressor, tok, TEXTS[:8], QUANTILE["max_length"]), rtol=0, atol=0)


# --- MIMIR's pieces (its quantile module, from the checkout MIMIR_CODE names) ---------------------------------



@pytest.fixture(scope="module")
def mimir(model, tmp_path_factory):
    """MIMIR's ``Model`` around the tiny Llama and its quantile module. The modules MIMIR imports for features
    this attack does not use (OpenAI, OLMo, its CLI config) are empty stand-ins, as in tests/test_attacks.py."""
    mimir_stand_ins()
    sys.path.insert(0, str(MIMIR))
    os.environ.setdefault("MIMIR_CACHE_PATH", str(tmp_path_factory.mktemp("mimir-cache")))
    try:
        import mimir.attacks.quantile as quantile
        from mimir.models import Model
    finally:
        sys.path.remove(str(MIMIR))
    return types.SimpleNamespace(target=mimir_target(Model, model, SCORING["max_length"]), quantile=quantile)


class _Regressor:
    """A stand-in for MIMIR's reference model: returns the given logits whatever its inputs."""

    device = "cpu"

    def __init__(self, logits):
        self.logits = logits

    def __call__(self, **inputs):
        from transformers.modeling_outputs import SequenceClassifierOutput

        return SequenceClassifierOutput(logits=self.logits)


@needs_mimir
def test_pinball_loss_equals_mimirs_compute_loss(mimir):
    logits = torch.tensor([[0.3], [-1.2], [2.0], [0.0], [-0.4]])
    labels = torch.tensor([[0.1], [-2.0], [2.5], [0.0], [1.0]])
    for alpha in (0.01, 0.2, 0.5, 0.9):
        trainer = types.SimpleNamespace(alpha_fpr=alpha)
        theirs = mimir.quantile.CustomTrainer.compute_loss(trainer, _Regressor(logits), {"labels": labels})
        assert float(pinball_loss(logits[:, 0], labels[:, 0], alpha)) == pytest.approx(float(theirs), rel=1e-6)


@needs_mimir
def test_mimirs_loss_pairs_every_prediction_with_every_label_of_a_batch(mimir):
    """What MIMIR's Trainer hands compute_loss, labels ``[B]`` beside logits ``[B, 1]``, broadcasts to the mean
    pinball loss over all (prediction, label) pairs; here each prediction meets its own label (module doc)."""
    logits, labels = torch.tensor([[0.3], [-1.2], [2.0]]), torch.tensor([0.1, -2.0, 2.5])
    theirs = mimir.quantile.CustomTrainer.compute_loss(types.SimpleNamespace(alpha_fpr=0.2), _Regressor(logits),
                                                       {"labels": labels})
    pairs = pinball_loss(logits.expand(3, 3).reshape(-1), labels.expand(3, 3).reshape(-1), 0.2)
    assert float(theirs) == pytest.approx(float(pairs), rel=1e-6)
    assert float(theirs) != pytest.approx(float(pinball_loss(logits[:, 0], labels, 0.2)))


@needs_mimir
def test_the_score_is_mimirs_formula_with_the_quantile_in_loss_terms(model, bert, mimir, tmp_path):
    """MIMIR returns ``quantile - get_ll`` with ``get_ll`` the mean loss: given our regressor's quantile of the
    log-likelihood negated (the same quantile in loss terms), that is our score (module doc: the orientation)."""
    texts = job(model, TEXTS[:4], scoring(bert), pool_file(tmp_path, LABELS), SPLIT)
    attack = ATTACKS.get("quantile")
    ours = attack.score(texts)
    regressor, tok, _ = attack.fit(texts)
    q = predict(regressor, tok, TEXTS[:4], QUANTILE["max_length"])
    theirs = []
    for text, qi in zip(TEXTS[:4], q):
        qa = object.__new__(mimir.quantile.QuantileAttack)   # its __init__ passes self twice: not constructible
        qa.target_model = mimir.target
        qa.ref_model = types.SimpleNamespace(tokenizer=tok, model=_Regressor(torch.tensor([[-qi]])))
        theirs.append(float(qa.attack(text)))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


# --- in the workflow: the regressor's folder an input and its key part of the score job's, its work priced -----

#: the tiny world's regressor base (the report's config.yaml entry): a small BERT trained as VeilProbe's fill model
QBERT = {"kind": "mlm", "corpora": ["resources/data/tinyshakespeare/input.txt",
                                   "resources/data/wikimia/WikiMIA_length64.parquet",
                                   "resources/data/aime/aime_1983_2023.json"],
         "vocab_size": 4096, "architecture": {"hidden_size": 64, "num_layers": 2, "num_heads": 2,
                                              "max_position_embeddings": 128},
         "train": {"steps": 300, "batch_size": 32, "seq_len": 128, "lr": 3.0e-3, "min_lr": 3.0e-4,
                   "warmup_steps": 20, "precision": "auto", "seed": 0}}


def tiny_world(quantile: dict | None, **qbert) -> dict:
    import copy

    from workflow_helpers import default_config, validated

    cfg = default_config()
    cfg["scoring"]["methods"] = [m for m in cfg["scoring"]["methods"] if m != "quantile"]
    if quantile is not None:
        cfg["models"]["qbert"] = {**copy.deepcopy(QBERT), **qbert}
        cfg["scoring"]["methods"].append("quantile")
        cfg["scoring"]["quantile"] = quantile
    return validated(cfg)


def test_a_configured_regressor_is_an_input_joins_the_score_key_and_is_priced(tmp_path, monkeypatch):
    from mialab.pipeline.plan import Plan
    from mialab.pipeline.sizing import Sizing
    from mialab.scoring.baselines import attack_inputs_of, check_methods
    from mialab.scoring.cost import WORK
    from workflow_helpers import REPO

    monkeypatch.chdir(REPO)   # the corpora's relative paths
    settings = {"model": "qbert", "batch_size": 4, "max_length": 128}
    cfg = tiny_world(settings)
    check_methods(cfg["scoring"]["methods"], cfg["scoring"])
    assert cfg["scoring"]["quantile"] == {**settings, "alpha": 0.05, "epochs": 1, "lr": 5e-5, "seed": 0}  # the schema's
    plan = Plan(cfg, results=str(tmp_path / "results"))
    assert attack_inputs_of(plan, "wikimia")["quantile"] == {"pool": plan.pool("wikimia").path("pool.parquet"),
                                                             "regressor": plan.model_path("qbert")}
    key = plan.score_run("base", "wikimia").key
    retrained = Plan(tiny_world(settings, vocab_size=2048), results=str(tmp_path / "results"))
    assert retrained.score_run("base", "wikimia").key != key            # another regressor base: other scores
    plain = tiny_world(None)
    assert "method_models" not in Plan(plain, results=str(tmp_path / "results")).score_run("base", "wikimia").manifest["upstream"]
    work = WORK["score_baselines"](Sizing(cfg, environ={}), "base", "wikimia")
    before = WORK["score_baselines"](Sizing(plain, environ={}), "base", "wikimia")
    assert len(work.loads_b) == len(before.loads_b) + 1 and work.train_flops > before.train_flops
    assert work.scored_texts > before.scored_texts        # the target's pass over the known non-members


def test_a_regressor_named_outside_the_models_is_a_folder_or_a_hub_id(tmp_path):
    """A name that is no configured model must be a model folder or a hub id ``org/name`` (rule prefetch fetches
    those); anything else fails when the DAG is built, naming the key, instead of in the job that loads it."""
    import types

    from mialab.pipeline.config import ConfigError
    from mialab.scoring.attacks import ATTACKS

    pool = types.SimpleNamespace(path=lambda name: f"results/pools/d/k/{name}")
    plan = types.SimpleNamespace(config={"models": {"base": {"kind": "pretrain"}}, "scoring": {"quantile": {}}}, pool=lambda d: pool)
    attack = ATTACKS.get("quantile")
    plan.config["scoring"]["quantile"]["model"] = "Sreevishnu/funnel-transformer-small-imdb"   # MIMIR's
    assert attack.inputs(plan, "d") == {"pool": "results/pools/d/k/pool.parquet"}
    for name in ("funnel-transformer-small", str(tmp_path / "missing")):
        plan.config["scoring"]["quantile"]["model"] = name
        with pytest.raises(ConfigError, match=r"scoring\.quantile\.model: .* is not a configured model \(base\), an "
                                              r"existing model folder, nor a hub model id"):
            attack.inputs(plan, "d")
