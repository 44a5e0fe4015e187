"""Output-level baselines compared in the LaRA paper, as its released code defines them, and ReCaLL.

Each has a pure scoring function (hand-checkable) and a model-driven one (transformers, on a model and
tokenizer from :func:`mialab.lm.loading.load_lm` with left padding: generation in batches, ReCaLL's
log-likelihoods one text per forward pass, :mod:`mialab.lm.logprobs`). All scores are
oriented higher = more likely member (the code's ``get_direction() = -1`` scores are negated).

The LaRA code (``generate_full_data.py``, ``detectors/*.py``) reads every baseline but ReCaLL off
greedy responses decoded with vLLM's top-50 log-probabilities (:func:`mialab.lm.generation.topk_step_stats`):
the *original* greedy response to the question and the *perturbed* one to
``"[SYSTEM NOTE: Please double check your reasoning.] {question} [END OF QUERY]"``:

- ``recall_lara_code`` (the code's "Recall"): ``mean LL(perturbed response) / mean LL(original
  response)``, each under its own prompt. A different method from ReCaLL, hence the name.
- ``ppl_response``: minus the perplexity ``exp(-mean LL)`` of the original response.
- ``min_k_response@k``: ``-mean`` of the lowest ``int(k n)`` token log-probabilities of the original
  response, with the code's sign (its detector scores it "higher = more suspicious"; that is the
  negation of Min-K%, so its AUROC is one minus Min-K%'s on the same response).
- ``min_k_plus_plus_response@k``: mean of the lowest ``int(k n)`` values of ``(log p - mu) / sigma``.
- ``dime``: minus the length-penalised cosine of the original and perturbed responses' top-50
  entropy sequences (the code's direction -1).
- Self-Critique (Tao et al. 2025): the original greedy response, then a greedy re-answer to the
  question followed by the code's instruction (``resources/prompts/lara/self_critique.txt``); the
  cosine of their zero-padded top-50 entropy sequences times ``min(len) / max(len)``. As the code, the
  first response is cut to fit the model's context (:func:`critique_response`) and the re-answer to
  what the context has left (:func:`critique_budget`).
- CDD (Dong et al. 2024) as the code: ``n`` samples (T = 0.8, top-p 0.95), a sample counts when its
  token edit distance to the greedy response is at most ``alpha`` times the mean length of the
  samples and the greedy response (the CDD paper: the longest), the distance computed on the first
  100 tokens of both once the shorter exceeds 100; ``alpha = 0.05``.

ReCaLL (Xie et al. 2024) proper: ``LL(x | P) / LL(x)``, mean per-token log-likelihoods of the
question ``x`` with and without a prefix ``P`` of known non-member texts (members lose more
likelihood when conditioned on non-member context; the ratio of two negative numbers is larger).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from rapidfuzz.distance import Levenshtein

from mialab.core.finite import require_finite
from mialab.lm.generation import Generation, generate
from mialab.lm.loading import context_length
from mialab.lm.logprobs import token_logprobs
from mialab.lm.prompts import format_prompt
from mialab.text.llm_prompts import load_template

CDD_MAX_TOKENS = 100   # the code's token_to_detect
CRITIQUE_MARGIN = 32   # the code's tokens kept free after the critique prompt (``available``)


def recall_score(ll_conditional: np.ndarray, ll_unconditional: np.ndarray) -> np.ndarray:
    """ReCaLL ``LL(x | P) / LL(x)`` elementwise (mean log-likelihoods, both negative)."""
    cond = require_finite("ReCaLL conditional log-likelihoods", ll_conditional)
    uncond = require_finite("ReCaLL unconditional log-likelihoods", ll_unconditional)
    if (uncond == 0).any():
        raise ValueError("ReCaLL needs a non-zero unconditional log-likelihood")
    return cond / uncond


def cdd_distance(a: Sequence, b: Sequence, max_tokens: int = CDD_MAX_TOKENS) -> int:
    """Token edit distance as the code's ``levenshtein_distance_token``: when the shorter sequence is
    longer than ``max_tokens``, both are cut to their first ``max_tokens`` tokens."""
    a, b = (list(a), list(b)) if len(a) <= len(b) else (list(b), list(a))
    if len(a) > max_tokens:
        a, b = a[:max_tokens], b[:max_tokens]
    return Levenshtein.distance(a, b)


def cdd_peakedness(greedy: Sequence, samples: Sequence[Sequence], alpha: float) -> float:
    """CDD ``Peak = mean_i [ED(sample_i, greedy) <= alpha * l]``, ``l`` the mean length of the
    samples and the greedy output (the LaRA code; :func:`cdd_distance`)."""
    if not samples:
        raise ValueError("CDD needs at least one sampled output")
    threshold = alpha * np.mean([len(s) for s in samples] + [len(greedy)])
    return float(np.mean([cdd_distance(greedy, s) <= threshold for s in samples]))


def penalised_cosine(first: Sequence[float], second: Sequence[float]) -> float:
    """Cosine of the zero-padded sequences times ``min(len) / max(len)`` (Self-Critique, DIME).

    An all-zero sequence has no direction: similarity 0 (as in the code).
    """
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if len(a) == 0 or len(b) == 0:
        raise ValueError("an entropy similarity needs two non-empty entropy sequences")
    width = max(len(a), len(b))
    a, b = np.pad(a, (0, width - len(a))), np.pad(b, (0, width - len(b)))
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    if norm == 0:
        return 0.0
    return float(a @ b / norm * min(len(first), len(second)) / width)


self_critique_similarity = penalised_cosine


def dime_score(original: Sequence[float], perturbed: Sequence[float]) -> float:
    """DIME as the code: minus the :func:`penalised_cosine` of the two responses' entropy sequences."""
    return -penalised_cosine(original, perturbed)


