"""The model-access layer: every log-probability caller agrees with an unbatched one-sequence forward,
and the two generation entry points decode alike (both run on the hf backend's batches)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

TEXTS = ["the cat walks", "line 3: the dog walks over the hill and sings of sun today, and again of rain.",
         "the king sings", "the queen walks over the hill" * 3, "rain", "the bird sings of love today."]
TINY_MODEL = {"corpus": [f"line {i}: the {w} walks over the hill and sings of {t} today."
                         for i, (w, t) in enumerate(zip(["cat", "dog", "king", "queen"] * 25,
                                                        ["rain", "sun", "war", "love"] * 25))]}


@pytest.fixture(scope="module")
def lm(tiny_model):
    from mialab.lm.loading import load_lm

    return load_lm(tiny_model, device="cpu")


def alone(model, ids: list[int]) -> np.ndarray:
    """``log p`` of tokens 1..n-1 of one sequence from its own forward: no batch, no padding."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].double()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()


def test_map_logprobs_returns_rows_in_input_order_each_from_its_own_forward(lm):
    from mialab.lm.logprobs import map_logprobs, token_logprobs

    model, tok = lm
    rows = tok(TEXTS)["input_ids"]
    lengths = map_logprobs(model, rows, lambda logp, targets: (len(logp), targets.tolist()))
    assert lengths == [(len(r) - 1, r[1:]) for r in rows]
    for r, a in zip(rows, token_logprobs(model, rows)):
        np.testing.assert_allclose(a, alone(model, r), atol=1e-5)
    with pytest.raises(ValueError, match="more than the model's 512 positions"):
        token_logprobs(model, [rows[0] * 200])
    with pytest.raises(ValueError, match="row 1 has no token"):
        token_logprobs(model, [rows[0], []])


def test_rows_one_text_determines_share_a_pass_and_depend_on_no_other_text(lm, monkeypatch):
    """``together``: rows of one key and one length go through one stacked pass (no padding), in input order,
    at most PASS_TOKENS tokens a pass; a row's result equals its own pass's up to float rounding, and is the
    same bit for bit whatever other keys' rows are run with it."""
    import mialab.lm.logprobs as logprobs
    from mialab.lm.logprobs import map_logprobs, picked

    model, tok = lm
    rows = tok(["the cat walks", "the dog walks", "the king sings of rain", "the cat sings", "rain"])["input_ids"]
    assert len({len(r) for r in rows[:2] + rows[3:4]}) == 1 and len(rows[2]) != len(rows[0])
    shapes = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda input_ids, **kw: shapes.append(tuple(input_ids.shape)) or
                        forward(input_ids=input_ids, **kw))
    keys = ["a", "a", "a", "b", "b"]
    together = map_logprobs(model, rows, picked, together=keys)
    n = len(rows[0])
    assert sorted(shapes) == sorted([(2, n), (1, len(rows[2])), (1, n), (1, len(rows[4]))])   # a's two of length n
    for r, got in zip(rows, together):
        np.testing.assert_allclose(got, alone(model, r), atol=1e-5)
    shapes.clear()
    again = map_logprobs(model, rows[:3], picked, together=keys[:3])                   # b's rows gone
    for a, b in zip(again, together[:3]):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(logprobs, "PASS_TOKENS", n)                                      # one row of n a pass
    shapes.clear()
    map_logprobs(model, rows[:2], picked, together=keys[:2])
    assert shapes == [(1, n), (1, n)]
    with pytest.raises(ValueError, match="together: 1 keys for 2 rows"):
        map_logprobs(model, rows[:2], picked, together=["a"])


def test_scoring_lara_and_calibdcd_log_probabilities_equal_an_unbatched_forward(lm, tiny_model):
    from mialab.calibdcd.reference import packed_rows, reference_probabilities
    from mialab.lara.baselines import mean_log_likelihood
    from mialab.lm.logprobs import token_stats

    model, tok = lm
    rows = tok(TEXTS)["input_ids"]
    for st, r in zip(token_stats(model, tok, TEXTS, max_length=512), rows):                 # scoring
        np.testing.assert_allclose(st.logp, alone(model, r), atol=1e-5)
    np.testing.assert_allclose(mean_log_likelihood(model, tok, TEXTS),                           # LaRA
                               [alone(model, r).mean() for r in rows], atol=1e-5)
    parts, length = [[t[:9], t[9:]] for t in TEXTS], 12                                          # DPDLLM
    z = reference_probabilities(tiny_model, parts, length=length, device="cpu")
    for row, packed in zip(z, packed_rows(tok, parts, length)):
        np.testing.assert_allclose(row[:len(packed) - 1], np.exp(alone(model, packed)), atol=1e-5)
        assert not row[len(packed) - 1:].any()


def test_lara_generation_and_the_rollout_engine_decode_alike(tiny_model):
    from mialab.lm.engine import rollout_generator
    from mialab.lm.generation import generate
    from mialab.lm.loading import load_lm

    model, tok = load_lm(tiny_model, device="cpu", padding_side="left")
    lara = [g[0].text for g in generate(model, tok, TEXTS, max_new_tokens=5, batch_size=4, entropies=False)]
    engine = rollout_generator(tiny_model, backend_options={"device": "cpu", "batch_size": 4})
    assert engine(TEXTS, max_new_tokens=5) == lara


