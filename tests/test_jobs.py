"""mialab.jobs: the glue every workflow script starts with."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from mialab.jobs import setup_job
setup_job(None, {threads})
print("torch" in sys.modules)
import torch
print(torch.get_num_threads())
"""


def test_setup_job_pins_threads_without_importing_torch():
    out = subprocess.run([sys.executable, "-c", PROBE.format(threads=1)], capture_output=True, text=True, check=True)
    imported, threads = out.stdout.split()
    assert imported == "False"  # a pandas-only job never pays for torch
    assert threads == "1"        # torch, started later, reads the pinned count


def test_setup_job_repins_an_already_started_torch():
    probe = "import torch\n" + PROBE.format(threads=1)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "1"]


def test_malloc_tunables_are_added_once_and_keep_the_users_settings():
    from mialab.jobs import MALLOC_TUNABLES, with_malloc_tunables

    ours = ":".join(f"{k}={v}" for k, v in MALLOC_TUNABLES.items())
    assert with_malloc_tunables(None) == ours
    assert with_malloc_tunables("glibc.malloc.arena_max=2") == f"glibc.malloc.arena_max=2:{ours}"
    assert with_malloc_tunables(with_malloc_tunables("")) == ours
    mine = with_malloc_tunables("glibc.malloc.hugetlb=0")  # the user's choice wins
    assert mine.split(":")[0] == "glibc.malloc.hugetlb=0" and mine.count("glibc.malloc.hugetlb=") == 1


FAULTS = """
import resource
import numpy as np
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    block = np.ones(2**24, dtype=np.float32)  # 64 MB, allocated, touched and freed like a step's logits
    del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_malloc_tunables_let_a_process_reuse_freed_memory_instead_of_faulting_it_in_again():
    """glibc reads the tunables (names and values valid): ten 64 MB blocks cost at least 10x fewer page
    faults than with glibc's defaults, which map and unmap every block (here: 5440 vs 16)."""
    import os

    from mialab.jobs import with_malloc_tunables

    def faults(tunables):
        env = {**os.environ, "GLIBC_TUNABLES": tunables}
        return int(subprocess.run([sys.executable, "-c", FAULTS], env=env, capture_output=True, text=True,
                                  check=True).stdout)

    default, tuned = faults(""), faults(with_malloc_tunables(""))
    if default < 1000:  # the kernel maps every block in a few huge faults anyway (THP "always")
        pytest.skip(f"{default} faults without the tunables: nothing for them to save on this kernel")
    assert tuned * 10 < default


def test_training_launches_build_ops_in_this_environment_with_its_own_ninja(monkeypatch):
    """The torchrun command of a CPU job: DeepSpeed's CPU accelerator, the op cache inside this Python
    environment, and this environment's bin directory (its ninja) first on PATH, once."""
    import os

    from mialab import launch

    bindir = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", bindir, "/bin"]))
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setattr(launch, "visible_gpus", lambda: 0)
    cmd, env = launch.launch_command("train.py", ["--x", "1"], "auto")
    assert cmd[-3:] == ["train.py", "--x", "1"] and "--nproc_per_node=1" in cmd
    assert env["DS_ACCELERATOR"] == "cpu"
    assert env["TORCH_EXTENSIONS_DIR"] == os.path.join(sys.prefix, "torch_extensions")
    assert env["PATH"].split(os.pathsep) == [bindir, "/usr/bin", "/bin"]
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/scratch/ops")      # a user's choice is kept
    assert launch.launch_command("train.py", [], 2)[1]["TORCH_EXTENSIONS_DIR"] == "/scratch/ops"
