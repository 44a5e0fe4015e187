"""VeilProbe's mapping model and feature pruning (Hu et al. 2025; ``mappingmodel.py``,
``run_protonet_classifier.py``).

The mapping model is a BERT encoder-decoder trained from scratch on (input text, target output)
pairs, so it learns the target's input-output mapping (members: the target reproduces the text).
Architecture and training as the code: encoder and decoder of ``num_layers`` BERT layers (6,
hidden 512, 8 heads, feed-forward 2048, dropout 0.1), the bert-base-uncased vocabulary; 2 epochs,
batch 2, AdamW lr 5e-5 with weight decay 0.01 (not on biases and LayerNorm weights) decaying
linearly to 0, gradient norm clipped at 1 and a seeded shuffle (the Hugging Face ``Trainer``
defaults the code runs with). Inputs and targets are padded to ``max_length`` and, as in the code,
the padding positions of the target count in the loss.

Features of a text (``extract_and_combine_features``): the encoder reads the text (padded to
``max_length``), the decoder reads the fixed ``[CLS]`` prompt (tokenised with special tokens and
padded to ``max_length``, no decoder mask) cross-attending to every encoder position; each
position's hidden states of every layer (embeddings included) of the encoder, then of the
decoder, are concatenated and averaged over the positions: ``d = 2 (num_layers + 1) hidden``.

VeilProbe's feature pruning is part of its classifier (:mod:`mialab.calibdcd.classifiers`).
Seeded and deterministic on CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class MappingConfig:
    """The mapping model and its training: ``calibdcd.detectors.veilprobe.mapping`` less its tokenizer
    (the schema's defaults are ``mappingmodel.py``'s)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_length: int
    dropout: float
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    seed: int


def build_mapping_model(tok, cfg: MappingConfig):
    """A freshly initialised BERT encoder-decoder for the tokenizer's vocabulary."""
    from transformers import BertConfig, BertLMHeadModel, BertModel, EncoderDecoderModel

    shape = dict(vocab_size=len(tok), hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
                 num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
                 max_position_embeddings=cfg.max_length, hidden_dropout_prob=cfg.dropout,
                 attention_probs_dropout_prob=cfg.dropout, pad_token_id=tok.pad_token_id)
    encoder = BertModel(BertConfig(**shape))   # with its pooler, as the code's AutoModel.from_config
    decoder = BertLMHeadModel(BertConfig(**shape, is_decoder=True, add_cross_attention=True))
    model = EncoderDecoderModel(encoder=encoder, decoder=decoder)
    model.config.decoder_start_token_id = tok.cls_token_id
    model.config.pad_token_id = tok.pad_token_id
    return model


def _padded(tok, texts: Sequence[str], max_length: int):
    return tok(list(texts), padding="max_length", truncation=True, max_length=max_length, return_tensors="pt")


def train_mapping_model(tokenizer, inputs: Sequence[str], outputs: Sequence[str], output: str, *,
                        config: MappingConfig, device: str = "cpu") -> dict:
    """Train a mapping model on (input, output) pairs and save it (and the tokenizer: a folder, or a tokenizer
    of :func:`mialab.lm.tiny.bert_tokenizer`) to ``output`` (a Hugging Face folder, safetensors, written atomically);
    returns the mean loss per epoch."""
    import torch
    from transformers import AutoTokenizer, get_linear_schedule_with_warmup

    from mialab.core.io import atomic_directory

    if len(inputs) != len(outputs) or not inputs:
        raise ValueError(f"need aligned, non-empty (input, output) pairs, got {len(inputs)} and {len(outputs)}")
    from mialab.lm.loading import no_cudnn_attention

    no_cudnn_attention()
    tok = AutoTokenizer.from_pretrained(tokenizer) if isinstance(tokenizer, str) else tokenizer
    enc, target = _padded(tok, inputs, config.max_length), _padded(tok, outputs, config.max_length)
    n, per_epoch = len(inputs), math.ceil(len(inputs) / config.batch_size)
    losses = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = build_mapping_model(tok, config).to(device)
        decay = [p for name, p in model.named_parameters() if not name.endswith("bias") and "LayerNorm" not in name]
        rest = [p for name, p in model.named_parameters() if name.endswith("bias") or "LayerNorm" in name]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                 {"params": rest, "weight_decay": 0.0}], lr=config.lr)
        sched = get_linear_schedule_with_warmup(opt, 0, config.epochs * per_epoch)
        order = torch.Generator().manual_seed(config.seed)
        model.train()
        for _ in range(config.epochs):
            total = 0.0
            perm = torch.randperm(n, generator=order)
            for s in range(0, n, config.batch_size):
                rows = perm[s:s + config.batch_size]
                loss = model(input_ids=enc["input_ids"][rows].to(device),
                             attention_mask=enc["attention_mask"][rows].to(device),
                             labels=target["input_ids"][rows].to(device)).loss
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                total += loss.item()
            losses.append(round(total / per_epoch, 4))
    model.eval()
    with atomic_directory(output) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
    return {"pairs": n, "steps": config.epochs * per_epoch, "loss": losses}


def mapping_features(model_dir: str, texts: Sequence[str], *, device: str = "cpu") -> np.ndarray:
    """Mean over positions of every encoder and decoder layer's hidden states (module docstring), one forward
    pass per text, so a text's features do not depend on the texts read with it (:mod:`mialab.lm.logprobs`)."""
    import torch
    from transformers import AutoTokenizer, EncoderDecoderModel

    from mialab.lm.loading import load_pretrained

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = load_pretrained(EncoderDecoderModel, model_dir).to(device).eval()
    max_length = model.encoder.config.max_position_embeddings
    prompt = _padded(tok, [tok.cls_token], max_length)["input_ids"].to(device)
    out = []
    with torch.no_grad():
        for text in texts:
            batch = _padded(tok, [text], max_length).to(device)
            enc = model.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                output_hidden_states=True)
            dec = model.decoder(input_ids=prompt, encoder_hidden_states=enc.last_hidden_state,
                                output_hidden_states=True)
            states = torch.cat([*enc.hidden_states, *dec.hidden_states], dim=-1)
            out.append(states.mean(dim=1).double().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, 2 * (model.encoder.config.num_hidden_layers + 1)
                                                       * model.encoder.config.hidden_size))
