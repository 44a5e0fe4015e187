"""Model-driven parts of the detectors, with transformers (batched, loaded via ``mialab.lm.loading``).

- :func:`rollout_generator`: a ``generate(prompts, *, max_new_tokens, temperature, seed) ->
  continuations`` callable on the project's rollout engine; any callable with that signature can
  replace it.
- :func:`logprob_batches`: batched next-token log-probabilities (DPDLLM's reference scorer,
  :mod:`mialab.calibdcd.reference`, and the key-token perturbation).
- :func:`key_token_perturb`: VeilProbe's key-token perturbation. VeilProbe ranks input tokens by
  their attribution to the target's output (optimal-transport attribution over GPT-2 models) and
  replaces the top ones with a masked-LM's fill-ins. Without an attribution model we rank tokens by
  their surprisal under a key-token language model (the least predictable tokens carry the
  text-specific content: names, numbers, rare words) and replace each chosen token by the same
  model's most likely *other* token at that position, a plausible in-context substitute.

The key-token model and the target are separate model paths (the VeilProbe reference code loads
one path for both of its two models by mistake).
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

import numpy as np

from mialab.lm.loading import load_causal_lm, load_tokenizer


def rollout_generator(model_path: str, *, backend: str = "hf", backend_options: dict | None = None,
                      trust_remote_code: bool = False) -> Callable[..., list[str]]:
    """``generate(prompts, *, max_new_tokens, temperature, seed) -> continuations`` on the project's
    rollout engine (one continuation per prompt; ``temperature`` 0: greedy).

    Starts ``backend`` (``hf`` or ``vllm``, :mod:`mialab.lm.engine`) once on ``model_path``;
    each prompt string is tokenised as the engine does (BOS added unless already there) and its
    continuation is returned decoded, special tokens and the stop token dropped.
    """
    from mialab.lm.engine import SamplingConfig, start_backend, stop_token_ids
    from mialab.lm.prompts import prompt_token_ids

    tok = load_tokenizer(model_path, padding_side="left", trust_remote_code=trust_remote_code)
    engine = start_backend(backend, model_path, backend_options, trust_remote_code=trust_remote_code)
    stops = stop_token_ids(model_path, tok)

    def generate(prompts: Sequence[str], *, max_new_tokens: int, temperature: float = 0.0,
                 seed: int = 0) -> list[str]:
        sampling = SamplingConfig(n=1, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
        completions = engine.generate([prompt_token_ids(tok, p) for p in prompts], sampling, stops)
        return [tok.decode(c[0].token_ids, skip_special_tokens=True) for c in completions]

    return generate


def logprob_batches(model, rows: Sequence[list[int]], pad_id: int, batch_size: int) -> Iterator:
    """``(indices, ids, logp)`` per batch of rows of similar token length (less padding): ``ids`` the
    right-padded ``[B, T]`` token ids of ``rows[indices]``, ``logp[b, j]`` the log-softmax over the
    vocabulary predicting ``ids[b, j + 1]`` (``[B, T - 1, vocab]``; padded positions are meaningless).
    Both stay on the model's device: callers reduce ``logp`` there before anything is copied back."""
    import torch

    limit = getattr(model.config, "max_position_embeddings", None)
    width = max((len(r) for r in rows), default=0)
    if limit is not None and width > limit:
        raise ValueError(f"a row has {width} tokens, more than the model's {limit} positions")
    order = np.argsort([len(r) for r in rows], kind="stable")
    for start in range(0, len(rows), batch_size):
        indices = order[start:start + batch_size]
        batch = [rows[i] for i in indices]
        width = max(len(r) for r in batch)
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, r in enumerate(batch):
            ids[i, :len(r)] = torch.tensor(r)
            mask[i, :len(r)] = 1
        ids = ids.to(model.device)
        with torch.no_grad():  # not inference_mode: key_token_perturb edits logp in place
            logits = model(input_ids=ids, attention_mask=mask.to(model.device)).logits
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        yield indices, ids, logp


def key_token_perturb(model_path: str, texts: Sequence[str], *, ratio: float = 0.15, batch_size: int = 8,
                      device: str = "auto", dtype: str = "float32") -> list[str]:
    """Replace each text's key tokens: the ``max(1, round(ratio * n))`` most surprising of its ``n``
    scorable tokens, each by the model's most likely different, non-special token at that position.

    Deterministic (surprisal ties are broken by position); a text with no scorable token (one token
    and no BOS) is returned unchanged.
    """
    import torch

    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    tok = load_tokenizer(model_path)
    model = load_causal_lm(model_path, dtype=dtype, device=device)
    special = sorted(set(tok.all_special_ids))
    rows = [tok(t, add_special_tokens=True)["input_ids"] for t in texts]
    out: list[str] = [""] * len(rows)
    for indices, ids, logp in logprob_batches(model, rows, tok.pad_token_id, batch_size):
        targets = ids[:, 1:, None]
        surprisal = -logp.gather(-1, targets).squeeze(-1).double().cpu().numpy()
        logp[..., special] = -torch.inf  # substitutes: neither special tokens nor the token itself
        substitute = logp.scatter_(-1, targets, -torch.inf).argmax(-1).cpu().numpy()
        for b, i in enumerate(indices):
            row = rows[i]
            positions = np.array([j for j in range(1, len(row)) if row[j] not in special], dtype=np.int64)
            if not len(positions):
                out[i] = tok.decode(row, skip_special_tokens=True)
                continue
            k = max(1, round(ratio * len(positions)))
            chosen = positions[np.argsort(-surprisal[b, positions - 1], kind="stable")[:k]]
            new = list(row)
            for j in chosen:
                new[j] = int(substitute[b, j - 1])
            out[i] = tok.decode(new, skip_special_tokens=True)
    return out
