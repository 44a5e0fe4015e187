"""mialab.core.jobs: the glue every workflow script starts with."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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
    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    monkeypatch.setattr(launch, "visible_gpus", lambda: 0)
    monkeypatch.setattr(launch, "CCACHE_LINK_DIRS", ())      # no ccache
    cmd, env = launch.launch_command("train.py", ["--x", "1"], "auto")
    assert cmd[-3:] == ["train.py", "--x", "1"] and "--nproc_per_node=1" in cmd
    assert env["DS_ACCELERATOR"] == "cpu"
    assert env["TORCH_EXTENSIONS_DIR"] == os.path.join(sys.prefix, "torch_extensions")
    assert env["PATH"].split(os.pathsep) == [bindir, "/usr/bin", "/bin"] and "CCACHE_BASEDIR" not in env
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/scratch/ops")      # a user's choice is kept
    assert launch.launch_command("train.py", [], 2)[1]["TORCH_EXTENSIONS_DIR"] == "/scratch/ops"


def test_ccache_compiles_a_second_environments_op_from_the_cache(tmp_path, monkeypatch):
    """Where ccache is installed, a training job's ``c++`` is ccache's, right after the environment's bin, and its
    paths are taken relative to the environment (``CCACHE_BASEDIR``): the same source compiled in a second
    environment at another path is a cache hit (what makes the op build of a fresh clone's install a hit)."""
    from mialab.core import launch

    if launch.compiler_cache_dir() is None:
        pytest.skip("no ccache here (scripts/install.sh installs it on Debian as root)")
    bindir = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", launch.compiler_cache_dir(), "/bin"]))
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    monkeypatch.delenv("CCACHE_DISABLE", raising=False)
    env = launch.job_environment(dict(os.environ), gpus=0)
    assert env["PATH"].split(os.pathsep) == [bindir, launch.compiler_cache_dir(), "/usr/bin", "/bin"]
    assert env["CCACHE_BASEDIR"] == sys.prefix

    def compile_in(prefix):
        build = prefix / "torch_extensions" / "op"
        build.mkdir(parents=True)
        (prefix / "op.cpp").write_text("int twice(int x) { return 2 * x; }\n")
        subprocess.run(["c++", "-O2", "-c", str(prefix / "op.cpp"), "-o", "op.o"], cwd=build, check=True,
                       env={**env, "CCACHE_BASEDIR": str(prefix)})
        stats = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True, text=True, check=True)
        return dict(line.split("\t") for line in stats.stdout.splitlines())

    first = compile_in(tmp_path / "env-a")
    second = compile_in(tmp_path / "env-b")
    hits = lambda stats: int(stats["direct_cache_hit"]) + int(stats["preprocessed_cache_hit"])  # noqa: E731
    assert hits(first) == 0 and hits(second) == 1


# --- a job's lifecycle (mialab.core.jobs.Job) --------------------------------------------------------------

def test_a_job_removes_stale_temporaries_at_its_start_and_its_scratch_after_the_manifest(tmp_path, monkeypatch):
    import json
    from pathlib import Path

    from mialab.core.io import write_parquet
    from mialab.core.jobs import Job

    import pandas as pd

    out, manifest = tmp_path / "table.parquet", tmp_path / "manifest.json"
    stale, other = tmp_path / ".table.parquet.k1ll3d.tmp", tmp_path / ".elsewhere.parquet.x.tmp"
    stale.write_text("half"), other.write_text("another job's")
    parts = tmp_path / "table.parquet.parts"
    parts.mkdir()
    (parts / "part-0.parquet").write_text("resumable")
    clock = iter([100.0, 112.34])
    monkeypatch.setattr("mialab.core.jobs.time.perf_counter", lambda: next(clock))
    job = Job([out, manifest], scratch=[parts])
    assert not stale.exists() and other.exists() and parts.exists()
    write_parquet(pd.DataFrame({"a": [1]}), out)
    job.finish({"rows": 1}, manifest)
    written = json.loads(manifest.read_text())
    assert written["rows"] == 1 and written["seconds"] == 12.3
    assert list(written["outputs"]) == ["table.parquet"]      # the outputs recorded, the manifest left out
    assert not parts.exists() and Path(out).exists()


def test_an_untimed_job_writes_the_manifest_as_given(tmp_path):
    import json

    from mialab.core.jobs import Job

    Job([tmp_path / "manifest.json"]).finish({"steps": 3}, tmp_path / "manifest.json", timed=False)
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"steps": 3, "outputs": {}}


def test_in_a_launcher_job_rank_zero_alone_publishes(tmp_path, monkeypatch):
    """Rank 0 removes stale temporaries, moves a folder into place, writes the manifest and removes the
    scratch; another rank touches none of it (it only takes part in the computation)."""
    from mialab.core.jobs import Job, launcher_rank

    final, manifest, work = tmp_path / "trainer", tmp_path / "manifest.json", tmp_path / "work"
    stale = tmp_path / ".trainer.abc.tmp"
    stale.mkdir()
    (work / "checkpoint").mkdir(parents=True)
    (work / "checkpoint" / "state.pt").write_text("weights")

    monkeypatch.setenv("RANK", "1")
    assert launcher_rank() == 1
    job = Job.launched([final, manifest], scratch=[work])
    assert not job.publishes and stale.exists()
    with job.directory(final) as where:
        assert where == final                                 # the final path, never written by this rank
    job.publish_folder(work / "checkpoint", final)
    job.finish({"x": 1}, manifest)
    assert not final.exists() and not manifest.exists() and work.exists()

    monkeypatch.delenv("RANK")                                # no launcher: one process, rank 0
    job = Job.launched([final, manifest], scratch=[work])
    assert job.publishes and not stale.exists()
    job.publish_folder(work / "checkpoint", final)
    assert (final / "state.pt").read_text() == "weights" and not any((work / "checkpoint").iterdir())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".trainer.")]   # moved in whole, no temporary left
    job.finish({"x": 1}, manifest)
    assert manifest.exists() and not work.exists()


def test_no_entry_script_repeats_the_job_lifecycle():
    """The timer, stale-temporary and parts clean-up, and the launcher's rank test live in
    mialab.core.jobs.Job alone; a workflow script that spells one out again fails here."""
    import re
    from pathlib import Path

    scripts = Path(__file__).resolve().parents[1] / "workflow_scripts"
    lifecycle = re.compile(r"perf_counter|remove_stale_temporaries|Parts\(|\.remove\(\)|shutil\.rmtree|"
                           r"environ\.get\(\"(LOCAL_)?RANK\"|nullcontext")
    repeating = {p.name for p in scripts.glob("*.py") if lifecycle.search(p.read_text())}
    assert not repeating, f"scripts that repeat the job lifecycle: {sorted(repeating)}"


def test_the_job_module_loads_no_numpy_before_setup_job_pins_the_threads():
    """OpenBLAS reads its thread count when numpy loads: importing the job glue must not load it."""
    out = subprocess.run([sys.executable, "-c", "import sys\nfrom mialab.core.jobs import Job, setup_job\n"
                          "print(sorted(m for m in ('numpy', 'pandas', 'torch') if m in sys.modules))"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]"]
