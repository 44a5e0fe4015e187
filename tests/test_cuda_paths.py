"""Paths that matter on CUDA, tested where they can be on a CPU: every way a job builds or loads a model
keeps torch's attention off cuDNN's kernels (their backward gave NaN gradients on an H200: GRPO's first
step, grad_norm nan; mialab.lm.loading.no_cudnn_attention)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import PROBLEMS, tiny_mapping

TINY_MODEL = {"corpus": PROBLEMS * 20}


@pytest.fixture
def cudnn_on():
    import torch

    torch.backends.cuda.enable_cudnn_sdp(True)
    yield
    torch.backends.cuda.enable_cudnn_sdp(True)


def _cudnn_enabled() -> bool:
    import torch

    return torch.backends.cuda.cudnn_sdp_enabled()


def test_loading_a_model_turns_cudnn_attention_off(tiny_model, cudnn_on):
    from mialab.lm.loading import load_causal_lm

    load_causal_lm(tiny_model, device="cpu")
    assert not _cudnn_enabled()


def test_pretraining_a_model_built_from_its_config_turns_it_off(tiny_model, cudnn_on):
    from mialab.lm.loading import load_tokenizer
    from mialab.lm.tiny import init_model, llama_config
    from mialab.training.pretrain import PretrainSettings, pretrain

    tok = load_tokenizer(tiny_model)
    model = init_model(llama_config(len(tok), hidden_size=32, num_layers=1, num_heads=2, tokenizer=tok), seed=0)
    settings = PretrainSettings(steps=1, batch_size=2, seq_len=8, lr=1e-3, min_lr=1e-4, warmup_steps=0,
                                weight_decay=0.0, grad_clip=1.0, precision="fp32", seed=0, checkpoint_every=0)
    assert _cudnn_enabled()
    pretrain(model, np.arange(32, dtype=np.int64).reshape(4, 8) % len(tok), settings)
    assert not _cudnn_enabled()


def test_training_a_mapping_model_turns_it_off(tmp_path, cudnn_on):
    from mialab.calibdcd.mapping import train_mapping_model
    from mialab.lm.embeddings import resolve_model_path

    train_mapping_model(resolve_model_path(), ["a b c", "d e f"], ["c b a", "f e d"], str(tmp_path / "m"),
                        config=tiny_mapping())
    assert not _cudnn_enabled()
