"""A masked LM trained from scratch (``kind: mlm``, mialab.training.mlm): VeilProbe's fill-mask model where no hub
is reachable. BERT's masking, the tokenizer's special tokens, resumable training, the job's outputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_resume import Killed, NamedList, kill_after_first, record_calls

from mialab.training.checkpoints import latest_checkpoint
from mialab.lm.loading import load_pretrained
from mialab.training.mlm import MLMSettings, corpus_documents, init_mlm, masked_inputs, mlm_blocks, train_tokenizer

CORPUS = [f"The {a} of the {b} walked over the {c} hill and sang of {d} today."
          for a, b, c, d in zip(["king", "queen", "cat", "dog", "bird"] * 40, ["north", "south", "east", "west"] * 50,
                                 ["green", "red", "old", "high", "cold"] * 40, ["rain", "sun", "war", "love"] * 50)]
ARCH = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 32}


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(CORPUS, 256)


def test_blocks_are_wrapped_as_bert_reads_a_text_and_the_tokenizer_is_cased(tok):
    blocks = mlm_blocks(CORPUS[:20], tok, 16)
    assert blocks.shape[1] == 16 and len(blocks) > 5
    assert (blocks[:, 0] == tok.cls_token_id).all() and (blocks[:, -1] == tok.sep_token_id).all()
    assert tok.mask_token == "[MASK]" and tok("The king")["input_ids"][0] == tok.cls_token_id
    assert "The" in tok.tokenize("The king")      # cased, as bert-base-cased
    assert corpus_documents(["a b\n\nc d", "e"]) == ["a b", "c d", "e"]


def test_the_tokenizer_is_the_same_in_every_process():
    """Two processes (two hash seeds of the tokenizers library's maps) train the same vocabulary, with the same
    ids (huggingface/tokenizers#1794: its "##" continuations were numbered in hash order)."""
    import subprocess
    import sys

    from conftest import REPO

    code = ("import sys; from mialab.lm.tiny import wordpiece_tokenizer; "
            "lines = open(sys.argv[1]).read().splitlines()[:8000]; "
            "print(wordpiece_tokenizer(lines, 1200).to_str())")
    corpus = str(REPO / "resources/data/tinyshakespeare/input.txt")
    runs = {subprocess.run([sys.executable, "-c", code, corpus], capture_output=True, text=True, check=True).stdout
            for _ in range(3)}
    assert len(runs) == 1


def test_masking_chooses_a_share_of_the_non_special_tokens_as_bert(tok):
    """15% of the ordinary tokens chosen, 80% of those [MASK], 10% random, 10% kept; labels only there; specials never."""
    blocks = torch.from_numpy(mlm_blocks(CORPUS * 5, tok, 32))
    out = masked_inputs(tok, 0.15)(blocks, np.random.default_rng(0))
    chosen = out["labels"] != -100
    special = torch.isin(blocks, torch.tensor(tok.all_special_ids))
    assert not (chosen & special).any() and (out["labels"][chosen] == blocks[chosen]).all()
    assert chosen.sum() / (~special).sum() == pytest.approx(0.15, abs=0.01)
    masked = out["input_ids"][chosen] == tok.mask_token_id
    assert masked.float().mean() == pytest.approx(0.8 + 0.1 / len(tok), abs=0.02)
    assert (out["input_ids"][chosen] == blocks[chosen]).float().mean() == pytest.approx(0.1, abs=0.02)
    assert (out["input_ids"][~chosen] == blocks[~chosen]).all()
    again = masked_inputs(tok, 0.15)(blocks, np.random.default_rng(0))
    assert all(torch.equal(out[k], again[k]) for k in out)     # seeded by the generator


def _train(tmp_path, tok, name: str, checkpoints=None, every: int = 0, steps: int = 8):
    from mialab.training.pretrain import pretrain

    settings = MLMSettings(steps=steps, batch_size=8, seq_len=32, lr=5e-3, min_lr=5e-4, warmup_steps=2,
                           weight_decay=0.01, grad_clip=1.0, precision="fp32", checkpoint_every=every, seed=3,
                           mask_prob=0.15)
    model = init_mlm(tok, ARCH, settings.seq_len, settings.seed)
    losses = pretrain(model, mlm_blocks(CORPUS, tok, settings.seq_len), settings, checkpoint_dir=checkpoints,
                      inputs=masked_inputs(tok, settings.mask_prob))
    model.save_pretrained(tmp_path / name, safe_serialization=True)
    return model, (tmp_path / name / "model.safetensors").read_bytes(), losses


def test_training_resumes_to_the_same_bytes_and_lowers_the_masked_loss(tmp_path, tok, monkeypatch):
    from mialab.training import pretrain

    _, full, full_losses = _train(tmp_path, tok, "full")
    checkpoints = tmp_path / "checkpoints"
    with monkeypatch.context() as m:
        kill_after_first(m, pretrain, "save_checkpoint")
        with pytest.raises(Killed):
            _train(tmp_path, tok, "killed", checkpoints, every=3)   # the masks' generator restored too
    assert latest_checkpoint(checkpoints).name == "step-00000003"
    _, resumed, losses = _train(tmp_path, tok, "resumed", checkpoints, every=3)
    assert resumed == full and losses == full_losses
    assert np.mean(full_losses[-2:]) < full_losses[0] - 0.5      # the loss of the masked tokens falls


def test_the_mlm_job_writes_the_model_and_its_manifest_and_removes_its_checkpoints(tmp_path, monkeypatch):
    import json
    import os
    import runpy
    from types import SimpleNamespace

    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from mialab.core.jobs import THREAD_VARIABLES
    from mialab.training import pretrain

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(CORPUS))
    out = tmp_path / "fill" / "model"
    out.parent.mkdir()
    train = {"steps": 5, "batch_size": 4, "seq_len": 16, "lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 1,
             "weight_decay": 0.01, "grad_clip": 1.0, "precision": "auto", "checkpoint_every": 2, "mask_prob": 0.15,
             "seed": 0}
    job = SimpleNamespace(
        input=SimpleNamespace(corpora=[str(corpus)]),
        output=NamedList(model=str(out), manifest=str(out.parent / "manifest.json")),
        params=SimpleNamespace(spec={"corpora": [str(corpus)], "vocab_size": 200, "architecture": ARCH, "train": train},
                               manifest={"key": "k"}),
        wildcards=SimpleNamespace(model="fill"), log=[None], threads=1)
    for var in THREAD_VARIABLES:
        monkeypatch.setenv(var, os.environ.get(var, "1"))
    saved = record_calls(monkeypatch, pretrain, "save_checkpoint")
    runpy.run_path("workflow_scripts/pretrain_mlm.py", init_globals={"snakemake": job})
    assert [args[1] for args in saved] == [2, 4]
    assert sorted(p.name for p in out.parent.iterdir()) == ["manifest.json", "model"]
    manifest = json.loads((out.parent / "manifest.json").read_text())
    assert manifest["steps"] == {"completed": 5, "expected": 5} and manifest["vocab_size"] == len(
        AutoTokenizer.from_pretrained(out))
    assert load_pretrained(AutoModelForMaskedLM, str(out)).config.model_type == "bert"


def test_an_mlm_model_is_planned_as_a_model_keyed_by_its_corpora_and_is_never_a_target(tmp_path, monkeypatch):
    """configs/tiny_veilprobe.yaml's `fill`: a model folder of rule pretrain_mlm, keyed by its settings and its
    corpora's content; no (model, dataset) pair of the results table; a dataset for it is a schema error."""
    import copy

    import yaml
    from workflow_helpers import REPO, default_config, validated

    from mialab.pipeline.plan import Plan

    overlay = yaml.safe_load((REPO / "configs/tiny_veilprobe.yaml").read_text())
    cfg = default_config()
    cfg["models"]["fill"] = copy.deepcopy(overlay["models"]["fill"])
    monkeypatch.chdir(REPO)
    plan = Plan(validated(copy.deepcopy(cfg)), results="results")
    assert plan.model_path("fill").startswith("results/models/fill/") and plan.model("fill").manifest["stage"] == "models"
    assert "fill" not in {m for m, _ in plan.evaluated_pairs()}
    other = copy.deepcopy(cfg)
    other["models"]["fill"]["train"]["steps"] = 601
    assert Plan(validated(other), results="results").model("fill").key != plan.model("fill").key
    (tmp_path / "corpus.txt").write_text("a different corpus\n")
    other = copy.deepcopy(cfg)
    other["models"]["fill"]["corpora"] = [str(tmp_path / "corpus.txt")]
    assert Plan(validated(other), results="results").model("fill").key != plan.model("fill").key
    cfg["models"]["fill"]["datasets"] = ["wikimia"]
    with pytest.raises(Exception, match="expected to be empty"):
        validated(cfg)
