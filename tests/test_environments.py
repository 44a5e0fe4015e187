"""Environments that install: no per-rule `conda:` directive (environment.yml installs the package with
`-e .`, which cannot work from the copy Snakemake makes of a rule's environment file), one documented
activation instead (docs/slurm.md), and rule commands that run the job's own interpreter."""

from __future__ import annotations

import re
from pathlib import Path

from workflow_helpers import REPO

RULE_FILES = [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]


def test_no_rule_has_a_conda_directive():
    offending = [f"{p.name}:{i}" for p in RULE_FILES for i, line in enumerate(p.read_text().splitlines(), 1)
                 if re.match(r"^\s+conda:", line)]
    assert not offending, f"conda: directives that cannot install (environment.yml has -e .): {offending}"


def test_the_activation_is_documented():
    doc = (REPO / "docs" / "slurm.md").read_text()
    assert "conda env create -f environment.yml" in doc and "conda activate mialab" in doc
    assert "-e ." in (REPO / "environment.yml").read_text()   # why the rules name no environment


def test_rule_commands_run_the_jobs_own_interpreter():
    """Shell rules call "$MIALAB_PYTHON" (set in each job's own Snakemake process), never the submitting
    node's sys.executable or a fixed path."""
    for p in RULE_FILES:
        text = p.read_text()
        for block in re.findall(r"^    shell:\n((?:        .*\n)+)", text, re.M):
            assert "sys.executable" not in block and not re.search(r"/(usr|opt|home)/\S*python", block), (p, block)
            if "python" in block:
                assert '"$MIALAB_PYTHON"' in block, (p.name, block)


def test_vllm_configured_but_missing_is_named_by_its_key(tmp_path):
    import yaml

    from mialab.pipeline.cluster_checks import vllm_problems

    cfg = yaml.safe_load((REPO / "configs" / "paper" / "adra_aime.yaml").read_text())
    python = tmp_path / "bin" / "python"
    problems = vllm_problems(cfg, trl_vllm=None, trl_range=">=0.22.0,<=0.31.0", worker_vllm=None, venv=tmp_path)
    assert [p.split(":")[0] for p in problems] == ["adra.train.vllm", "n_sampling.backend"]
    assert str(python) in problems[1]
    python.parent.mkdir()
    python.touch()
    assert vllm_problems(cfg, trl_vllm="0.26.0", trl_range=">=0.22.0,<=0.31.0", worker_vllm="0.32.0",
                         venv=tmp_path) == []
    cfg["adra"]["variants"] = ["adra_sft"]   # no GRPO variant: TRL's vLLM is not used
    assert vllm_problems(cfg, trl_vllm=None, trl_range=">=0.22.0,<=0.31.0", worker_vllm="0.32.0",
                         venv=tmp_path) == []


def test_a_run_that_needs_vllm_fails_before_any_job(tmp_path):
    """On a GPU machine (here: CUDA_VISIBLE_DEVICES names one) a real run of a paper config that asks for
    vLLM stops at its start, naming the key, when vLLM is not installed (a dry run plans without it)."""
    import os
    import subprocess
    import sys

    from workflow_helpers import add_stand_ins, command_config, repo_copy

    root = repo_copy(tmp_path)
    command = "snakemake --cores 1 --configfile configs/paper/adra_aime.yaml"
    add_stand_ins(root, command_config(root, command))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "0", "MIALAB_VLLM_VENV": "/nonexistent",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(command.split(), cwd=root, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "vLLM is configured but not installed" in out, out[-3000:]
    assert "adra.train.vllm" in out and "n_sampling.backend" in out
    assert "Finished jobid" not in out and not list(root.glob("results/pools/aime/*/pool.parquet"))
