"""Glue shared by the thin entry points in ``workflow_scripts/``: logging, threads, no run-time downloads."""

from __future__ import annotations

import atexit
import os
import sys

#: Thread-count variables of torch's intra-op pool (OpenMP), MKL and OpenBLAS.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


#: glibc malloc tunables for the jobs the workflow launches (``GLIBC_TUNABLES``): large blocks on
#: transparent huge pages, served from the heap up to 1 GiB (not a fresh ``mmap`` each time), and up
#: to 4 GiB of freed heap kept for the next block instead of handed back to the kernel.
MALLOC_TUNABLES = {
    "glibc.malloc.hugetlb": "1",
    "glibc.malloc.mmap_threshold": str(2**30),
    "glibc.malloc.trim_threshold": str(2**32),
}


def with_malloc_tunables(tunables: str | None) -> str:
    """``GLIBC_TUNABLES`` with :data:`MALLOC_TUNABLES` added (a value the user set for one is kept).

    A CPU job allocates and frees full-vocabulary logits and activations of tens of MB per step. By
    default glibc maps each with fresh pages and unmaps it on free, so every step pays page faults
    and page zeroing in the kernel. Reusing freed heap instead halves the tiny world's kernel time
    (113 -> 53 CPU-s) and speeds scoring up by about a fifth (``benchmarks/bench_precision.py``
    compares the settings). The variable must be set before a process starts, so the workflow sets
    it for the jobs it launches; a glibc that lacks a tunable ignores it.
    """
    parts = [p for p in (tunables or "").split(":") if p]
    given = {p.split("=", 1)[0] for p in parts}
    parts += [f"{name}={value}" for name, value in MALLOC_TUNABLES.items() if name not in given]
    return ":".join(parts)


def tune_malloc() -> None:
    """Set :func:`with_malloc_tunables` in this process's environment, for the jobs it launches."""
    os.environ["GLIBC_TUNABLES"] = with_malloc_tunables(os.environ.get("GLIBC_TUNABLES"))


def export_entry_points(basedir: str) -> None:
    """Tell shell rules which interpreter and scripts to run (``"$MIALAB_PYTHON"``,
    ``"$MIALAB_SCRIPTS"``): this process's, so each job's own Snakemake process (on a cluster, the
    node's) sets them, and they never enter a rule's params (a moved checkout reruns nothing)."""
    os.environ["MIALAB_PYTHON"] = sys.executable
    os.environ["MIALAB_SCRIPTS"] = os.path.join(basedir, "workflow_scripts")


def entry_point(script: str) -> str:
    """The path of ``workflow_scripts/<script>`` (as :func:`export_entry_points` set it)."""
    return os.path.join(os.environ["MIALAB_SCRIPTS"], script)


#: transformers' switch for its hub kernels: from 5.25 on, ``from_pretrained`` turns them on unless this says
#: no, and a loaded model then swaps layers for code fetched from the hub (at load, and again at
#: ``model.train()``), which fails offline and runs code nobody configured.
HUB_KERNELS = "USE_HUB_KERNELS"


def offline_environment(env: dict | None = None) -> dict:
    """``env`` (default: this process's) with every run-time download switched off: the hub
    (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``, unless the caller set them: a cluster user who wants hub
    downloads exports ``HF_HUB_OFFLINE=0``) and transformers' hub kernels, always (:data:`HUB_KERNELS`;
    ``mialab.lm.loading`` turns them on for a model whose config asks, and for that model alone)."""
    env = dict(os.environ if env is None else env)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", env["HF_HUB_OFFLINE"])
    env[HUB_KERNELS] = "0"
    return env


def go_offline() -> None:
    """Put :func:`offline_environment` into this process's environment (and so every process it starts)."""
    os.environ.update(offline_environment())


def setup_job(log_path: str | None, threads: int = 1) -> None:
    """Send this process's stdout/stderr to ``log_path``, pin CPU threads, no run-time downloads
    (:func:`go_offline`).

    Threads: torch, OpenMP and BLAS read the thread variables when they start, so a job that never
    needs torch never pays for importing it.
    """
    for var in THREAD_VARIABLES:
        os.environ[var] = str(max(1, int(threads)))
    if "torch" in sys.modules:  # already started: its pool no longer reads the environment
        sys.modules["torch"].set_num_threads(max(1, int(threads)))
    go_offline()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    from mialab.core.progress import console

    console.file = sys.stderr
    atexit.register(report_cuda_use)


def report_cuda_use() -> None:
    """At a job's end, one log line on the GPU it used, if any: device and peak memory (a job that never
    touched CUDA, or never imported torch, prints nothing and pays nothing)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    device = torch.cuda.current_device()
    if not torch.cuda.max_memory_allocated(device):   # CUDA asked about, never computed on
        return
    print(f"mialab: CUDA device {device} ({torch.cuda.get_device_name(device)}): peak memory "
          f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB allocated", file=sys.stderr, flush=True)
