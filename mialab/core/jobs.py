"""Glue shared by the thin entry points in ``workflow_scripts/``: logging, threads, no run-time downloads
(:func:`setup_job`), and a job's lifecycle around its outputs (:class:`Job`)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Iterable, Iterator

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


def launcher_rank() -> int:
    """This process's rank among the processes of a launcher job (``torchrun``'s ``RANK``, set by
    :mod:`mialab.core.launch`); 0 in a job of one process."""
    return int(os.environ.get("RANK", "0"))


class Job:
    """One job's lifecycle around its outputs, from its start to its manifest.

    Created where the job's own work starts: its timer starts (:meth:`seconds`), and the temporaries a
    killed earlier attempt left beside ``outputs`` are removed (:func:`mialab.core.io.remove_stale_temporaries`;
    the job owns its outputs, so no other job's temporary is touched). :meth:`finish` writes the manifest,
    recording ``outputs`` (with the job's wall time as ``seconds`` unless ``timed=False``), then deletes the
    ``scratch`` folders: what only a resumed attempt needs (resumable parts, checkpoints, a trainer's work
    folder). Until the manifest is written they stay, so an attempt killed before resumes from them.

    In a job of one process per device (:meth:`launched`) rank 0 alone publishes: it alone removes stale
    temporaries, moves folders into place (:meth:`directory`, :meth:`publish_folder`), writes the manifest and
    deletes the scratch; the other ranks (:attr:`publishes` false) only take part in the computation.
    """

    def __init__(self, outputs: Iterable[str | os.PathLike] = (), *, scratch: Iterable[str | os.PathLike] = (),
                 rank: int = 0):
        self.started = time.perf_counter()
        self.outputs = [str(o) for o in outputs]
        self.scratch = [Path(s) for s in scratch]
        self.rank = rank
        if self.publishes:
            from mialab.core.io import remove_stale_temporaries   # pandas: after setup_job pinned the threads

            remove_stale_temporaries(*self.outputs)

    @classmethod
    def launched(cls, outputs: Iterable[str | os.PathLike] = (), *,
                 scratch: Iterable[str | os.PathLike] = ()) -> Job:
        """The job of this process of a launcher job (:func:`launcher_rank`): rank 0 publishes."""
        return cls(outputs, scratch=scratch, rank=launcher_rank())

    @property
    def publishes(self) -> bool:
        """Whether this process writes the job's outputs (rank 0)."""
        return self.rank == 0

    def seconds(self) -> float:
        """Wall time since the job started, in seconds (one decimal)."""
        return round(time.perf_counter() - self.started, 1)

    @contextlib.contextmanager
    def directory(self, final: str | os.PathLike) -> Iterator[Path]:
        """On rank 0, :func:`mialab.core.io.atomic_directory` of ``final`` (moved into place on success);
        on the other ranks ``final`` itself, which they do not write."""
        if not self.publishes:
            yield Path(final)
            return
        from mialab.core.io import atomic_directory

        with atomic_directory(final) as tmp:
            yield tmp

    def publish_folder(self, source: str | os.PathLike, final: str | os.PathLike) -> None:
        """Move every item of folder ``source`` into ``final`` (rank 0; atomically: ``final`` appears whole)."""
        if not self.publishes:
            return
        with self.directory(final) as tmp:
            for item in Path(source).iterdir():
                os.replace(item, tmp / item.name)

    def finish(self, manifest: dict, path: str | os.PathLike, *, timed: bool = True) -> None:
        """Write ``manifest`` to ``path`` (recording the job's ``outputs``; ``seconds`` added when ``timed``),
        then delete the scratch folders; nothing on a rank other than 0."""
        if not self.publishes:
            return
        from mialab.core.io import write_manifest

        write_manifest({**manifest, "seconds": self.seconds()} if timed else manifest, path, outputs=self.outputs)
        for folder in self.scratch:
            shutil.rmtree(folder, ignore_errors=True)