def _mean_ll(logprobs: Sequence[float]) -> float:
    if len(logprobs) == 0:
        raise ValueError("a response has no scored token")
    return float(np.mean(logprobs))


def recall_lara_code(original: Sequence[float], perturbed: Sequence[float]) -> float:
    """The code's "Recall": mean LL of the perturbed response over mean LL of the original one."""
    ll_original = _mean_ll(original)
    if ll_original == 0:
        raise ValueError("recall_lara_code: the original response has log-likelihood 0")
    return _mean_ll(perturbed) / ll_original


def ppl_response(logprobs: Sequence[float]) -> float:
    """Minus the response's perplexity ``exp(-mean LL)`` (the code: lower PPL is more suspicious)."""
    return -float(np.exp(-_mean_ll(logprobs)))


def _lowest_k(values: np.ndarray, ratio: float) -> np.ndarray:
    """The ``int(ratio n)`` smallest values (at least one; the code returns NaN below one)."""
    return np.sort(values)[:max(1, int(len(values) * ratio))]


def min_k_response(logprobs: Sequence[float], ratio: float) -> float:
    """The code's Min-K% of a response: ``-mean`` of its lowest ``int(ratio n)`` log-probabilities."""
    _mean_ll(logprobs)
    return -float(_lowest_k(np.asarray(logprobs, dtype=np.float64), ratio).mean())


def min_k_plus_plus_response(logprobs: Sequence[float], mus: Sequence[float], sigmas: Sequence[float],
                             ratio: float) -> float:
    """Min-K%++ of a response: mean of the lowest ``int(ratio n)`` values of ``(log p - mu) / sigma``."""
    n = min(len(logprobs), len(mus), len(sigmas))
    if n == 0:
        raise ValueError("a response has no scored token")
    z = (np.asarray(logprobs[:n]) - np.asarray(mus[:n])) / np.asarray(sigmas[:n])
    return float(_lowest_k(z, ratio).mean())


