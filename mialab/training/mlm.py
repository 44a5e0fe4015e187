"""A small masked LM (BERT) pretrained from scratch: VeilProbe's fill-mask model where no hub is reachable.

VeilProbe's code replaces each key token by a random one of bert-base-cased's top-5 predictions for it
(:func:`mialab.calibdcd.perturb.mlm_fill`). A world without a hub (the tiny world) trains its own, a
``kind: mlm`` model: a cased WordPiece tokenizer as BERT's and a ``BertForMaskedLM`` trained on the
configured corpora (every text alike, as the world's tokenizer: no membership signal) by BERT's
objective: 15% of the tokens chosen (never a special one), 80% of those replaced by ``[MASK]``, 10% by a
random token, 10% kept, the loss on the chosen ones only. Blocks of ``[CLS]`` + ``seq_len - 2`` tokens +
``[SEP]``; the loop, schedule and resumable checkpoints are pretraining's
(:func:`mialab.training.pretrain.pretrain`), the masks drawn from its checkpointed generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from mialab.core.settings import settings_from
from mialab.training.pretrain import PretrainSettings, filler_documents, pack_blocks

#: Shares of the chosen tokens that become ``[MASK]`` and a random token (the rest stay): BERT's 80 / 10 / 10
MASK_SHARE, RANDOM_SHARE = 0.8, 0.1


@dataclass(frozen=True)
class MLMSettings(PretrainSettings):
    """A ``kind: mlm`` model's ``train`` section: pretraining's settings and the share of tokens chosen (the
    schema fills its defaults)."""

    mask_prob: float

    @classmethod
    def from_config(cls, spec: dict) -> MLMSettings:
        return settings_from(cls, spec, "masked-LM pretraining")


def corpus_documents(texts: Iterable[str]) -> list[str]:
    """Paragraph documents (at most 200 words) of every text (a whole file is one text)."""
    return [doc for text in texts for doc in filler_documents(text)]


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """The cased WordPiece tokenizer of :func:`mialab.lm.tiny.bert_tokenizer`."""
    from mialab.lm.tiny import bert_tokenizer

    return bert_tokenizer(texts, vocab_size)


def mlm_blocks(docs: list[str], tokenizer, seq_len: int) -> np.ndarray:
    """``[n_blocks, seq_len]`` ids: the documents joined by ``[SEP]``, cut into ``seq_len - 2`` tokens, each
    block wrapped as BERT reads a text, ``[CLS] ... [SEP]``."""
    body = pack_blocks(docs, tokenizer, seq_len - 2, separator=tokenizer.sep_token_id)
    cls = np.full((len(body), 1), tokenizer.cls_token_id, dtype=np.int64)
    sep = np.full((len(body), 1), tokenizer.sep_token_id, dtype=np.int64)
    return np.concatenate([cls, body, sep], axis=1)


def masked_inputs(tokenizer, mask_prob: float):
    """``inputs(batch, rng)`` for :func:`mialab.training.pretrain.pretrain`: BERT's masking of a batch of ids
    (module doc); labels -100 outside the chosen positions."""
    import torch

    special = np.array(tokenizer.all_special_ids, dtype=np.int64)
    mask_id, vocab = tokenizer.mask_token_id, len(tokenizer)

    def inputs(batch, rng: np.random.Generator) -> dict:
        ids = batch.numpy()
        chosen = (rng.random(ids.shape) < mask_prob) & ~np.isin(ids, special)
        roll = rng.random(ids.shape)
        masked = np.where(chosen & (roll < MASK_SHARE), mask_id, ids)
        swapped = chosen & (roll >= MASK_SHARE) & (roll < MASK_SHARE + RANDOM_SHARE)
        masked[swapped] = rng.integers(0, vocab, int(swapped.sum()))
        return {"input_ids": torch.from_numpy(masked), "labels": torch.from_numpy(np.where(chosen, ids, -100))}

    return inputs


def init_mlm(tokenizer, arch: dict, seq_len: int, seed: int):
    """A freshly initialised ``BertForMaskedLM`` of a config entry's ``architecture`` (positions covering
    ``seq_len``), seeded."""
    import torch
    from transformers import BertForMaskedLM

    from mialab.lm.tiny import bert_config

    config = bert_config(len(tokenizer), hidden_size=arch["hidden_size"], num_layers=arch["num_layers"],
                         num_heads=arch["num_heads"], intermediate_size=arch.get("intermediate_size"),
                         max_position_embeddings=max(arch["max_position_embeddings"], seq_len), tokenizer=tokenizer)
    torch.manual_seed(seed)
    return BertForMaskedLM(config)
