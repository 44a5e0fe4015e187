"""Rollout generation for reconstruction attacks (N-Sampling, ADRA evaluation).

- ``prompts``: dataset prompt templates, assistant prefix, chat vs base prompts;
- ``engine``: sampling config, backend registry, rollout schema (id, sample, text, n_tokens,
  finish_reason), ``run_rollouts``;
- ``hf_backend`` (``hf``): transformers ``generate``; ``vllm_backend`` (``vllm``): vLLM in its own
  venv through the self-contained ``vllm_worker.py`` script.
"""
