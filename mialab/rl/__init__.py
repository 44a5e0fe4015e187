"""Reinforcement-learning post-training: GRPO on a prompt corpus with a pluggable verifiable reward.

- :mod:`.grpo`: the GRPO runner (TRL ``GRPOTrainer``, optional peft LoRA): config-driven
  hyperparameters, checkpoints every ``save_steps``, exact resume, epoch-by-epoch training;
- :mod:`.rewards`: reward callables ``(completions, **columns) -> list[float]``: ``answer_match``
  (final-answer match, the verifiable math reward) and ``reconstruction`` (overlap of the
  completion with a reference text through :mod:`mialab.reconstruction`);
- :mod:`.corpus`: the RL-contamination corpus of the workflow (members of a request + response
  pool plus filler problems) and its prompts.

The runner knows nothing of any attack: RL contamination (LaRA) and ADRA's reconstruction RL
both call :func:`mialab.rl.grpo.run_grpo` with their own data and reward.
"""