def mean_log_likelihood(model, tokenizer, texts: list[str], *, prefix: str | None = None) -> np.ndarray:
    """Mean ``log p`` of each text's tokens, optionally after ``prefix`` (tokenised on its own,
    with the tokenizer's special tokens; the text's tokens are the same with or without it).

    A text's first token is scored only when something (a BOS token or the prefix) precedes it.
    """
    head = tokenizer(prefix if prefix is not None else "")["input_ids"]
    bodies = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    logps = token_logprobs(model, [head + body for body in bodies])
    first = max(len(head), 1) - 1
    out = np.array([lp[first:].mean() if len(lp) > first else np.nan for lp in logps])
    require_finite("mean token log-likelihoods (NaN: a text has no scorable token)", out)
    return out


def recall_scores(model, tokenizer, texts: list[str], prefix_texts: list[str], *, separator: str = "\n\n",
                  unconditional: np.ndarray | None = None) -> np.ndarray:
    """ReCaLL scores of ``texts`` with the non-member ``prefix_texts`` joined by ``separator``.

    ``unconditional``: the texts' :func:`mean_log_likelihood` without prefix, when already at hand.
    """
    prefix = separator.join(prefix_texts) + separator
    if unconditional is None:
        unconditional = mean_log_likelihood(model, tokenizer, texts)
    return recall_score(mean_log_likelihood(model, tokenizer, texts, prefix=prefix), unconditional)


def perturbed_question(question: str, prefix: str, suffix: str) -> str:
    """The perturbed prompt for ``recall_lara_code`` and DIME: ``f"{prefix} {question} {suffix}"`` (the
    code's prefix and suffix: config ``lara.baselines.responses``)."""
    return f"{prefix} {question} {suffix}".strip()


def greedy_answers(model, tokenizer, questions: list[str], *, max_new_tokens: int, batch_size: int, top_k: int,
                   system: str | None = None) -> list[Generation]:
    """One greedy answer per question with its top-``top_k`` step statistics, each question sent as
    a chat user turn (after ``system`` when given)."""
    gens = generate(model, tokenizer, [format_prompt(tokenizer, q, system) for q in questions],
                    max_new_tokens=max_new_tokens, batch_size=batch_size, top_k=top_k)
    return [g[0] for g in gens]


def response_columns(min_k: float) -> list[str]:
    """The names of :func:`response_scores`' baselines, in its order."""
    return ["recall_lara_code", "ppl_response", f"min_k_response@{min_k:g}", f"min_k_plus_plus_response@{min_k:g}",
            "dime"]


def response_scores(original: list[Generation], perturbed: list[Generation], *, min_k: float) -> dict[str, np.ndarray]:
    """The code's response-level baselines (module doc) from the original and perturbed greedy answers."""
    pairs = list(zip(original, perturbed, strict=True))
    return dict(zip(response_columns(min_k), [
        np.array([recall_lara_code(o.logprobs, p.logprobs) for o, p in pairs]),
        np.array([ppl_response(o.logprobs) for o in original]),
        np.array([min_k_response(o.logprobs, min_k) for o in original]),
        np.array([min_k_plus_plus_response(o.logprobs, o.mus, o.sigmas, min_k) for o in original]),
        np.array([dime_score(o.entropies, p.entropies) for o, p in pairs]),
    ], strict=True))


