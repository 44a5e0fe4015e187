"""Benchmark: fp32 vs bf16 and glibc's allocator settings on the tiny world's model (not a test).

Prints seconds on one torch thread for a forward of 16 x 256 tokens and a training step of
8 x 256 (bf16 autocast over fp32 weights), then, in child processes under three
``GLIBC_TUNABLES`` (none; huge pages only; :data:`mialab.core.jobs.MALLOC_TUNABLES`, what jobs get),
:func:`mialab.lm.logprobs.token_stats` of 96 texts (bf16) and ten bf16 training steps, each
with its user / sys seconds and minor page faults. Measured on this 2-core Xeon
(AMX-BF16), idle, on a finished tiny world: forward 0.657 -> 0.272 s (2.4x), training step
1.073 -> 0.603 s (1.8x); token_stats of these short (~60-token) texts 0.76 -> 0.60 s with huge
pages, page faults 26.6 k -> 92 (on the AIME split's ~200-token texts, with the batch-wide
statistics before this change: 5.8 -> 3.6 s, 1.46 M -> 7.6 k faults).

Usage: python benchmarks/bench_precision.py --world DIR (a finished tiny world's working directory)
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time

CHILD = """
import glob, resource, sys, time, torch
from mialab.lm.loading import load_causal_lm, load_tokenizer
from mialab.lm.logprobs import token_stats
torch.set_num_threads(1)
path = glob.glob(sys.argv[1] + '/results/models/sft/*/model')[0]
model, tok = load_causal_lm(path, device='cpu', dtype='bfloat16'), load_tokenizer(path)
texts = ['the king walks over the hill and sings of rain ' * 20] * 96
def measured(fn):
    fn()
    r0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    fn()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return (f'{time.perf_counter() - t:.2f}s wall, {r1.ru_utime - r0.ru_utime:.2f}s user, '
            f'{r1.ru_stime - r0.ru_stime:.2f}s sys, {r1.ru_minflt - r0.ru_minflt} page faults')
print('token_stats 96 texts:', measured(lambda: token_stats(model, tok, texts, max_length=256)))
model = load_causal_lm(path, device='cpu').train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randint(10, 8000, (8, 256))
def steps():
    for _ in range(10):
        with torch.autocast('cpu', dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
print('10 training steps 8x256:', measured(steps))
"""


def timed(fn, n: int = 3) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", required=True)
    world = ap.parse_args().world
    import torch

    from mialab.lm.loading import load_causal_lm

    torch.set_num_threads(1)
    path = glob.glob(f"{world}/results/models/sft/*/model")[0]
    x = torch.randint(10, 8000, (16, 256))
    for dtype in ("float32", "bfloat16"):
        model = load_causal_lm(path, device="cpu", dtype=dtype)
        with torch.inference_mode():
            print(f"forward 16x256 {dtype}: {timed(lambda: model(input_ids=x).logits):.3f}s")
    model = load_causal_lm(path, device="cpu").train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for bf16 in (False, True):
        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = model(input_ids=x[:8], labels=x[:8]).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
        print(f"training step 8x256 {'bf16 autocast' if bf16 else 'fp32'}: {timed(step):.3f}s")
    from mialab.core.jobs import with_malloc_tunables

    for tunables in ("", "glibc.malloc.hugetlb=1", with_malloc_tunables("")):
        env = {**os.environ, "GLIBC_TUNABLES": tunables, "OMP_NUM_THREADS": "1"}
        out = subprocess.run([sys.executable, "-c", CHILD, world], env=env, capture_output=True, text=True, check=True)
        print(f"GLIBC_TUNABLES={tunables or '(none)'}:\n  " + out.stdout.strip().replace("\n", "\n  "))


if __name__ == "__main__":
    main()
