"""Start a multi-process training script on every device a job was given.

``python -m mialab.launch --nproc auto SCRIPT ARGS...`` runs ``torchrun --standalone`` with one
process per visible GPU (``CUDA_VISIBLE_DEVICES``, as set by SLURM for ``--gpus``), or one CPU
process with DeepSpeed's CPU accelerator (gloo) on a machine without GPUs.
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


def launch_command(script: str, args: list[str], nproc: str | int) -> tuple[list[str], dict]:
    """The torchrun command line and environment for ``script``."""
    gpus = visible_gpus()
    n = (gpus or 1) if nproc == "auto" else int(nproc)
    env = dict(os.environ)
    if gpus == 0:
        env.setdefault("DS_ACCELERATOR", "cpu")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", script, *args]
    return cmd, env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nproc", default="auto")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args()
    cmd, env = launch_command(ns.script, ns.args, ns.nproc)
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    main()
