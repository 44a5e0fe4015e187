"""Floor 2: model access, the one layer every method reaches a language model through.

- ``loading``: models and tokenizers (safetensors only, remote code only on opt-in), ``load_lm``.
- ``logprobs``: the one log-probability forward (``map_logprobs``: each row its own forward pass, so a
  text's scores do not depend on the texts scored with it; rows one text determines may share one) and its
  reductions: ``token_logprobs``,
  ``token_stats`` (Min-K%++'s statistics).
- ``engine`` with ``hf_backend`` / ``vllm_backend``: rollouts and text generators; ``hf_backend.generate_batches``
  is the one batched transformers generation, which ``generation`` (per-step entropies and top-k
  statistics) also runs on.
- ``prompts`` (templates, chat turns), ``embeddings`` (sentence embeddings), ``tiny`` (the tiny world's models).
"""
