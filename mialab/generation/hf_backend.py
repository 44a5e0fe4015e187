"""``hf`` rollout backend: transformers ``generate``, batched with left padding, CPU or GPU.

Each batch of prompts is sampled under its own torch seed derived from (seed, batch index), so
rollouts are reproducible on CPU for a given seed and batch size. ``cache_implementation`` is passed
to ``generate`` (e.g. ``static``: a preallocated KV cache, about 1.3x faster on CPU for the tiny world's
many short rollouts than the default dynamic cache, which grows by concatenation); None = the default.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mialab.generation.engine import Completion, SamplingConfig, cut_at_stop, progress, register_backend


def batch_seed(seed: int, batch_index: int) -> int:
    """Independent torch seed of one batch (SeedSequence of (seed, batch index))."""
    return int(np.random.SeedSequence([seed, batch_index]).generate_state(1)[0])


def left_pad(prompts: Sequence[list[int]], pad_id: int):
    """(input_ids, attention_mask) tensors with every prompt right-aligned (left padding)."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        if not p:
            raise ValueError("empty prompt")
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p):] = 1
    return ids, mask


@register_backend("hf")
class HFBackend:
    """Sample with ``model.generate`` (``num_return_sequences = n``), ``batch_size`` prompts at a time."""

    def __init__(self, model: str, *, device: str = "auto", dtype: str = "float32", batch_size: int = 8,
                 cache_implementation: str | None = None):
        from mialab.models.loading import load_causal_lm

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = load_causal_lm(model, dtype=dtype, device=device)
        self.batch_size = batch_size
        self.cache = {"cache_implementation": cache_implementation} if cache_implementation else {}

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig,
                 stop_ids: frozenset[int]) -> list[list[Completion]]:
        import torch

        pad_id = min(stop_ids)  # padding is masked, and anything after a stop id is cut
        sample = sampling.temperature > 0
        decoding = ({"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p,
                     "top_k": sampling.top_k} if sample else {"do_sample": False})
        per_prompt = sampling.n if sample else 1  # greedy: decode once, every sample is that completion
        device = self.model.device
        out: list[list[Completion]] = []
        with progress(len(prompts), "hf rollouts") as advance:
            for b, start in enumerate(range(0, len(prompts), self.batch_size)):
                batch = prompts[start:start + self.batch_size]
                ids, mask = left_pad(batch, pad_id)
                torch.manual_seed(batch_seed(sampling.seed, b))
                with torch.inference_mode():
                    seqs = self.model.generate(
                        input_ids=ids.to(device), attention_mask=mask.to(device), **decoding,
                        max_new_tokens=sampling.max_new_tokens, num_return_sequences=per_prompt,
                        eos_token_id=sorted(stop_ids), pad_token_id=pad_id, **self.cache)
                generated = seqs[:, ids.shape[1]:].tolist()
                for i in range(len(batch)):
                    rows = generated[i * per_prompt:(i + 1) * per_prompt] * (sampling.n // per_prompt)
                    out.append([cut_at_stop(g, stop_ids) for g in rows])
                advance(len(batch))
        return out
