"""DC-PDD (Zhang et al. 2024, EMNLP; MIMIR ``mimir/attacks/dc_pdd.py``): token probabilities calibrated by
the tokens' frequencies in a reference corpus. For the first occurrence of each distinct token of the text,
``alpha = p(token | EOS, preceding tokens) * log(1 / f(token))``, capped at ``cap``; the score is the mean
of ``alpha`` (a member's rare tokens are likely). MIMIR returns minus this mean (its convention: higher =
non-member).

``f``: the Laplace-smoothed frequencies ``(1 + count) / (total + V)`` over the tokenizer's ``V`` ids, a token
counting once per document of ``scoring.dc_pdd.corpus`` it appears in (a document frequency: MIMIR's
``fre_dis[input_ids] += 1`` on a tensor, ``dc_pdd.py:_fre_dis``, writes a repeated index once) (a corpus as ``models.<name>.filler`` names one,
:func:`mialab.data.corpus.read_corpus`), each document tokenized as the text is (special tokens included) and
cut to its first ``max_tokens`` (MIMIR's 1024; null: whole documents). The text is scored with the tokenizer's
EOS token before it, as MIMIR does, so its own first token (a BOS) is predicted too; under ``truncation:
truncate`` on its first ``scoring.max_length - 1`` tokens. Settings ``scoring.dc_pdd``: ``corpus``, ``cap``
(MIMIR's ``a``, 0.01), ``max_tokens``.
"""

from __future__ import annotations

import numpy as np

from mialab.data.corpus import read_corpus
from mialab.data.sources import local_paths
from mialab.lm.logprobs import sliding_windows, token_logprobs
from mialab.scoring.attacks import Attack, Texts, register


def token_frequencies(tokenizer, documents: list[str], max_tokens: int | None) -> np.ndarray:
    """Laplace-smoothed frequency of every token id of ``tokenizer`` in ``documents`` (module doc)."""
    counts = np.zeros(len(tokenizer), dtype=np.float64)
    cut = {"truncation": True, "max_length": max_tokens} if max_tokens else {}
    for ids in tokenizer(documents, **cut)["input_ids"]:
        counts[np.unique(ids)] += 1
    return (1 + counts) / (counts.sum() + len(counts))


def first_occurrences(ids: list[int]) -> list[int]:
    """Positions of the first occurrence of each distinct id, in order."""
    seen: set[int] = set()
    return [i for i, t in enumerate(ids) if not (t in seen or seen.add(t))]


def eos_logprobs(model, rows: list[list[int]], eos: int, max_length: int) -> list[np.ndarray]:
    """``log p`` of every token of each row after an EOS token, windows as :func:`sliding_windows`."""
    pieces = [(i, [eos, *ids][b:e], keep) for i, ids in enumerate(rows)
              for b, e, keep in sliding_windows(len(ids) + 1, max_length)]
    parts: list[list[np.ndarray]] = [[] for _ in rows]
    for (i, _, keep), lp in zip(pieces, token_logprobs(model, [p[1] for p in pieces])):
        parts[i].append(lp[len(lp) - keep:])
    return [np.concatenate(p) for p in parts]


@register
class DCPDD(Attack):
    name = "dc_pdd"
    forwards = 1

    def check(self, scoring: dict) -> str | None:
        if "corpus" not in scoring[self.name]:
            return ("scoring.dc_pdd.corpus: DC-PDD needs a reference corpus for its token frequencies (a .txt "
                    "file or {source, columns, where}, as models.<name>.filler)")
        return None

    def inputs(self, plan, dataset: str) -> dict[str, list[str]]:
        corpus = plan.config["scoring"][self.name]["corpus"]
        return {"corpus": local_paths(corpus["source"] if isinstance(corpus, dict) else corpus)}

    def score(self, texts: Texts) -> np.ndarray:
        spec, tok = texts.settings(self.name), texts.tokenizer
        if tok.eos_token_id is None:
            raise ValueError("scoring.dc_pdd: the tokenizer has no EOS token to start the text with")
        freq = token_frequencies(tok, read_corpus(spec["corpus"]), spec["max_tokens"])
        max_length = texts.scoring["max_length"]
        rows = texts.rows
        if texts.scoring["truncation"] == "truncate":
            rows = [r[:max_length - 1] for r in rows]
        out = np.empty(len(rows))
        for i, (ids, logp) in enumerate(zip(rows, eos_logprobs(texts.model, rows, tok.eos_token_id, max_length))):
            first = first_occurrences(ids)
            alpha = np.exp(logp[first]) * np.log(1 / freq[np.asarray(ids)[first]])
            out[i] = float(np.minimum(alpha, spec["cap"]).mean())
        return out
