"""mialab.jobs: the glue every workflow script starts with."""

from __future__ import annotations

import subprocess
import sys

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


def test_huge_pages_tunable_is_added_once_and_keeps_the_users_settings():
    from mialab.jobs import HUGE_PAGES, with_huge_pages

    assert with_huge_pages(None) == HUGE_PAGES
    assert with_huge_pages("glibc.malloc.arena_max=2") == f"glibc.malloc.arena_max=2:{HUGE_PAGES}"
    assert with_huge_pages(with_huge_pages("")) == HUGE_PAGES
    assert with_huge_pages("glibc.malloc.hugetlb=0") == "glibc.malloc.hugetlb=0"  # the user's choice wins



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
