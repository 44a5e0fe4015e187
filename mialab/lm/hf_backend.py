"""``hf`` rollout backend: transformers ``generate``, batched with left padding, CPU or GPU.

:func:`generate_batches` is the package's one batched transformers generation: the backend and
LaRA's generation with per-step statistics (:func:`mialab.lm.generation.generate`) both run on it.
Each batch of prompts is sampled under its own torch seed derived from (seed, batch index)
(:func:`mialab.lm.engine.derived_seed`), its rows drawing apart (a prompt repeated in a batch gets distinct
samples), so rollouts are reproducible on CPU for a given seed and batch size, and a resumable part (a whole number of
batches, :attr:`HFBackend.part_size`) is sampled as in an uninterrupted run. N samples per prompt share one
prefill (:func:`generate_sharing_prefill`). ``cache_implementation`` (e.g. ``static``, a preallocated
KV cache) is passed to ``generate``; it cannot start from a shared prefill, so with it each prompt is
prefilled N times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from mialab.core.progress import progress
from mialab.lm.engine import Completion, SamplingConfig, cut_at_stop, derived_seed, register_backend

#: candidates per resumable part, rounded up to whole batches
PART_CANDIDATES = 256


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


def generate_sharing_prefill(model, input_ids, attention_mask, n: int, **kwargs):
    """``model.generate(input_ids, attention_mask, num_return_sequences=n, **kwargs)`` that prefills each
    prompt once instead of ``n`` times.

    ``generate`` repeats every prompt ``n`` times before its prefill. Here the prompts less their last
    token run once, their KV cache is repeated ``n`` times, and ``generate`` starts from it: it reads
    the last tokens and samples exactly as before (same rows, same random draws). The logits agree up
    to float rounding (the prefill runs in two pieces). Left padding; positions as ``generate`` counts
    them (from the attention mask).
    """
    if n == 1 or input_ids.shape[1] < 2:
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, num_return_sequences=n, **kwargs)
    from transformers import DynamicCache

    positions = attention_mask.long().cumsum(-1) - 1
    positions.masked_fill_(attention_mask == 0, 1)
    cache = DynamicCache(config=model.config)
    model(input_ids=input_ids[:, :-1], attention_mask=attention_mask[:, :-1], position_ids=positions[:, :-1],
          cache=cache, use_cache=True, logits_to_keep=1)
    cache.batch_repeat_interleave(n)
    return model.generate(input_ids=input_ids.repeat_interleave(n, 0),
                          attention_mask=attention_mask.repeat_interleave(n, 0), cache=cache, **kwargs)


def context_rooms(prompts: Sequence[list[int]], context: int, *, offset: int = 0) -> list[int]:
    """The new tokens each tokenised prompt leaves in a ``context`` of that many tokens, as vLLM's ``max_model_len``
    does: a prompt that leaves none is an error (vLLM refuses it), naming it by its index in the job (``offset``:
    the first prompt's)."""
    rooms = [context - len(p) for p in prompts]
    full = next((i for i, room in enumerate(rooms) if room < 1), None)
    if full is not None:
        raise ValueError(f"prompt {offset + full} has {len(prompts[full])} tokens: the model's context of "
                         f"{context} leaves no room for a new token (vLLM refuses it too)")
    return rooms


def generate_batches(model, prompts: Sequence[list[int]], n: int, *, batch_size: int, pad_id: int,
                     seed_of: Callable[[int], int], description: str = "hf generation",
                     **options) -> Iterator[tuple[int, int, object]]:
    """``(start, width, output)`` per batch of ``batch_size`` tokenised prompts: ``model.generate`` of
    ``prompts[start:start + batch_size]``, left-padded with ``pad_id`` to ``width`` tokens, ``n`` returns
    per prompt sharing one prefill (:func:`generate_sharing_prefill`; with a ``cache_implementation``
    option, generate's own cache: no prefill to share), under torch seed ``seed_of(start)``."""
    import torch

    device = model.device
    with progress() as bar:
        task = bar.add_task(description, total=len(prompts))
        for start in range(0, len(prompts), batch_size):
            batch = prompts[start:start + batch_size]
            ids, mask = (t.to(device) for t in left_pad(batch, pad_id))
            torch.manual_seed(seed_of(start))
            with torch.inference_mode():
                if "cache_implementation" in options:
                    out = model.generate(input_ids=ids, attention_mask=mask, num_return_sequences=n, **options)
                else:
                    out = generate_sharing_prefill(model, ids, mask, n, **options)
            yield start, ids.shape[1], out
            bar.advance(task, len(batch))


@register_backend("hf")
class HFBackend:
    """Sample with ``model.generate`` (``num_return_sequences = n``), ``batch_size`` prompts at a time.

    Within the model's context as vLLM keeps it (``max_model_len``, by default the model's positions:
    :func:`mialab.lm.loading.context_length`): a prompt that leaves no room for one new token is an error,
    and a completion ends (``length``) where prompt and completion fill the context. ``generate`` runs a
    batch to ``max_new_tokens`` past its longest prompt; each row is then cut to its own room, which is exact
    (a token depends on the ones before it only).
    """

    def __init__(self, model: str, *, device: str = "auto", dtype: str = "float32", batch_size: int = 8,
                 cache_implementation: str | None = None, trust_remote_code: bool = False):
        from mialab.lm.loading import context_length, load_causal_lm

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = load_causal_lm(model, dtype=dtype, device=device, trust_remote_code=trust_remote_code)
        self.context = context_length(self.model)
        self.batch_size = batch_size
        self.part_size = -(-PART_CANDIDATES // batch_size) * batch_size
        self.cache = {"cache_implementation": cache_implementation} if cache_implementation else {}

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig, stop_ids: frozenset[int], *,
                 offset: int = 0) -> list[list[Completion]]:
        if offset % self.batch_size:
            raise ValueError(f"offset {offset} is not on a batch boundary (batch_size {self.batch_size})")
        first = offset // self.batch_size
        rooms = context_rooms(prompts, self.context, offset=offset)
        pad_id = min(stop_ids)  # padding is masked, and anything after a stop id is cut
        sample = sampling.temperature > 0
        decoding = ({"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p,
                     "top_k": sampling.top_k} if sample else {"do_sample": False})
        per_prompt = sampling.n if sample else 1  # greedy: decode once, every sample is that completion
        out: list[list[Completion]] = []
        for start, width, seqs in generate_batches(
                self.model, prompts, per_prompt, batch_size=self.batch_size, pad_id=pad_id,
                seed_of=lambda start: derived_seed(sampling.seed, first + start // self.batch_size),
                description="hf rollouts",
                max_new_tokens=sampling.max_new_tokens, eos_token_id=sorted(stop_ids), pad_token_id=pad_id,
                **decoding, **self.cache):
            generated = seqs[:, width:].tolist()
            for i in range(len(generated) // per_prompt):
                rows = generated[i * per_prompt:(i + 1) * per_prompt] * (sampling.n // per_prompt)
                out.append([cut_at_stop(g[:rooms[start + i]], stop_ids) for g in rows])
        return out
