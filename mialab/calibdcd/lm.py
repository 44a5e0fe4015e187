"""Model-driven parts of the detectors, with transformers (batched, loaded via ``mialab.models.loading``).

- :func:`rollout_generator`: a ``generate(prompts) -> continuations`` callable (greedy decoding)
  on the project's rollout engine; any callable with that signature can replace it.
- :func:`continuation_logprobs`: a reference LM's log-probabilities of each continuation's tokens
  given its context (DPDLLM's scorer).
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

from mialab.models.loading import load_causal_lm, load_tokenizer


def rollout_generator(model_path: str, *, backend: str = "hf", max_new_tokens: int = 32,
                      backend_options: dict | None = None) -> Callable[[Sequence[str]], list[str]]:
    """``generate(prompts) -> continuations`` on the project's rollout engine (greedy, one per prompt).

    Starts ``backend`` (``hf`` or ``vllm``, :mod:`mialab.generation.engine`) once on ``model_path``;
    each prompt string is tokenised as the engine does (BOS added unless already there) and its
    continuation is returned decoded, special tokens and the stop token dropped.
    """
    from mialab.generation.engine import SamplingConfig, get_backend, stop_token_ids
    from mialab.generation.prompts import prompt_token_ids

    tok = load_tokenizer(model_path, padding_side="left")
    engine = get_backend(backend)(model_path, **(backend_options or {}))
    stops = stop_token_ids(model_path, tok)
    sampling = SamplingConfig(n=1, max_new_tokens=max_new_tokens, temperature=0.0)

    def generate(prompts: Sequence[str]) -> list[str]:
        completions = engine.generate([prompt_token_ids(tok, p) for p in prompts], sampling, stops)
        return [tok.decode(c[0].token_ids, skip_special_tokens=True) for c in completions]

    return generate


def _logprob_rows(model, rows: Sequence[list[int]], pad_id: int, batch_size: int) -> Iterator:
    """For each token-id row yield the log-softmax ``(len - 1, vocab)``: row ``j`` predicts token ``j + 1``."""
    import torch

    limit = getattr(model.config, "max_position_embeddings", None)
    for start in range(0, len(rows), batch_size):
        batch = rows[start:start + batch_size]
        width = max(len(r) for r in batch)
        if limit is not None and width > limit:
            raise ValueError(f"a row has {width} tokens, more than the model's {limit} positions")
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, r in enumerate(batch):
            ids[i, :len(r)] = torch.tensor(r)
            mask[i, :len(r)] = 1
        with torch.no_grad():
            logits = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device)).logits
        for i, r in enumerate(batch):
            yield torch.log_softmax(logits[i, :len(r) - 1].float(), dim=-1).cpu()


def continuation_logprobs(model_path: str, contexts: Sequence[str], continuations: Sequence[str], *,
                          batch_size: int = 8, device: str = "auto", dtype: str = "float32") -> list[np.ndarray]:
    """Log-probabilities of each continuation's tokens given its context, under ``model_path``.

    Context and continuation are tokenised separately (context with the tokenizer's special
    tokens, continuation without) and concatenated, so token boundaries never straddle the two.
    An empty continuation gives an empty array.
    """
    import torch

    if len(contexts) != len(continuations):
        raise ValueError("contexts and continuations must align")
    tok = load_tokenizer(model_path)
    model = load_causal_lm(model_path, dtype=dtype, device=device)
    rows, starts = [], []
    for i, (ctx, cont) in enumerate(zip(contexts, continuations, strict=True)):
        ctx_ids = tok(ctx, add_special_tokens=True)["input_ids"]
        if not ctx_ids:
            raise ValueError(f"row {i}: empty context and no BOS token, the first continuation token has no condition")
        rows.append(ctx_ids + tok(cont, add_special_tokens=False)["input_ids"])
        starts.append(len(ctx_ids))
    out = []
    for row, start, lp in zip(rows, starts, _logprob_rows(model, rows, tok.pad_token_id, batch_size), strict=True):
        targets = torch.tensor(row[start:], dtype=torch.long)
        out.append(lp[start - 1:].gather(1, targets[:, None]).squeeze(1).double().numpy())
    return out


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
    out = []
    for row, lp in zip(rows, _logprob_rows(model, rows, tok.pad_token_id, batch_size), strict=True):
        positions = [i for i in range(1, len(row)) if row[i] not in special]
        if not positions:
            out.append(tok.decode(row, skip_special_tokens=True))
            continue
        surprisal = np.array([-lp[i - 1, row[i]].item() for i in positions])
        k = max(1, round(ratio * len(positions)))
        chosen = [positions[j] for j in np.argsort(-surprisal, kind="stable")[:k]]
        new = list(row)
        for i in chosen:
            scores = lp[i - 1].clone()
            scores[[row[i], *special]] = -torch.inf
            new[i] = int(scores.argmax())
        out.append(tok.decode(new, skip_special_tokens=True))
    return out
