"""Benchmark: fast reconstruction-metric kernel vs the pure-Python reference (not a test).

Pairs are 512-word windows of real text (MIMIR Pile-CC + Wikipedia members from shared/data)
as references; each candidate is its reference with two pairs of 32-word chunks swapped and then
30% of the words replaced by random corpus words (realistic overlap: LCS ~ 60% of the length).

Measures pairs/second for the full lexical metric suite and for the ``trio`` reward, with 1 and
2 worker processes, for the kernel and for the reference (timed on far fewer pairs), prints the
ratios and the projected time of one paper-scale GRPO step (16,384 pairs of 512 words), then
times such a step directly on 2 workers twice: with every text distinct (worst case) and laid
out as ADRA+ does (64 prompts x 32 rollouts, each against its true suffix and 7 distractor
suffixes, so texts repeat and the kernel tokenises each distinct text once per chunk). Rewards
are timed under ADRA's config defaults, the released code's settings (n-gram range [3, longest
greedy match <= 30], whitespace word counts).

Against the released code: when ``--code`` or ``MIA_RL_CODE`` names a local copy of the MIA-RL
repository (never vendored; :mod:`mialab.similarity.released`), its own reward functions
(``lexical._compute_score_single`` with its trio / n-gram profiles, dynamic mode as its training
runs set it) are timed in this process on one core against the kernel on one core, alternately and
repeatedly (the median ratio and its range), and the values are compared (max |difference|, required
<= 1e-9). Without a copy that part says so and is skipped.

Usage: python benchmarks/bench_reconstruction.py [--pairs 2048] [--ref-pairs 4] [--step-pairs 16384]
       [--code-pairs 200] [--code PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from mialab.adra.rewards import sample_distractors
from mialab.similarity.kernel import lexical_metrics, worker_pool
from mialab.similarity.metrics import COUNT_NAMES, metrics_from_counts
from mialab.similarity.reference import reference_counts
from mialab.similarity.released import ENV, code_rewards, released_code
from mialab.training.rewards import compute_rewards, get_reward

DATA = Path(__file__).resolve().parents[1] / "shared" / "data" / "mimir_ngram7" / "members"
FALLBACK_DATA = Path("/work/shared/data/mimir_ngram7/members")
WORDS = 512
CODE_SETTINGS = {"n_max": 30, "ngram_range": "dynamic", "length_words": "whitespace"}  # adra.reward's defaults


def corpus_words(folder: Path) -> np.ndarray:
    """Every whitespace word of the Pile-CC and Wikipedia member documents."""
    words: list[str] = []
    for name in ("pile_cc.jsonl", "wikipedia.jsonl"):
        with open(folder / name) as f:
            for line in f:
                words.extend(json.loads(line).split())
    return np.array(words, dtype=object)


def perturb(ref: np.ndarray, words: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A candidate for ``ref``: two pairs of 32-word chunks swapped, then 30% of the words replaced."""
    cand = ref.copy()
    for _ in range(2):
        a, b = rng.choice(WORDS // 32, size=2, replace=False) * 32
        cand[a:a + 32], cand[b:b + 32] = cand[b:b + 32].copy(), cand[a:a + 32].copy()
    swap = rng.random(WORDS) < 0.3
    cand[swap] = words[rng.integers(0, len(words), swap.sum())]
    return cand


def window(words: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random 512-word window of the corpus."""
    start = rng.integers(0, len(words) - WORDS)
    return words[start:start + WORDS]


def make_pairs(words: np.ndarray, n: int, seed: int) -> tuple[list[str], list[str]]:
    """(candidates, references), every text distinct: the worst case for the kernel's text cache."""
    rng = np.random.default_rng(seed)
    refs = [window(words, rng) for _ in range(n)]
    return [" ".join(perturb(r, words, rng)) for r in refs], [" ".join(r) for r in refs]


def grpo_step_pairs(words: np.ndarray, *, prompts: int, rollouts: int, distractors: int,
                    seed: int) -> tuple[list[str], list[str]]:
    """One ADRA+ step: each rollout scored against its prompt's true suffix and K other prompts' suffixes."""
    rng = np.random.default_rng(seed)
    suffixes = [window(words, rng) for _ in range(prompts)]
    picks = sample_distractors(list(range(prompts)), distractors, seed=seed)
    cands, refs = [], []
    for p, suffix in enumerate(suffixes):
        for _ in range(rollouts):
            rollout = " ".join(perturb(suffix, words, rng))
            for q in (p, *picks[p]):
                cands.append(rollout)
                refs.append(" ".join(suffixes[q]))
    return cands, refs


def reference_pair(args: tuple[str, str]) -> tuple[dict, float]:
    """Reference counts of one pair and its trio reward (pure Python)."""
    counts = reference_counts(*args)
    metrics = metrics_from_counts({k: np.array([counts[k]]) for k in COUNT_NAMES})
    return counts, float(get_reward("trio")(metrics)[0])


def timed(fn, *args, **kwargs) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args, **kwargs)
    return time.perf_counter() - wall, time.process_time() - cpu


def reference_all(cands: list[str], refs: list[str], workers: int) -> None:
    """Reference metrics (+ trio) of all pairs, in-process or on ``workers`` processes."""
    if workers == 1:
        [reference_pair(p) for p in zip(cands, refs)]
    else:
        with ProcessPoolExecutor(workers) as pool:
            list(pool.map(reference_pair, zip(cands, refs)))


def time_kernel(fn, cands: list[str], refs: list[str], workers: int, repeats: int = 2) -> tuple[float, float]:
    """Best-of-``repeats`` (wall, CPU) seconds of ``fn(cands, refs, workers=...)`` (each the minimum over repeats)."""
    runs = [timed(fn, cands, refs, workers=workers) for _ in range(repeats)]
    return min(w for w, _ in runs), min(c for _, c in runs)


def against_code(code_path: str | None, cands: list[str], refs: list[str], kernel_pairs: int, rounds: int = 3) -> None:
    """Time the released code's reward functions against the kernel, one core each, and compare values.

    Code and kernel are timed alternately, ``rounds`` times, so that a change of machine load hits both;
    the ratio printed is the median of the rounds' ratios (with their range).
    """
    code = released_code(code_path)
    if code is None:
        print(f"\nreleased code: skipped (set --code or {ENV} to a local copy of github.com/oseyosey/MIA-RL)")
        return
    print(f"\nreleased code ({code_path or os.environ[ENV]}), in-process CPU seconds (one core each), code and kernel "
          f"alternately {rounds} times; values under its settings")
    print(f"{'reward':<10}{'code pairs/s':>14}{'kernel pairs/s':>16}{'x code':>9}{'range':>12}{'max |diff|':>12}")
    kc = (cands * (kernel_pairs // len(cands) + 1))[:kernel_pairs]
    kr = (refs * (kernel_pairs // len(refs) + 1))[:kernel_pairs]
    for metric in ("trio", "ngram"):
        ours = compute_rewards(metric, cands, refs, tau=1.5, **CODE_SETTINGS)
        code_rates, rates = [], []
        for _ in range(rounds):
            start = time.process_time()
            theirs = np.array(code_rewards(code, metric, cands, refs, tau=1.5, dynamic=True))
            code_rates.append(len(cands) / (time.process_time() - start))
            _, cpu = time_kernel(lambda c, r, workers: compute_rewards(metric, c, r, workers=workers, **CODE_SETTINGS),
                                 kc, kr, 1, repeats=1)
            rates.append(kernel_pairs / cpu)
        ratios = np.array(rates) / np.array(code_rates)
        diff = float(np.abs(ours - theirs).max())
        print(f"{metric:<10}{np.median(code_rates):>14.1f}{np.median(rates):>16.0f}{np.median(ratios):>9.0f}"
              f"{f'{ratios.min():.0f}-{ratios.max():.0f}':>12}{diff:>12.1e}{'' if diff <= 1e-9 else '  DIFFERS'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2048, help="pairs for the kernel timings")
    ap.add_argument("--ref-pairs", type=int, default=4, help="pairs for the reference timings")
    ap.add_argument("--step-pairs", type=int, default=16384, help="pairs of the directly timed GRPO step")
    ap.add_argument("--code-pairs", type=int, default=200, help="pairs for the released code's timings")
    ap.add_argument("--code", help=f"a local copy of the released ADRA code (default: ${ENV})")
    ap.add_argument("--data", type=Path, default=DATA if DATA.exists() else FALLBACK_DATA)
    args = ap.parse_args()

    words = corpus_words(args.data)
    cands, refs = make_pairs(words, max(args.pairs, args.step_pairs), seed=0)
    sample = lexical_metrics(cands[:256], refs[:256])
    print(f"corpus {len(words):,} words; 512-word pairs: mean LCS ratio {sample['lcs_ratio_ref'].mean():.2f}, "
          f"n-gram coverage {sample['ngram_coverage_ref'].mean():.2f}, trio "
          f"{compute_rewards('trio', cands[:256], refs[:256], **CODE_SETTINGS).mean():.2f}")
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at start")

    suite = lambda c, r, workers: lexical_metrics(c, r, workers=workers)
    trio = lambda c, r, workers: compute_rewards("trio", c, r, workers=workers, **CODE_SETTINGS)
    start = time.perf_counter()
    worker_pool(2).submit(int).result()
    list(worker_pool(2).map(int, range(4)))
    print(f"worker pool start (once per process): {time.perf_counter() - start:.2f} s")

    kc, kr = cands[: args.pairs], refs[: args.pairs]
    rc, rr = cands[: args.ref_pairs], refs[: args.ref_pairs]
    print(f"\n{'what':<28}{'workers':>8}{'pairs':>7}{'wall s':>8}{'pairs/s':>10}{'x reference':>12}"
          f"{'16,384 pairs':>14}{'CPU us/pair':>13}")
    for workers in (1, 2):
        wall, cpu = timed(reference_all, rc, rr, workers)
        ref_rate = args.ref_pairs / wall
        print(f"{'reference (suite + trio)':<28}{workers:>8}{args.ref_pairs:>7}{wall:>8.2f}{ref_rate:>10.3f}{1:>12}"
              f"{16384 / ref_rate:>13.0f}s{cpu / args.ref_pairs * 1e6 if workers == 1 else float('nan'):>13.0f}")
        for name, fn in (("kernel: full lexical suite", suite), ("kernel: trio reward", trio)):
            wall, cpu = time_kernel(fn, kc, kr, workers)
            rate = len(kc) / wall
            print(f"{name:<28}{workers:>8}{len(kc):>7}{wall:>8.2f}{rate:>10.0f}{rate / ref_rate:>12.0f}"
                  f"{16384 / rate:>13.2f}s{cpu / len(kc) * 1e6 if workers == 1 else float('nan'):>13.0f}")

    gc, gr = grpo_step_pairs(words, prompts=64, rollouts=32, distractors=7, seed=1)
    print(f"\nGRPO step of {args.step_pairs:,} pairs, trio reward: measured wall on 2 workers, and projected from the "
          f"in-process CPU time of {len(kc)} pairs as CPU/pair x pairs / 2 cores (what 2 idle cores would take)")
    layouts = (("all texts distinct (worst case)", cands, refs),
               ("ADRA+ layout: 64 prompts x 32 rollouts x (1 true + 7 distractor suffixes)", gc, gr))
    for name, c, r in layouts:
        _, cpu = time_kernel(trio, c[: len(kc)], r[: len(kc)], 1)
        wall, _ = time_kernel(trio, c[: args.step_pairs], r[: args.step_pairs], 2, repeats=1)
        print(f"  {name}: measured {wall:.2f} s, projected {cpu / len(kc) * args.step_pairs / 2:.2f} s")
    against_code(args.code, cands[: args.code_pairs], refs[: args.code_pairs], args.pairs)
    print(f"load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
