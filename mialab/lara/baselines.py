"""Output-level baselines compared in the LaRA paper: ReCaLL, CDD and Self-Critique.

Each has a pure scoring function (hand-checkable) and a model-driven one (transformers, batched,
on a model and tokenizer from :func:`mialab.lara.lm.load_lm` with left padding). All scores are
oriented higher = more likely member:

- ReCaLL (Xie et al. 2024): ``LL(x | P) / LL(x)``, mean per-token log-likelihoods of ``x``
  with and without a prefix ``P`` of known non-member texts. Members lose more likelihood
  when conditioned on non-member context, so ``LL(x | P)`` is more negative and the ratio of
  two negative numbers is larger.
- CDD (Dong et al. 2024): peakedness of the output distribution, the fraction of ``n``
  sampled outputs within token edit distance ``alpha * l`` of the greedy output, ``l`` the
  longest output (tokens); ``alpha = 0.05``. (The LaRA text at hand does not restate CDD;
  this follows the CDD paper.)
- Self-Critique (Tao et al. 2025): greedy answer, then a greedy re-answer asked to take a
  different reasoning path; the cosine of their zero-padded per-token entropy sequences times
  ``min(len) / max(len)``. A memorised problem stays on its rewarded path, so high = member.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from rapidfuzz.distance import Levenshtein

from mialab.lara.llm import load_template
from mialab.lara.lm import Generation, format_prompt, generate, token_logprobs

CDD_ALPHA = 0.05


def recall_score(ll_conditional: np.ndarray, ll_unconditional: np.ndarray) -> np.ndarray:
    """ReCaLL ``LL(x | P) / LL(x)`` elementwise (mean log-likelihoods, both negative)."""
    cond = np.asarray(ll_conditional, dtype=np.float64)
    uncond = np.asarray(ll_unconditional, dtype=np.float64)
    if (uncond == 0).any() or not (np.isfinite(cond).all() and np.isfinite(uncond).all()):
        raise ValueError("ReCaLL needs finite log-likelihoods and a non-zero unconditional one")
    return cond / uncond


def cdd_peakedness(greedy: Sequence, samples: Sequence[Sequence], alpha: float = CDD_ALPHA) -> float:
    """CDD ``Peak = mean_i [ED(sample_i, greedy) <= alpha * l]``, ``l`` the longest of all outputs.

    Outputs are sequences (token ids or strings); ``ED`` is the Levenshtein distance (rapidfuzz).
    """
    if not samples:
        raise ValueError("CDD needs at least one sampled output")
    longest = max(len(greedy), *(len(s) for s in samples))
    dist = np.array([Levenshtein.distance(list(s), list(greedy)) for s in samples])
    return float(np.mean(dist <= alpha * longest))


def self_critique_similarity(first: Sequence[float], second: Sequence[float]) -> float:
    """Cosine of the zero-padded entropy sequences times ``min(len) / max(len)``.

    An all-zero sequence has no direction: similarity 0 (as in Tao et al.'s code).
    """
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if len(a) == 0 or len(b) == 0:
        raise ValueError("Self-Critique needs two non-empty entropy sequences")
    width = max(len(a), len(b))
    a, b = np.pad(a, (0, width - len(a))), np.pad(b, (0, width - len(b)))
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    if norm == 0:
        return 0.0
    return float(a @ b / norm * min(len(first), len(second)) / width)


def mean_log_likelihood(model, tokenizer, texts: list[str], *, prefix: str | None = None,
                        batch_size: int = 8) -> np.ndarray:
    """Mean ``log p`` of each text's tokens, optionally after ``prefix`` (tokenised on its own,
    with the tokenizer's special tokens; the text's tokens are the same with or without it).

    A text's first token is scored only when something (a BOS token or the prefix) precedes it.
    """
    head = tokenizer(prefix if prefix is not None else "")["input_ids"]
    bodies = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    limit = getattr(model.config, "max_position_embeddings", None)
    seqs = [head + body for body in bodies]
    if limit is not None and max(len(s) for s in seqs) > limit:
        raise ValueError(f"prefix + text reach {max(len(s) for s in seqs)} tokens, over the model's {limit}")
    logps = token_logprobs(model, seqs, pad_token_id=tokenizer.pad_token_id, batch_size=batch_size)
    first = max(len(head), 1) - 1
    out = np.array([lp[first:].mean() if len(lp) > first else np.nan for lp in logps])
    if not np.isfinite(out).all():
        raise ValueError("a text has no scorable token")
    return out


def recall_scores(model, tokenizer, texts: list[str], prefix_texts: list[str], *, separator: str = "\n\n",
                  batch_size: int = 8, unconditional: np.ndarray | None = None) -> np.ndarray:
    """ReCaLL scores of ``texts`` with the non-member ``prefix_texts`` joined by ``separator``.

    ``unconditional``: the texts' :func:`mean_log_likelihood` without prefix, when already at hand.
    """
    prefix = separator.join(prefix_texts) + separator
    if unconditional is None:
        unconditional = mean_log_likelihood(model, tokenizer, texts, batch_size=batch_size)
    return recall_score(mean_log_likelihood(model, tokenizer, texts, prefix=prefix, batch_size=batch_size),
                        unconditional)


def greedy_answers(model, tokenizer, questions: list[str], *, max_new_tokens: int = 256,
                   batch_size: int = 8) -> list[Generation]:
    """One greedy answer per question (with entropies), each sent as a chat user turn."""
    gens = generate(model, tokenizer, [format_prompt(tokenizer, q) for q in questions],
                    max_new_tokens=max_new_tokens, batch_size=batch_size)
    return [g[0] for g in gens]


def cdd_scores(model, tokenizer, questions: list[str], *, n_samples: int = 50, temperature: float = 0.8,
               alpha: float = CDD_ALPHA, max_new_tokens: int = 256, batch_size: int = 8, seed: int = 0,
               greedy: list[Generation] | None = None) -> np.ndarray:
    """CDD peakedness per question: one greedy and ``n_samples`` sampled answers (token ids).

    ``greedy``: the questions' :func:`greedy_answers` with the same ``max_new_tokens`` and
    ``batch_size``, when already at hand (e.g. Self-Critique's first answers).
    """
    if greedy is None:
        greedy = greedy_answers(model, tokenizer, questions, max_new_tokens=max_new_tokens, batch_size=batch_size)
    sampled = generate(model, tokenizer, [format_prompt(tokenizer, q) for q in questions],
                       max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature,
                       num_return_sequences=n_samples, batch_size=max(1, batch_size // n_samples), seed=seed,
                       entropies=False)
    return np.array([cdd_peakedness(g.token_ids, [s.token_ids for s in ss], alpha)
                     for g, ss in zip(greedy, sampled, strict=True)])


def self_critique_scores(model, tokenizer, questions: list[str], *, template: str = "self_critique",
                         max_new_tokens: int = 256, batch_size: int = 8,
                         first: list[Generation] | None = None) -> np.ndarray:
    """Self-Critique similarity per question (greedy answer, then greedy critique re-answer).

    ``first``: the questions' :func:`greedy_answers` with the same ``max_new_tokens`` and
    ``batch_size``, when already at hand.
    """
    if first is None:
        first = greedy_answers(model, tokenizer, questions, max_new_tokens=max_new_tokens, batch_size=batch_size)
    tpl = load_template(template)
    second = greedy_answers(model, tokenizer, [tpl.format(question=q, response=f.text)
                                               for q, f in zip(questions, first, strict=True)],
                            max_new_tokens=max_new_tokens, batch_size=batch_size)
    return np.array([self_critique_similarity(f.entropies, s.entropies) for f, s in zip(first, second)])