def test_both_generation_entry_points_end_where_the_models_context_does(tiny_model, monkeypatch):
    """LaRA's generation and the rollout engine keep to the context as vLLM does: each answer keeps the first of
    the tokens (and steps) it gets without the limit that its prompt leaves room for (the longest prompt, 2 tokens
    short of it: 2); a prompt that fills the context is refused by both before any generation."""
    from mialab.lm import loading
    from mialab.lm.engine import rollout_generator
    from mialab.lm.generation import generate
    from mialab.lm.prompts import prompt_token_ids

    model, tok = loading.load_lm(tiny_model, device="cpu", padding_side="left")
    rows = [prompt_token_ids(tok, t, "plain") for t in TEXTS]
    longest = max(range(len(rows)), key=lambda i: len(rows[i]))
    whole = generate(model, tok, TEXTS, max_new_tokens=5, batch_size=4)
    context = len(rows[longest]) + 2
    monkeypatch.setattr(loading, "context_length", lambda model: context)
    capped = generate(model, tok, TEXTS, max_new_tokens=5, batch_size=4)
    assert [len(g[0].token_ids) for g in whole] == [5] * len(TEXTS)      # no EOS: each answer runs to its length
    for row, (c, w) in zip(rows, zip(capped, whole)):                     # each keeps what its room holds
        room = context - len(row)
        assert c[0].token_ids == w[0].token_ids[:room] and c[0].entropies == w[0].entropies[:room]
    assert len(capped[longest][0].token_ids) == 2 and sum(len(c[0].token_ids) == 5 for c in capped) >= 3
    engine = rollout_generator(tiny_model, backend_options={"device": "cpu", "batch_size": 4})
    assert engine(TEXTS, max_new_tokens=5) == [g[0].text for g in capped]
    monkeypatch.setattr(loading, "context_length", lambda model: context - 2)
    message = f"prompt {longest} has {context - 2} tokens: the model's context of {context - 2} leaves no room"
    with pytest.raises(ValueError, match=message):
        generate(model, tok, TEXTS, max_new_tokens=5, batch_size=4)
    with pytest.raises(ValueError, match=message):
        rollout_generator(tiny_model, backend_options={"device": "cpu", "batch_size": 4})(TEXTS, max_new_tokens=5)


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_is_bf16_only_where_the_cpu_computes_it_natively(tiny_model, monkeypatch, native):
    """``dtype`` / ``precision`` ``auto`` (the tiny world's): bf16 on a CPU with AMX / AVX512-BF16, fp32 where bf16
    would be emulated (on an AVX2 CPU a bf16 matrix product is tens of times slower); explicit values stay."""
    from mialab.lm import loading

    monkeypatch.setattr(loading, "cpu_has_native_bf16", lambda: native)
    assert loading.resolve_dtype("auto", "cpu") == ("bfloat16" if native else "float32")
    assert loading.resolve_precision("auto", "cpu") == ("bf16" if native else "fp32")
    assert (loading.resolve_dtype("bf16", "cpu"), loading.resolve_dtype("float32", "cpu")) == ("bfloat16", "float32")
    assert (loading.resolve_precision("bf16", "cpu"), loading.resolve_precision("fp32", "cpu")) == ("bf16", "fp32")
    with pytest.raises(ValueError, match="unknown dtype 'int8'.*auto"):
        loading.resolve_dtype("int8", "cpu")
    with pytest.raises(ValueError, match="unknown precision 'fp8'.*auto"):
        loading.resolve_precision("fp8", "cpu")
    model = loading.load_causal_lm(tiny_model, dtype="auto", device="cpu")
    assert next(model.parameters()).dtype == (torch.bfloat16 if native else torch.float32)


def test_the_rehearsal_computes_a_paper_configs_bf16_as_auto_on_the_cpu():
    """A paper config's bf16 or fp16 (its GPUs') becomes ``auto`` in the CPU rehearsal, wherever it is named; fp32
    stays."""
    import yaml
    from workflow_helpers import REPO, validated

    from mialab.pipeline.rehearsal import rehearse

    paper = validated(yaml.safe_load((REPO / "configs/paper/lara_rl_models.yaml").read_text()))
    out = rehearse(paper, vllm_available=False)
    assert paper["scoring"]["dtype"] == "bfloat16" and out["scoring"]["dtype"] == "auto"
    assert paper["models"]["limr_rl_e1"]["train"]["precision"] == "bf16"
    assert out["models"]["limr_rl_e1"]["train"]["precision"] == "auto"
    assert out["lara"]["features"]["dtype"] == out["lara"]["baselines"]["dtype"] == "auto"
    assert paper["lara"]["features"]["dtype"] == "float16"   # the code's LaRA features
    assert not {"bf16", "bfloat16", "float16"} & set(yaml.safe_dump(out).replace(",", " ").split())