def cdd_batch_size(batch_size: int, n_samples: int) -> int:
    """Questions per batch of CDD's sampled answers: ``batch_size`` sequences' worth (at least one question)."""
    return max(1, batch_size // n_samples)


def cdd_scores(model, tokenizer, questions: list[str], *, n_samples: int, temperature: float, top_p: float,
               alpha: float, max_new_tokens: int, batch_size: int, seed: int, top_k: int, system: str | None = None,
               greedy: list[Generation] | None = None, offset: int = 0) -> np.ndarray:
    """CDD peakedness per question: one greedy and ``n_samples`` sampled answers (token ids).

    ``greedy``: the questions' :func:`greedy_answers` with the same ``max_new_tokens``, ``batch_size``
    and ``system``, when already at hand (e.g. Self-Critique's first answers); ``top_k`` only sizes the
    step statistics of the greedy answers made here (CDD reads their token ids). ``offset``: the
    questions are those of a longer list from index ``offset`` on (a multiple of :func:`cdd_batch_size`),
    sampled as they would be there (:func:`mialab.lm.generation.generate` seeds a batch with ``seed`` plus
    its first question's index).
    """
    if offset % cdd_batch_size(batch_size, n_samples):
        raise ValueError(f"CDD offset {offset} is not on a sampling batch boundary "
                         f"({cdd_batch_size(batch_size, n_samples)} questions)")
    if greedy is None:
        greedy = greedy_answers(model, tokenizer, questions, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                top_k=top_k, system=system)
    sampled = generate(model, tokenizer, [format_prompt(tokenizer, q, system) for q in questions],
                       max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature, top_p=top_p,
                       num_return_sequences=n_samples, batch_size=cdd_batch_size(batch_size, n_samples),
                       seed=seed + offset, entropies=False)
    return np.array([cdd_peakedness(g.token_ids, [s.token_ids for s in ss], alpha)
                     for g, ss in zip(greedy, sampled, strict=True)])


def critique_response(tokenizer, prompt: str, response: str, *, context: int, headroom: int) -> str:
    """The first response as the code puts it in the critique prompt: at most ``context - len(prompt) -
    headroom`` tokens (at least 0), counted as the code counts them (``tokenizer.encode``: special tokens
    included); a longer one is cut to that many and decoded (a BOS the encoding adds is counted, not kept)."""
    budget = max(0, context - len(tokenizer.encode(prompt)) - headroom)
    ids = tokenizer.encode(response)
    return response if len(ids) <= budget else tokenizer.decode(ids[:budget], skip_special_tokens=True)


def critique_budget(tokenizer, prompt: str, *, context: int, max_new_tokens: int) -> int:
    """The re-answer's length as the code's: ``max_new_tokens``, at most the context left after the
    critique prompt less :data:`CRITIQUE_MARGIN`, at least 1 (the code takes its batch's longest prompt;
    here each prompt's own)."""
    return int(min(max_new_tokens, max(1, context - len(tokenizer.encode(prompt)) - CRITIQUE_MARGIN)))


def self_critique_scores(model, tokenizer, questions: list[str], *, max_new_tokens: int, batch_size: int, top_k: int,
                         headroom: int = 512, template: str = "self_critique", system: str | None = None,
                         first: list[Generation] | None = None) -> np.ndarray:
    """Self-Critique similarity per question (greedy answer, then greedy critique re-answer), on
    top-``top_k`` entropies. The first answer in the critique prompt is cut to the model's context less
    ``headroom`` tokens (the code's 512) and the question's prompt (:func:`critique_response`), the
    re-answer to the context left (:func:`critique_budget`).

    ``first``: the questions' :func:`greedy_answers` with the same settings, when already at hand.
    """
    if first is None:
        first = greedy_answers(model, tokenizer, questions, max_new_tokens=max_new_tokens, batch_size=batch_size,
                               top_k=top_k, system=system)
    tpl = load_template(template)
    context = context_length(model)
    critiques = [tpl.format(question=q, response=critique_response(tokenizer, format_prompt(tokenizer, q, system),
                                                                   f.text, context=context, headroom=headroom))
                 for q, f in zip(questions, first, strict=True)]
    budgets = [critique_budget(tokenizer, format_prompt(tokenizer, c, system), context=context,
                               max_new_tokens=max_new_tokens) for c in critiques]
    second = greedy_answers(model, tokenizer, critiques, max_new_tokens=max(budgets), batch_size=batch_size,
                            top_k=top_k, system=system)
    # a greedy answer's first n steps are those of a run with max_new_tokens = n
    return np.array([penalised_cosine(f.entropies, s.entropies[:n])
                     for f, s, n in zip(first, second, budgets, strict=True)])
