"""The tiny world's models: tokenizer, Llama-architecture causal LM, pretraining and SFT contamination."""
