"""Floor 7: training the models the methods attack: tiny-world pretraining, SFT contamination
(DeepSpeed), GRPO (TRL + peft) and its rewards, checkpoints and the RL-contamination plan.
"""
