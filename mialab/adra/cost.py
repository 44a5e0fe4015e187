"""What one job of ADRA's rules computes (mialab.lm.cost, priced by mialab.pipeline.sizing).

- ``adra_train`` (model, dataset, variant, seed): ``max_steps`` optimizer steps (else ``epochs`` over the
  split's candidates) of ``batch_size x grad_accum`` completions per training process; GRPO generates each
  completion (``n`` per prompt, at the task's ``max_new_tokens``; vLLM colocated where ``adra.train.vllm`` is
  set) and trains LoRA on it with its prompt, rewarding it against its own suffix and the others it is
  compared with on the CPU; the SFT ablation trains on the same steps' prompts and their suffixes alone.
- ``adra_eval`` (model, dataset, seed, policy): N-Sampling's rollouts of one split's candidates; a trained
  policy is merged into its model first (read, written, read again).
- ``adra_scores``: N-Sampling's metrics of those rollouts.
"""

from __future__ import annotations

import math

from mialab.adra.plan import INIT
from mialab.lm.cost import Work, train_flops
from mialab.n_sampling.cost import PROMPT_TOKENS, rollout_work, scores_work
from mialab.training.cost import grpo_work, precision_dtype


def adra_train(facts, model: str, dataset: str, *, wildcards, **_) -> Work:
    adra, ns = facts.config["adra"], facts.config["n_sampling"]
    train, task = adra["train"], ns["tasks"][dataset]
    p = facts.params_b(model)
    world = facts.world(p)
    per_step = train["batch_size"] * train["grad_accum"] * world
    steps = train["max_steps"] if train["max_steps"] > 0 else \
        math.ceil(train["epochs"] * facts.candidates(dataset) * ns["n"] / per_step)
    prompt = task.get("max_prompt_tokens") or PROMPT_TOKENS
    dtype = precision_dtype(train["precision"])
    if wildcards["variant"] == "adra_sft":   # the same steps' prompts, each once, with its suffix
        tokens = steps * per_step / ns["n"] * (prompt + task["max_new_tokens"])
        return Work(params_b=p, dtype=dtype, loads_b=(p,),
                    train_flops=train_flops(p, tokens, lora=True, checkpointing=train["activation_checkpointing"]))
    compared = 1 + (adra["contrastive"]["distractors"] if wildcards["variant"] == "adra_plus"
                    else adra["random_suffixes"])
    completions = steps * per_step
    settings = {**train, "num_generations": ns["n"], "max_completion_length": task["max_new_tokens"]}
    return Work(params_b=p, dtype=dtype, loads_b=(p,), engines=int(bool(train.get("vllm"))),
                cpu_items=completions * compared, workers=adra["reward"]["workers"],
                **grpo_work(p, completions, prompt, settings, world, lora=True))


def adra_eval(facts, model: str, dataset: str, *, wildcards, **_) -> Work:
    return rollout_work(facts, model, dataset, facts.candidates(dataset), loads=1 if wildcards["policy"] == INIT else 3)


def adra_scores(facts, model: str, dataset: str, **_) -> Work:
    return scores_work(facts, dataset, facts.candidates(dataset))


WORK = {"adra_train": adra_train, "adra_eval": adra_eval, "adra_scores": adra_scores}
