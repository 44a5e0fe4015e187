"""Build the tiny world's tokenizers and models from scratch: its Llama (byte-level BPE) and a BERT
masked LM (cased WordPiece, BERT's ``[CLS] text [SEP]``).

The same Hugging Face classes as a 7B Llama or bert-base-cased, only smaller, so every downstream stage
runs the code it runs on the cluster. Saved as normal Hugging Face directories (safetensors weights).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
#: BERT's special tokens (bert-base-cased's names)
BERT_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
               "mask_token": "[MASK]"}

# A minimal chat template for the tiny world's instruction-tuned models (CalibDCD / ADRA prompts).
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>\n' + m['content'] }}{% if not loop.last or not continue_final_message %}{{ '</s>\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 8192, min_frequency: int = 2):
    """Train a byte-level BPE tokenizer and wrap it as a ``PreTrainedTokenizerFast``.

    Byte-level BPE never produces unknown tokens, so any text (LaTeX, CJK, code) round-trips.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    bos = tok.token_to_id(SPECIAL_TOKENS["bos_token"])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)
    fast.chat_template = TINY_CHAT_TEMPLATE
    return fast


def wordpiece_tokenizer(texts: Iterable[str], vocab_size: int, tokens: dict | None = None, extra: Iterable[str] = (),
                        *, lowercase: bool = False):
    """A WordPiece tokenizer as BERT's (its normaliser, cased as bert-base-cased's or, with ``lowercase``,
    lowercasing and stripping accents as bert-base-uncased's; its pre-tokeniser, ``[CLS] $A [SEP]``, pairs
    ``[CLS] $A [SEP] $B [SEP]``), trained on ``texts``; ``tokens``: the special tokens by role (default
    :data:`BERT_TOKENS`), ``extra`` more of them. Returns the ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokens = dict(tokens or BERT_TOKENS)
    special = list(dict.fromkeys([*tokens.values(), *extra]))

    def pipeline(tok):
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        return tok

    texts = list(texts)
    tok = pipeline(Tokenizer(models.WordPiece(unk_token=tokens["unk_token"])))
    # The trainer numbers each character's "##" continuation where it first meets one, in its word counts' hash
    # order, and breaks ties between merges by those numbers (huggingface/tokenizers#1794): two runs on the same
    # texts gave two vocabularies. Named up front in character order, beside the special tokens, they get the
    # same ids in every run; the tokenizer is then rebuilt from the trained vocabulary, with them as plain entries.
    words = (w for t in texts for w, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(t)))
    continuations = sorted({f"##{c}" for w in words for c in w[1:]} - set(special))
    tok.train_from_iterator(texts, trainer=trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=special + continuations, show_progress=False))
    tok = pipeline(Tokenizer(models.WordPiece(tok.get_vocab(with_added_tokens=False), unk_token=tokens["unk_token"])))
    tok.add_special_tokens(special)
    cls, sep = tokens["cls_token"], tokens["sep_token"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(t, tok.token_to_id(t)) for t in (cls, sep)])
    return tok


def bert_tokenizer(texts: Iterable[str], vocab_size: int, *, lowercase: bool = False):
    """:func:`wordpiece_tokenizer` with BERT's special tokens as a ``PreTrainedTokenizerFast``: cased (the
    ``kind: mlm`` model's, as bert-base-cased) or, with ``lowercase``, uncased (VeilProbe's mapping models'
    ``vocab_size``, as bert-base-uncased)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=wordpiece_tokenizer(texts, vocab_size, lowercase=lowercase),
                                   **BERT_TOKENS)


def bert_config(vocab_size: int, *, hidden_size: int, num_layers: int, num_heads: int,
                intermediate_size: int | None = None, max_position_embeddings: int = 512, tokenizer=None):
    """A ``BertConfig`` for a small masked LM; the pad id from ``tokenizer`` when given."""
    from transformers import BertConfig

    ids = {} if tokenizer is None else {"pad_token_id": tokenizer.pad_token_id}
    return BertConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
                      num_attention_heads=num_heads, intermediate_size=intermediate_size or 4 * hidden_size,
                      max_position_embeddings=max_position_embeddings, **ids)


def llama_config(vocab_size: int, *, hidden_size: int = 256, num_layers: int = 4, num_heads: int = 4,
                 intermediate_size: int | None = None, max_position_embeddings: int = 512, tokenizer=None):
    """A ``LlamaConfig`` for a small model; token ids come from ``tokenizer`` when given."""
    from transformers import LlamaConfig

    ids = {}
    if tokenizer is not None:
        ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                   pad_token_id=tokenizer.pad_token_id)
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        **ids,
    )


def init_model(config, seed: int):
    """A freshly initialised ``LlamaForCausalLM`` (float32), seeded."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def save_model(model, tokenizer, path: str | Path) -> None:
    """Save model (safetensors) and tokenizer as one Hugging Face directory."""
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
