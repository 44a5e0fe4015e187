"""What one job of the contamination rules computes (mialab.lm.cost, priced by mialab.pipeline.sizing).

- ``sft_contaminate`` (model): every SFT example (the members of its pool, repeated, at ``contamination_rate``
  of the examples; without members the filler's rows) at ``max_length`` tokens, ``epochs`` times; the init
  model read and the trained one written.
- ``rl_contaminate`` (one epoch of a GRPO run): ``num_generations`` completions of every corpus prompt at
  ``max_completion_length`` tokens, generated in the training processes (vLLM where ``train.vllm`` is set,
  else transformers' generate, a rollout batch of ``batch_size x steps_per_generation`` a device), then
  trained on with their prompts ``num_iterations`` times.
"""

from __future__ import annotations

from mialab.lm.cost import Work, train_flops

#: Prompt tokens assumed where a GRPO run keeps the whole prompt (no ``max_prompt_length``).
PROMPT_TOKENS = 1024


def precision_dtype(precision: str) -> str:
    """The compute dtype of a training ``precision`` (``auto``: bf16 on a GPU)."""
    return "float32" if precision == "fp32" else "bfloat16"


def sft_contaminate(facts, model: str, dataset: str | None, **_) -> Work:
    spec = facts.config["models"][model]
    train, p = spec["train"], facts.params_b(model)
    if spec.get("members"):
        members = facts.pool(spec["members"]["dataset"]).members * spec["members"]["repeats"]
        examples = members / spec["contamination_rate"]
    else:   # the filler's rows: a hub table's listed size, else the table's default
        source = spec["filler"].get("source") if isinstance(spec["filler"], dict) else None
        examples = facts.throughputs.pool(source.get("hub") if isinstance(source, dict) else None).rows
    tokens = examples * train["max_length"] * train["epochs"]
    return Work(params_b=p, dtype=precision_dtype(train["precision"]), loads_b=(p, p),
                train_flops=train_flops(p, tokens))


def grpo_work(p: float, completions: float, prompt_tokens: int, settings: dict, world: int, *,
              lora: bool) -> dict:
    """The generation and training of ``completions`` GRPO completions (keyword arguments of :class:`Work`)."""
    new = completions * settings["max_completion_length"]
    trained = completions * (prompt_tokens + settings["max_completion_length"]) * settings.get("num_iterations", 1)
    flops = train_flops(p, trained, lora=lora, checkpointing=settings["activation_checkpointing"],
                        reference=settings["beta"] > 0)
    generation = ({"colocate_tokens": new} if settings.get("vllm") else
                  {"hf_tokens": new / world,
                   "hf_batch": settings["batch_size"] * (settings.get("steps_per_generation") or settings["grad_accum"])})
    return {"train_flops": flops, **generation}


def rl_contaminate(facts, model: str, dataset: str | None, *, spec: dict, **_) -> Work:
    train, p = spec["train"], facts.params_b(model)
    world = facts.world(p)
    completions = spec["corpus"]["size"] * train["num_generations"]
    return Work(params_b=p, dtype=precision_dtype(train["precision"]), loads_b=(p, p),
                **grpo_work(p, completions, train.get("max_prompt_length", PROMPT_TOKENS), train, world,
                            lora="lora" in train))


WORK = {"sft_contaminate": sft_contaminate, "rl_contaminate": rl_contaminate}
