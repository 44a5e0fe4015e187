"""Causal-LM helpers shared by LaRA and its baselines: per-token log-probabilities and
generation with per-step entropies, batched (models come from :mod:`mialab.lm.loading`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def load_lm(model_path: str, *, device: str = "auto", dtype: str = "float32", padding_side: str = "right",
            trust_remote_code: bool = False):
    """``(model, tokenizer)`` for inference; right padding for scoring, left for generation."""
    from mialab.lm.loading import load_causal_lm, load_tokenizer

    return (load_causal_lm(model_path, dtype=dtype, device=device, trust_remote_code=trust_remote_code),
            load_tokenizer(model_path, padding_side=padding_side, trust_remote_code=trust_remote_code))


def token_logprobs(model, sequences: list[list[int]], *, pad_token_id: int, batch_size: int = 8) -> list[np.ndarray]:
    """``log p(x_t | x_<t)`` for t = 1..n-1 of each token-id sequence (float64, length n-1)."""
    import torch

    out: list[np.ndarray] = []
    device = next(model.parameters()).device
    for start in range(0, len(sequences), batch_size):
        batch = sequences[start:start + batch_size]
        width = max(len(s) for s in batch)
        ids = torch.full((len(batch), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, seq in enumerate(batch):
            ids[i, :len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[i, :len(seq)] = 1
        with torch.inference_mode():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        picked = logp.gather(-1, ids[:, 1:].to(device).unsqueeze(-1)).squeeze(-1).double().cpu().numpy()
        out.extend(picked[i, :len(seq) - 1] for i, seq in enumerate(batch))
    return out


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of a prompt, with the tokenizer's special tokens unless the text (e.g. from a
    chat template) already starts with the BOS token."""
    bos = tokenizer.bos_token
    return tokenizer(text, add_special_tokens=not (bos and text.startswith(bos)))["input_ids"]


def format_prompt(tokenizer, text: str, system: str | None = None) -> str:
    """Wrap ``text`` as one user turn, after a ``system`` turn when given, with the tokenizer's chat
    template; without one, the raw text (after the system prompt and a blank line)."""
    if getattr(tokenizer, "chat_template", None):
        turns = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    return f"{system}\n\n{text}" if system else text


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
    """Generate ``num_return_sequences`` answers per (already formatted) prompt, batched.

    The tokenizer must pad on the left. Entropies come from the raw logits (before temperature
    or top-p), i.e. the model's own next-token distribution: over the full vocabulary, or with
    ``top_k`` over its top-``k`` entries together with the tokens' log-probabilities and Min-K%++
    statistics (:func:`topk_step_stats`). ``entropies=False`` skips them (empty tuples) and keeps
    no logits. Sampling is seeded per batch.
    """
    import torch

    from mialab.lm.hf_backend import generate_sharing_prefill

    if tokenizer.padding_side != "left":
        raise ValueError("generation needs a left-padding tokenizer (load_lm(..., padding_side='left'))")
    eos = _eos_ids(model, tokenizer)
    sampling = dict(do_sample=True, temperature=temperature, top_p=top_p) if do_sample else dict(do_sample=False)
    device = next(model.parameters()).device
    results: list[list[Generation]] = []
    for start in range(0, len(prompts), batch_size):
        enc = tokenizer.pad({"input_ids": [encode_prompt(tokenizer, p) for p in prompts[start:start + batch_size]]},
                            return_tensors="pt").to(device)
        torch.manual_seed(seed + start)
        with torch.inference_mode():
            out = generate_sharing_prefill(model, enc["input_ids"], enc["attention_mask"], num_return_sequences,
                                           max_new_tokens=max_new_tokens, output_logits=entropies,
                                           return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id,
                                           **sampling)
        new = out.sequences[:, enc["input_ids"].shape[1]:].cpu()
        if not entropies:
            stats = {"entropies": np.zeros((new.shape[0], 0))}
        elif top_k is not None:
            stats = topk_step_stats(out.logits, new, top_k)
        else:
            stats = {"entropies": step_entropies(out.logits)}
        for row in range(new.shape[0]):
            ids = new[row].tolist()
            n_tok = next((t for t, tok in enumerate(ids) if tok in eos), len(ids))
            steps = {name: tuple(values[row, :n_tok + 1].tolist()) for name, values in stats.items()}
            gen = Generation(text=tokenizer.decode(ids[:n_tok], skip_special_tokens=True),
                             token_ids=tuple(ids[:n_tok]), **steps)
            if row % num_return_sequences == 0:
                results.append([])
            results[-1].append(gen)
    return results


def text_generator(model_path: str, *, engine: str = "hf", backend_options: dict | None = None,
                   max_new_tokens: int = 4000, temperature: float = 0.7, top_p: float = 1.0, seed: int = 0,
                   trust_remote_code: bool = False):
    """A ``generate(prompts) -> completions`` callable over an instruction model (a local folder or a
    hub id in the cache), for the LLM-backed perturbation backends: each prompt is sent as one chat
    user turn on the project's rollout engine (``hf`` or ``vllm``, :mod:`mialab.lm.engine`,
    started once with ``backend_options``). ``temperature=0`` decodes greedily (then re-prompting
    repeats the same answer); ``run(prompts, temperature=t)`` overrides it for one call."""
    import dataclasses

    from mialab.lm.engine import SamplingConfig, start_backend, stop_token_ids
    from mialab.lm.loading import load_tokenizer
    from mialab.lm.prompts import prompt_token_ids

    tok = load_tokenizer(model_path, padding_side="left", trust_remote_code=trust_remote_code)
    backend = start_backend(engine, model_path, backend_options, trust_remote_code=trust_remote_code)
    stops = stop_token_ids(model_path, tok)
    sampling = SamplingConfig(n=1, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=0,
                              seed=seed)

    def run(prompts: list[str], *, temperature: float = temperature) -> list[str]:
        setting = dataclasses.replace(sampling, temperature=temperature)
        completions = backend.generate([prompt_token_ids(tok, format_prompt(tok, p)) for p in prompts], setting, stops)
        return [tok.decode(c[0].token_ids, skip_special_tokens=True) for c in completions]

    return run
