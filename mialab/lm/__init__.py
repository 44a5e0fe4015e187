"""Floor 2: model access. Loading (safetensors only, remote code only on opt-in), batched token
log-probabilities, causal generation on the hf and vLLM backends, prompts and chat templates,
sentence embeddings, and the tiny world's model builder.
"""
