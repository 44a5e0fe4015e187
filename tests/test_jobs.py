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

