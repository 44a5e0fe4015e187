"""Generation with per-step statistics of the next-token distribution (entropies, top-``k``
log-probabilities), for LaRA's baselines and the ``hf`` paraphraser, on a loaded model (from
:func:`mialab.lm.loading.load_lm`); batches run on :func:`mialab.lm.hf_backend.generate_batches`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Generation:
    """One generated answer: its text, token ids (up to, without, the first EOS) and, at every
    decoding step (the EOS step included), the entropy (nats) of the next-token distribution and,
    when asked for (``top_k`` of :func:`generate`), the generated token's log-probability and the
    mean / standard deviation of ``log p`` under the top-``k`` distribution (Min-K%++'s ``mu``, ``sigma``)."""

    text: str
    token_ids: tuple[int, ...]
    entropies: tuple[float, ...]
    logprobs: tuple[float, ...] = ()
    mus: tuple[float, ...] = ()
    sigmas: tuple[float, ...] = ()


def step_entropies(step_logits) -> np.ndarray:
    """``[batch, steps]`` entropies (nats) from generate's per-step logits ``steps x [batch, vocab]``,
    one step at a time (no ``[batch, steps, vocab]`` copy)."""
    import torch

    cols = []
    for logits in step_logits:
        logp = torch.log_softmax(logits.float(), dim=-1)
        cols.append(-(logp.exp() * logp).sum(-1).double().cpu())
    return torch.stack(cols, dim=1).numpy()


PROB_FLOOR = 1e-12   # the released code clips top-k probabilities here before its logs
VAR_FLOOR = 1e-6     # and the top-k variance of log p here before its square root


def topk_step_stats(step_logits, chosen, k: int) -> dict[str, np.ndarray]:
    """Per-step statistics of the top-``k`` log-probabilities, as the LaRA code reads vLLM's ``logprobs=k``
    (``generate_full_data.py:process_single_output``): ``logprobs`` of the ``chosen [batch, steps]``
    tokens (exact), and over the top-``k`` entries, unnormalised, with ``p`` clipped at
    :data:`PROB_FLOOR`: ``entropies = -sum p log p``, ``mus = sum p log q``, ``sigmas =
    sqrt(max(sum p (log q)^2 - mu^2, VAR_FLOOR))`` (``q`` the unclipped probability). Arrays ``[batch, steps]``."""
    import torch

    out = {name: [] for name in ("logprobs", "entropies", "mus", "sigmas")}
    for t, logits in enumerate(step_logits):
        logp = torch.log_softmax(logits.float(), dim=-1).double()
        out["logprobs"].append(logp.gather(-1, chosen[:, t:t + 1].to(logp.device)).squeeze(-1).cpu())
        top = logp.topk(min(k, logp.shape[-1]), dim=-1).values
        p = top.exp().clamp_min(PROB_FLOOR)
        mu = (p * top).sum(-1)
        out["entropies"].append(-(p * p.log()).sum(-1).cpu())
        out["mus"].append(mu.cpu())
        out["sigmas"].append(((p * top.square()).sum(-1) - mu.square()).clamp_min(VAR_FLOOR).sqrt().cpu())
    return {name: torch.stack(cols, dim=1).numpy() for name, cols in out.items()}


def _eos_ids(model, tokenizer) -> set[int]:
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def generate(model, tokenizer, prompts: list[str], *, max_new_tokens: int = 256, do_sample: bool = False,
             temperature: float = 1.0, top_p: float = 1.0, num_return_sequences: int = 1,
             batch_size: int = 8, seed: int = 0, entropies: bool = True,
             top_k: int | None = None) -> list[list[Generation]]:
    """Generate ``num_return_sequences`` answers per (already formatted) prompt, batched
    (:func:`mialab.lm.hf_backend.generate_batches`, left padding whatever the tokenizer's side).

    Within the model's context as vLLM keeps it (:func:`mialab.lm.hf_backend.context_rooms`): a prompt that fills
    it is an error, and an answer ends where prompt and answer fill it.

    Entropies come from the raw logits (before temperature or top-p), i.e. the model's own
    next-token distribution: over the full vocabulary, or with ``top_k`` over its top-``k`` entries
    together with the tokens' log-probabilities and Min-K%++ statistics (:func:`topk_step_stats`).
    ``entropies=False`` skips them (empty tuples) and keeps no logits. Sampling is seeded per batch
    (torch seed ``seed`` plus the batch's first prompt index).
    """
    from mialab.lm.hf_backend import context_rooms, generate_batches
    from mialab.lm.loading import context_length
    from mialab.lm.prompts import prompt_token_ids

    eos = _eos_ids(model, tokenizer)
    sampling = dict(do_sample=True, temperature=temperature, top_p=top_p) if do_sample else dict(do_sample=False)
    rows = [prompt_token_ids(tokenizer, p, "plain") for p in prompts]
    rooms = context_rooms(rows, context_length(model))
    results: list[list[Generation]] = []
    for first, width, out in generate_batches(model, rows, num_return_sequences, batch_size=batch_size,
                                              pad_id=tokenizer.pad_token_id, seed_of=lambda start: seed + start,
                                              max_new_tokens=max_new_tokens, output_logits=entropies,
                                              return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id,
                                              **sampling):
        new = out.sequences[:, width:].cpu()
        if not entropies:
            stats = {"entropies": np.zeros((new.shape[0], 0))}
        elif top_k is not None:
            stats = topk_step_stats(out.logits, new, top_k)
        else:
            stats = {"entropies": step_entropies(out.logits)}
        for row in range(new.shape[0]):
            room = rooms[first + row // num_return_sequences]
            ids = new[row].tolist()[:room]
            n_tok = next((t for t, tok in enumerate(ids) if tok in eos), len(ids))
            steps = {name: tuple(values[row, :min(n_tok + 1, room)].tolist()) for name, values in stats.items()}
            gen = Generation(text=tokenizer.decode(ids[:n_tok], skip_special_tokens=True),
                             token_ids=tuple(ids[:n_tok]), **steps)
            if row % num_return_sequences == 0:
                results.append([])
            results[-1].append(gen)
    return results
