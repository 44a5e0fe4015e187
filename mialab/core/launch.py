"""Start a multi-process training script on every device a job was given.

``python -m mialab.core.launch --nproc auto SCRIPT ARGS...`` runs ``torchrun --standalone`` with one
process per visible GPU (``CUDA_VISIBLE_DEVICES``, as set by SLURM for ``--gpus``), or one CPU
process with DeepSpeed's CPU accelerator (gloo) on a machine without GPUs.

``python -m mialab.core.launch --build-ops`` compiles the DeepSpeed ops a CPU training job loads (the
install script runs it), so that the first SFT job does not spend its time compiling them.
"""

from __future__ import annotations

import argparse
import os
import sys


def visible_gpus() -> int:
    """Number of CUDA devices this process may use."""
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no torch/CUDA means no GPU
        return 0


def extensions_dir() -> str:
    """Cache of JIT-compiled torch/DeepSpeed ops, inside this Python environment.

    torch's default (``~/.cache/torch_extensions``) is shared by every environment of a user, and
    an op built for one environment's paths is rebuilt for the next (a CI clone, a second venv)
    and then again for the first. A user's ``TORCH_EXTENSIONS_DIR`` is kept.
    """
    return os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(sys.prefix, "torch_extensions")


#: where a ccache install keeps its compiler links (``c++`` -> ccache: its "masquerade" mode), per distribution
CCACHE_LINK_DIRS = ("/usr/lib/ccache", "/usr/lib64/ccache", "/usr/local/opt/ccache/libexec")


def compiler_cache_dir() -> str | None:
    """ccache's compiler links where ccache is installed, else None.

    A JIT op is compiled again in every new environment (its build directory lives in it): a CI clone, a
    second venv. Through ccache that compile is a cache hit after the first (``CCACHE_BASEDIR``, set by
    ``job_environment``, makes the environment's absolute paths relative, so a clone elsewhere hits too);
    ``CCACHE_DISABLE=1`` turns it off. The install script installs ccache where it may (Debian, as root).
    """
    return next((d for d in CCACHE_LINK_DIRS if os.access(os.path.join(d, "c++"), os.X_OK)), None)


def tool_path(path: str | None) -> str:
    """``path`` with this Python environment's ``bin`` directory first, then ccache's compiler links.

    A JIT build runs ``ninja`` from ``PATH``: the environment's (pip's ``ninja``, always there) must
    win over a system one, which may be missing, and whose other build-log format would make each
    of the two rebuild every op the other built. Its ``c++`` is ccache's where ccache is installed
    (``compiler_cache_dir``).
    """
    first = [os.path.dirname(sys.executable), *filter(None, [compiler_cache_dir()])]
    return os.pathsep.join([*first, *(p for p in (path or "").split(os.pathsep) if p and p not in first)])


def build_ops() -> list[str]:
    """Compile the DeepSpeed ops a training job on this machine loads; return their names.

    On a machine without GPUs DeepSpeed's CPU accelerator loads its shared-memory collective op
    when a job initialises communication (even for one process); it is compiled on first use. GPU
    jobs load no JIT op (the SFT stage uses torch's AdamW, not DeepSpeed's FusedAdam).
    """
    if visible_gpus():
        return []
    os.environ.update(job_environment(dict(os.environ), gpus=0))  # the same build as in a training job
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None or not builder.is_compatible():
        return []
    builder.load(verbose=False)
    return [builder.absolute_name()]


def job_environment(env: dict, gpus: int) -> dict:
    """``env`` for a training job (and the op build): the op cache and ninja of this environment (and
    ccache, its paths taken relative to the environment), DeepSpeed's CPU accelerator when there is no GPU."""
    env = {**env, "TORCH_EXTENSIONS_DIR": extensions_dir(), "PATH": tool_path(env.get("PATH"))}
    if compiler_cache_dir():
        env.setdefault("CCACHE_BASEDIR", sys.prefix)
    if gpus == 0:
        env.setdefault("DS_ACCELERATOR", "cpu")
    return env


def launch_command(script: str, args: list[str], nproc: str | int) -> tuple[list[str], dict]:
    """The torchrun command line and environment for ``script``."""
    gpus = visible_gpus()
    n = (gpus or 1) if nproc == "auto" else int(nproc)
    env = job_environment(dict(os.environ), gpus)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", script, *args]
    return cmd, env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nproc", default="auto")
    ap.add_argument("--build-ops", action="store_true", help="compile the ops training jobs load, then exit")
    ap.add_argument("script", nargs="?")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args()
    if ns.build_ops:
        print("DeepSpeed ops ready:", ", ".join(build_ops()) or "none needed", "in", extensions_dir())
        return
    if ns.script is None:
        ap.error("a training script is required")
    cmd, env = launch_command(ns.script, ns.args, ns.nproc)
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    main()
