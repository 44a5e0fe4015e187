"""mialab.core.jobs: the glue every workflow script starts with."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = """
import sys
from mialab.core.jobs import setup_job
setup_job(None, {threads})
print("torch" in sys.modules)
import torch
print(torch.get_num_threads())
"""


def test_setup_job_pins_threads_without_importing_torch():
    out = subprocess.run([sys.executable, "-c", PROBE.format(threads=2)], capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    imported, threads = out.stdout.split()
    assert imported == "False"  # a pandas-only job never pays for torch
    assert threads == "2"        # torch, started later, reads the pinned count, not the inherited one


def test_setup_job_repins_an_already_started_torch():
    probe = "import torch\n" + PROBE.format(threads=2)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.stdout.split() == ["True", "2"]


def test_malloc_tunables_are_added_once_and_keep_the_users_settings():
    from mialab.core.jobs import MALLOC_TUNABLES, with_malloc_tunables

    ours = ":".join(f"{k}={v}" for k, v in MALLOC_TUNABLES.items())
    assert with_malloc_tunables(None) == ours
    assert with_malloc_tunables("glibc.malloc.arena_max=2") == f"glibc.malloc.arena_max=2:{ours}"
    assert with_malloc_tunables(with_malloc_tunables("")) == ours
    mine = with_malloc_tunables("glibc.malloc.hugetlb=0")  # the user's choice wins
    assert mine.split(":")[0] == "glibc.malloc.hugetlb=0" and mine.count("glibc.malloc.hugetlb=") == 1


HEAP = """
import ctypes
import numpy as np

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
block = np.ones(2**24, dtype=np.float32)  # 64 MB, like a step's logits
mapped = libc.mallinfo2().hblkhd          # bytes in blocks glibc mapped on their own
del block
print(mapped, libc.mallinfo2().arena)     # heap glibc still holds after the free
"""


def test_malloc_tunables_serve_large_blocks_from_a_heap_that_is_kept_for_the_next_step():
    """glibc reads the tunables (names and values valid): a 64 MB block comes from the heap, not a
    mapping of its own, and the heap keeps it after the free; with glibc's defaults the block is
    mapped on its own and unmapped on free (every step faults its pages in again)."""
    import os

    from mialab.core.jobs import with_malloc_tunables

    def heap(tunables):
        env = {**os.environ, "GLIBC_TUNABLES": tunables}
        out = subprocess.run([sys.executable, "-c", HEAP], env=env, capture_output=True, text=True, check=True)
        return [int(x) for x in out.stdout.split()]

    mapped, kept = heap("")
    assert mapped >= 2**26 and kept < 2**26
    mapped, kept = heap(with_malloc_tunables(""))
    assert mapped == 0 and kept >= 2**26


def test_training_launches_build_ops_in_this_environment_with_its_own_ninja(monkeypatch):
    """The torchrun command of a CPU job: DeepSpeed's CPU accelerator, the op cache inside this Python
    environment, and this environment's bin directory (its ninja) first on PATH, once."""
    import os

    from mialab.core import launch

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
