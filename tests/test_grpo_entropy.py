"""verl's GRPO entropy bonus (``train.entropy_coeff``) on a tiny random Llama: the loss less the coefficient
times the policy's entropy aggregated like each loss type, TRL's loss itself at 0, a deterministic step."""

from __future__ import annotations

import os

import pytest
from conftest import DATA, PROBLEMS_MODEL, SETTINGS, assert_same_weights, distinct_characters, weights

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from mialab.training.grpo import GRPOSettings, _trainer_class, grpo_config, run_grpo

TINY_MODEL = PROBLEMS_MODEL  # conftest.tiny_model
LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo"]
ACCUMULATION = 2
LENGTHS = [7, 3, 5, 1, 7, 2, 6, 4]  # completion tokens of the micro-batch's 8 completions (7 at most)
OTHER = 20  # completion tokens of the other micro-batch of its accumulation window


def settings(**changes) -> GRPOSettings:
    return GRPOSettings(**{**SETTINGS.__dict__, **changes})


def make_trainer(model_path: str, loss_type: str, work) -> object:
    from datasets import Dataset

    from mialab.lm.loading import load_causal_lm, load_tokenizer

    trainer_cls = _trainer_class()[0]
    s = settings(loss_type=loss_type, grad_accum=ACCUMULATION)
    trainer = trainer_cls(model=load_causal_lm(model_path, device="cpu"), reward_funcs=[distinct_characters],
                          args=grpo_config(s, work), train_dataset=Dataset.from_pandas(DATA, preserve_index=False),
                          processing_class=load_tokenizer(model_path, padding_side="left"))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = ACCUMULATION  # what Trainer.train sets for each micro-step
    return trainer


def micro_batch(vocab_size: int) -> dict:
    """A micro-batch as TRL's generation step hands it to the loss: left-padded prompts, right-padded
    completions of LENGTHS tokens, advantages, and the token count of its accumulation window (it and
    OTHER tokens more)."""
    g = torch.Generator().manual_seed(0)
    n, prompt, completion = len(LENGTHS), 5, max(LENGTHS)
    prompt_mask = (torch.arange(prompt) >= torch.tensor([0, 2, 0, 1, 3, 0, 0, 2])[:, None]).long()
    completion_mask = (torch.arange(completion) < torch.tensor(LENGTHS)[:, None]).long()
    return {"prompt_ids": torch.randint(3, vocab_size, (n, prompt), generator=g), "prompt_mask": prompt_mask,
            "completion_ids": torch.randint(3, vocab_size, (n, completion), generator=g),
            "completion_mask": completion_mask, "advantages": torch.randn(n, generator=g),
            "num_items_in_batch": completion_mask.sum() + OTHER}


def entropy_from_logits(model, inputs: dict, temperature: float) -> torch.Tensor:
    """Full-vocabulary entropy of the next-token distribution at each completion position, from the logits."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    n = inputs["completion_ids"].size(1)
    logp = (model(input_ids=ids, attention_mask=mask).logits[:, -n - 1:-1] / temperature).log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)


def aggregated(entropy: torch.Tensor, mask: torch.Tensor, loss_type: str) -> torch.Tensor:
    """The entropy aggregated as TRL aggregates each loss type over this micro-batch of a 2-step window."""
    mask = mask.float()
    if loss_type == "grpo":  # per completion token means, then their mean
        return ((entropy * mask).sum(-1) / mask.sum(-1)).mean() / ACCUMULATION
    if loss_type == "bnpo":  # the micro-batch's token mean
        return (entropy * mask).sum() / mask.sum() / ACCUMULATION
    if loss_type == "dr_grpo":  # token sum over completions x max_completion_length
        return (entropy * mask).sum() / (mask.size(0) * SETTINGS.max_completion_length) / ACCUMULATION
    return (entropy * mask).sum() / (mask.sum() + OTHER)  # dapo: token mean over the window


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_the_bonus_subtracts_the_coefficient_times_the_entropy_aggregated_like_the_loss(tiny_model, tmp_path,
                                                                                       loss_type):
    from trl import GRPOTrainer

    trainer = make_trainer(tiny_model, loss_type, tmp_path)
    model, inputs, c = trainer.model, micro_batch(trainer.model.config.vocab_size), 0.3
    params = [p for p in model.parameters() if p.requires_grad]

    def loss_and_grads(coeff: float):
        trainer.entropy_coeff = coeff
        loss = trainer._compute_loss(model, inputs)
        return loss, torch.autograd.grad(loss, params)

    old = GRPOTrainer._compute_loss(trainer, model, inputs)
    plain, plain_grads = loss_and_grads(0.0)
    assert torch.equal(plain, old)  # coefficient 0: bitwise TRL's loss
    bonus, bonus_grads = loss_and_grads(c)
    entropy = aggregated(entropy_from_logits(model, inputs, SETTINGS.temperature), inputs["completion_mask"],
                         loss_type)
    torch.testing.assert_close(bonus, plain - c * entropy, rtol=1e-5, atol=1e-6)
    for g0, gc, ge in zip(plain_grads, bonus_grads, torch.autograd.grad(entropy, params)):
        torch.testing.assert_close(gc - g0, -c * ge, rtol=1e-4, atol=1e-6)  # the bonus's gradient too


def test_the_forks_loss_scales_trls_and_its_bonus_takes_each_micro_batchs_token_mean(tiny_model, tmp_path):
    """The LaRA code's verl fork: ``loss_remove_token_mean`` sums a rank's completions' token losses over the
    response width (TRL's dr_grpo x the completions a rank takes per update: ``policy_loss_scale``), and its
    entropy bonus is each micro-batch's token mean (``masked_mean``: ``entropy_aggregation: token_mean``)."""
    trainer = make_trainer(tiny_model, "dr_grpo", tmp_path)
    model, inputs, c = trainer.model, micro_batch(trainer.model.config.vocab_size), 0.3
    plain = trainer._compute_loss(model, inputs)
    trainer.policy_loss_scale = 8.0
    torch.testing.assert_close(trainer._compute_loss(model, inputs), 8.0 * plain, rtol=1e-6, atol=0.0)
    trainer.entropy_coeff, trainer.entropy_aggregation = c, "token_mean"
    entropy = aggregated(entropy_from_logits(model, inputs, SETTINGS.temperature), inputs["completion_mask"], "bnpo")
    torch.testing.assert_close(trainer._compute_loss(model, inputs), 8.0 * plain - c * entropy, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="unknown entropy_aggregation"):
        settings(entropy_aggregation="sum")


def test_a_training_step_with_the_bonus_runs_deterministically_and_changes_the_update(tiny_model, tmp_path):
    step = settings(max_steps=1, entropy_coeff=1.0)
    assert grpo_config(step, tmp_path / "args").entropy_coef == 0.0  # TRL's own bonus stays off: applied once
    a = weights(run_grpo(tiny_model, DATA, distinct_characters, step, tmp_path / "a").checkpoint)
    assert_same_weights(a, weights(run_grpo(tiny_model, DATA, distinct_characters, step, tmp_path / "b").checkpoint))
    plain = weights(run_grpo(tiny_model, DATA, distinct_characters, settings(max_steps=1), tmp_path / "c").checkpoint)
    assert any(not torch.equal(a[k], plain[k]) for k in a)
