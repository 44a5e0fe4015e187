"""Rollout engine: prompts, the hf backend (tiny random Llama), the vllm backend through its venv."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import fake_vllm
from workflow_helpers import ns_sampling

from mialab.lm.engine import (
    FINISH_REASONS,
    ROLLOUT_COLUMNS,
    SamplingConfig,
    attempt_seed,
    cut_at_stop,
    derived_seed,
    get_backend,
    known_backends,
    run_rollouts,
    text_generator,
    validate_rollouts,
    write_rollouts,
)
from mialab.lm.prompts import fill_template, prompt_text, prompt_token_ids
from mialab.lm.vllm_backend import default_venv, request_seeds, strip_stop

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SPLIT = pd.DataFrame({
    "id": ["m1", "m2", "n1"],
    "prefix": ["the quick brown fox", "once upon a time", "to be or"],
    "suffix": ["jumps over the lazy dog", "there was a tiny model", "not to be that is the question"],
})


#: conftest.tiny_model: a random Llama (vocab <= 512, hidden 64, 2 layers) with the tiny chat template
TINY_MODEL = {"corpus": [" ".join(SPLIT["prefix"] + " " + SPLIT["suffix"])] * 50, "min_frequency": 1}


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from mialab.lm.loading import load_tokenizer

    return load_tokenizer(tiny_model, padding_side="left")


def hf_rollouts(model: str, seed: int, **kw) -> pd.DataFrame:
    return run_rollouts(SPLIT, model=model, backend="hf", template="Continue: {prefix}",
                        sampling=ns_sampling(n=3, max_new_tokens=6, seed=seed), prompt_format=kw.pop("prompt_format", "chat"),
                        backend_options={"batch_size": 2, "device": "cpu"}, **kw)


def check_schema(rollouts: pd.DataFrame, n: int, max_new_tokens: int) -> None:
    assert tuple(rollouts.columns) == ROLLOUT_COLUMNS
    assert len(rollouts) == len(SPLIT) * n
    assert rollouts["id"].tolist() == [i for i in SPLIT["id"] for _ in range(n)]
    assert rollouts["sample"].tolist() == list(range(n)) * len(SPLIT)
    assert rollouts["sample"].dtype == "int64" and rollouts["n_tokens"].dtype == "int64"
    assert rollouts["finish_reason"].isin(FINISH_REASONS).all()
    assert rollouts["n_tokens"].between(0, max_new_tokens).all()
    assert (rollouts.loc[rollouts["finish_reason"] == "length", "n_tokens"] == max_new_tokens).all()
    assert rollouts["text"].map(lambda t: isinstance(t, str)).all()


# --- prompts ----------------------------------------------------------------------------------------

def test_fill_template_requires_prefix_field():
    assert fill_template("Book text: {prefix}", "abc") == "Book text: abc"
    with pytest.raises(ValueError, match="prefix"):
        fill_template("no field here", "abc")


def test_prompt_text_chat_continues_assistant_turn(tokenizer):
    seeded = prompt_text(tokenizer, "Q: {prefix}", "the quick", "brown fox jumps over", prompt_format="chat",
                         assistant_prefix_ratio=0.5)
    assert seeded == "<|user|>\nQ: the quick</s>\n<|assistant|>\nbrown fox"
    plain = prompt_text(tokenizer, "Q: {prefix}", "the quick", "brown fox jumps over", prompt_format="chat")
    assert plain == "<|user|>\nQ: the quick</s>\n<|assistant|>\n"


def test_prompt_text_base_model_appends_given_words(tokenizer):
    assert prompt_text(tokenizer, "Q: {prefix}", "the quick", "brown fox jumps over", prompt_format="plain",
                       assistant_prefix_ratio=0.5) == "Q: the quick brown fox"
    assert prompt_text(tokenizer, "{prefix}", "the quick", "brown fox", prompt_format="plain") == "the quick"


def test_prompt_token_ids_add_bos_once(tokenizer):
    for prompt_format in ("plain", "chat"):
        ids = prompt_token_ids(tokenizer, "the quick", prompt_format)
        assert ids[0] == tokenizer.bos_token_id and ids.count(tokenizer.bos_token_id) == 1
        again = prompt_token_ids(tokenizer, tokenizer.bos_token + "the quick", prompt_format)
        assert again.count(tokenizer.bos_token_id) == 1


def test_verl_renders_through_the_chat_template_or_its_fallback_and_adds_no_special_token(tokenizer):
    """The released ADRA code's verl: every prompt is a chat (user turn, assistant prefix) rendered by the tokenizer's
    chat template with continue_final_message, a tokenizer without one given verl's fallback template (main_ppo.py,
    main_generation.py), and tokenized without special tokens (rl_dataset.py, apply_chat_template(tokenize=True)):
    a base model reads "User: ... / Assistant: <given words>" with no BOS before it, not the plain prefix."""
    import copy

    args = (tokenizer, "Q: {prefix}", "the quick", "brown fox jumps over")
    assert prompt_text(*args, prompt_format="verl", assistant_prefix_ratio=0.5) == prompt_text(
        *args, prompt_format="chat", assistant_prefix_ratio=0.5)
    base = copy.deepcopy(tokenizer)
    base.chat_template = None
    given = prompt_text(base, *args[1:], prompt_format="verl", assistant_prefix_ratio=0.5)
    assert given == "User: Q: the quick\nAssistant: brown fox"
    assert prompt_text(base, *args[1:], prompt_format="verl") == "User: Q: the quick\nAssistant:"
    with pytest.raises(ValueError, match="needs a tokenizer with a chat template"):
        prompt_text(base, *args[1:], prompt_format="chat")
    ids = prompt_token_ids(base, given, "verl")
    assert ids == base(given, add_special_tokens=False)["input_ids"] and base.bos_token_id not in ids
    assert prompt_token_ids(base, given, "plain")[0] == base.bos_token_id
    with pytest.raises(ValueError, match="unknown prompt format"):
        prompt_token_ids(base, given, "raw")


# --- engine pieces ------------------------------------------------------------------------------------

def test_stop_handling():
    assert cut_at_stop([5, 6, 1, 7, 1], frozenset({1})) == ([5, 6], "stop")
    assert cut_at_stop([5, 6, 7], frozenset({1})) == ([5, 6, 7], "length")
    assert strip_stop([5, 6, 1], "stop", frozenset({1})) == ([5, 6], "stop")
    assert strip_stop([5, 6, 1], "length", frozenset({1})) == ([5, 6, 1], "length")


def test_backend_registry():
    assert {"hf", "vllm"} <= set(known_backends())
    with pytest.raises(KeyError, match="known backends: hf, vllm"):
        get_backend("tgi")


def test_sampling_config_validates():
    with pytest.raises(TypeError, match="temperature"):   # no sampling default: the caller's config says each
        SamplingConfig(max_new_tokens=4)
    assert (ns_sampling().temperature, ns_sampling().top_p, ns_sampling().top_k, ns_sampling().n) == (1.0, 0.95, 50, 1)
    with pytest.raises(ValueError):
        ns_sampling(n=0)
    with pytest.raises(ValueError):
        ns_sampling(top_p=0.0)


# --- hf backend -----------------------------------------------------------------------------------------

def test_hf_rollouts_schema_and_determinism_under_seed(tiny_model):
    first = hf_rollouts(tiny_model, seed=1, assistant_prefix_ratio=0.25)
    check_schema(first, n=3, max_new_tokens=6)
    pd.testing.assert_frame_equal(first, hf_rollouts(tiny_model, seed=1, assistant_prefix_ratio=0.25))
    other = hf_rollouts(tiny_model, seed=2, assistant_prefix_ratio=0.25)
    assert not first["text"].equals(other["text"])


def test_rollouts_parquet_round_trip_and_validation(tiny_model, tmp_path):
    rollouts = hf_rollouts(tiny_model, seed=0)
    write_rollouts(rollouts, tmp_path / "rollouts.parquet")
    back = pd.read_parquet(tmp_path / "rollouts.parquet")
    pd.testing.assert_frame_equal(back, rollouts, check_dtype=False)
    check_schema(back, n=3, max_new_tokens=6)
    with pytest.raises(ValueError, match="finish_reason"):
        validate_rollouts(rollouts.assign(finish_reason="eos"))
    with pytest.raises(ValueError, match="duplicate"):
        validate_rollouts(rollouts.assign(sample=0))


def test_hf_greedy_base_model_rollouts_are_identical_across_samples(tiny_model):
    rollouts = run_rollouts(SPLIT, model=tiny_model, backend="hf", template="{prefix}", prompt_format="plain",
                            sampling=ns_sampling(n=2, max_new_tokens=4, temperature=0.0),
                            backend_options={"batch_size": 3, "device": "cpu"})
    check_schema(rollouts, n=2, max_new_tokens=4)
    for _, group in rollouts.groupby("id"):
        assert group["text"].nunique() == 1


def test_shared_prefill_samples_what_generate_samples_from_n_prefills(tiny_model):
    """One prefill per prompt (3 rows, not 12), KV cache repeated n times: the same rows and tokens as ``generate`` with
    ``num_return_sequences = n`` under the same seed (prompts of different lengths, left-padded, one of
    a single token), and the same step logits up to float rounding."""
    import torch

    from mialab.lm.hf_backend import generate_sharing_prefill, left_pad
    from mialab.lm.loading import load_causal_lm

    model = load_causal_lm(tiny_model, device="cpu", dtype="float32")
    ids, mask = left_pad([[1, 40, 41, 42, 43, 44, 45], [1, 50, 51], [7]], pad_id=2)
    options = dict(max_new_tokens=6, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=2,
                   eos_token_id=[2], output_logits=True, return_dict_in_generate=True)
    torch.manual_seed(3)
    plain = model.generate(input_ids=ids, attention_mask=mask, num_return_sequences=4, **options)
    torch.manual_seed(3)
    shapes = []
    hook = model.register_forward_pre_hook(lambda m, args, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    shared = generate_sharing_prefill(model, ids, mask, 4, **options)
    hook.remove()
    assert shapes[:2] == [(3, ids.shape[1] - 1), (12, 1)]  # the prompts once, then one token per row
    assert shared.sequences.shape == (12, ids.shape[1] + 6)
    assert torch.equal(shared.sequences, plain.sequences)
    for a, b in zip(shared.logits, plain.logits, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    torch.manual_seed(4)
    assert not torch.equal(generate_sharing_prefill(model, ids, mask, 4, **options).sequences, plain.sequences)


def test_hf_completions_end_where_the_models_context_does_as_vllms(tiny_model, tokenizer):
    """As vLLM (``max_model_len``: the model's positions): a prompt filling the context is refused before any
    generation, and a completion stops (``length``) where prompt and completion fill it; the tokens it keeps are
    those generated without the limit, and a shorter prompt of the same batch keeps all of its own."""
    backend = get_backend("hf")(tiny_model, device="cpu", batch_size=2)
    assert backend.context == 512
    stops = frozenset({tokenizer.eos_token_id})
    sampling = ns_sampling(n=2, max_new_tokens=6, temperature=1.0, seed=4)
    prompts = [[5 + i % 40 for i in range(510)], [1, 50, 51]]
    capped = backend.generate(prompts, sampling, stops)
    backend.context = 10**6                                   # what the backend generated before the limit
    whole = backend.generate(prompts, sampling, stops)
    assert [len(c.token_ids) for c in whole[0]] == [6, 6]     # the model runs past its positions if let
    assert capped[0] == [cut_at_stop(c.token_ids[:2], stops) for c in whole[0]]
    assert all(c.finish_reason == "length" and len(c.token_ids) == 2 for c in capped[0])
    assert capped[1] == whole[1]
    backend.context = 512
    with pytest.raises(ValueError, match="prompt 1 has 512 tokens: the model's context of 512 leaves no room"):
        backend.generate([[5], [5] * 512], sampling, stops)


# --- a prompt sent twice, on either backend ------------------------------------------------------------------

def test_a_prompt_repeated_in_a_vllm_call_gets_distinct_samples_and_parts_keep_their_seeds(
        tiny_model, tokenizer, monkeypatch, tmp_path):
    """vLLM samples a request from its prompt and its seed alone (tests/fake_vllm.py): one seed for the whole
    call gave a prompt sent twice (LaRA's paraphrases, a judge batch with two equal candidates) the same answer
    twice. Each prompt is its own request with the seed of its place in the job, so a resumed part (``offset``)
    gets the seeds the uninterrupted job gave it."""
    requests = fake_vllm.install(monkeypatch, tmp_path, tokenizer, fake_vllm.seeded_words)
    generate = text_generator(tiny_model, engine="vllm", max_new_tokens=8, temperature=0.7, seed=5)
    first, again, other = generate(["the quick brown fox", "the quick brown fox", "to be or"])
    assert first != again                                   # was equal: one SamplingParams(seed) per request
    assert generate(["the quick brown fox"])[0] == first    # prompt and seed decide: the same call gives the same
    assert requests[-1]["seeds"] == request_seeds(5, 0, 1) and len(set(requests[0]["seeds"])) == 3
    backend = get_backend("vllm")(tiny_model)
    ids = [prompt_token_ids(tokenizer, t, "plain") for t in ["a b", "a b", "c d", "a b"]]
    sampling = ns_sampling(n=2, max_new_tokens=4, temperature=1.0, seed=9)
    whole = backend.generate(ids, sampling, frozenset({tokenizer.eos_token_id}))
    assert backend.generate(ids[2:], sampling, frozenset({tokenizer.eos_token_id}), offset=2) == whole[2:]
    assert whole[0] != whole[1] and whole[0][0] != whole[0][1]   # prompts apart, and a request's n samples apart


def test_asking_again_samples_anew_on_either_backend(tiny_model, tokenizer, monkeypatch, tmp_path):
    """``attempt``: a helper that asks again for answers still invalid (LaRA's perturbations) gets fresh samples,
    not the first attempt's answer repeated (vLLM under the same seed; hf under the same batch seed)."""
    fake_vllm.install(monkeypatch, tmp_path, tokenizer, fake_vllm.seeded_words)
    for engine, options in (("vllm", None), ("hf", {"device": "cpu", "batch_size": 2})):
        generate = text_generator(tiny_model, engine=engine, backend_options=options, max_new_tokens=8,
                                  temperature=1.0, seed=3)
        asked = generate(["once upon a time"])
        assert generate(["once upon a time"]) == asked
        assert generate(["once upon a time"], attempt=1) != asked, engine
    assert attempt_seed(3, 0) == 3 and len({attempt_seed(3, a) for a in range(4)}) == 4
    assert derived_seed(3, 1) != derived_seed(3, 2) != derived_seed(4, 1)


# --- vllm backend (its own venv) --------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(not (default_venv() / "bin" / "python").exists(),
                    reason="no vLLM venv (run scripts/setup_vllm.sh)")
def test_vllm_rollouts_through_worker_venv(tiny_model):
    rollouts = run_rollouts(SPLIT, model=tiny_model, backend="vllm", template="Continue: {prefix}", prompt_format="chat",
                            assistant_prefix_ratio=0.25, sampling=ns_sampling(n=2, max_new_tokens=5, seed=3),
                            backend_options={"dtype": "float32", "max_model_len": 128, "enforce_eager": True})
    check_schema(rollouts, n=2, max_new_tokens=5)


@pytest.mark.slow
@pytest.mark.skipif(not (default_venv() / "bin" / "python").exists(),
                    reason="no vLLM venv (run scripts/setup_vllm.sh)")
def test_vllm_on_cpu_samples_seeded_prompts_beyond_one_steps_budget(tiny_model):
    """Seeded prompts whose tokens exceed one engine step's budget (vLLM's CPU default: 2,048): vLLM would prefill
    them in chunks and then fail to rewind a CPU generator; the worker schedules them whole, and each prompt's
    samples are its own: the last half sent alone (at its place in the job) samples what it did among all. The
    engine, its ``enforce_eager`` unset, runs on the CPU eagerly and inside the worker's own process."""
    from mialab.lm.vllm_backend import VLLMBackend
    from mialab.lm.vllm_worker import whole_prompt_args

    assert whole_prompt_args({"max_model_len": 256}, tiny_model) == {"enable_chunked_prefill": False,
                                                                      "max_num_batched_tokens": 2048}
    assert whole_prompt_args({"max_num_batched_tokens": 512}, tiny_model) == {}
    prompts = [[5 + (i + j) % 40 for j in range(200)] for i in range(16)]   # 3,200 prompt tokens
    backend = VLLMBackend(tiny_model, dtype="float32", max_model_len=256)
    sampling = ns_sampling(n=2, max_new_tokens=4, temperature=1.0, seed=7)
    every = backend.generate(prompts, sampling, frozenset())
    assert children(backend.worker.process.pid) == []    # the engine core in the worker's process
    assert backend.generate(prompts[8:], sampling, frozenset(), offset=8) == every[8:]
    # both calls on one engine (one start), and what a fresh engine samples for the second call
    log = backend.worker.log.read_text()
    assert backend.worker.calls == 2 and log.count("Initializing a V1 LLM engine") == 1, log[-3000:]
    assert "enforce_eager=True" in log and "enforce_eager=False" not in log, log[-3000:]
    fresh = VLLMBackend(tiny_model, dtype="float32", max_model_len=256, enforce_eager=True)
    assert fresh.generate(prompts[8:], sampling, frozenset(), offset=8) == every[8:]
    # vLLM ends a completion where prompt and completion fill max_model_len (the hf backend does the same)
    (near,) = fresh.generate([prompts[0] + prompts[1][:54]], sampling, frozenset())
    assert [(len(c.token_ids), c.finish_reason) for c in near] == [(2, "length")] * 2
    process = backend.worker.process
    del backend
    gc.collect()
    assert process.poll() is not None                    # the worker ends with its backend


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid:
            found.append(int(stat.parent.name))
    return found


def test_vllm_on_the_cpu_runs_eagerly_unless_the_config_says_otherwise(tiny_model):
    """On the CPU the worker adds ``enforce_eager: true`` (no graph compiled at each engine start) where the config
    leaves it unset, keeps a config's own value, and schedules every prompt whole either way."""
    from mialab.lm.vllm_worker import cpu_engine_args

    whole = {"enable_chunked_prefill": False, "max_num_batched_tokens": 2048}
    assert cpu_engine_args({"max_model_len": 256}, tiny_model) == {"enforce_eager": True, "max_model_len": 256, **whole}
    assert cpu_engine_args({"max_model_len": 256, "enforce_eager": False}, tiny_model)["enforce_eager"] is False


def test_the_vllm_worker_ends_with_the_job_that_started_it(tmp_path):
    """A killed job (SIGKILL: no clean-up runs) leaves no vLLM engine behind holding memory or a GPU."""
    from mialab.lm.vllm_backend import WorkerProcess

    parent = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from mialab.lm.vllm_backend import WorkerProcess\n"
        "w = WorkerProcess(Path(sys.executable), dict(os.environ))\n"
        "print(w.process.pid, flush=True)\n"
        "time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    time.sleep(1)                                        # the worker has set its parent-death signal
    os.kill(worker, 0)                                   # alive, serving
    parent.kill()
    parent.wait()
    for _ in range(100):
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"vLLM worker {worker} outlived its killed parent")
    with pytest.raises(RuntimeError, match=r"(?s)vLLM worker failed.*No module named 'vllm'"):
        WorkerProcess(Path(sys.executable), dict(os.environ)).run(   # this venv has no vLLM: the log says so
            {"model": "m", "trust_remote_code": False, "seed": 0, "engine": {}})
