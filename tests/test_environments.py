"""Environments that install: no per-rule `conda:` directive (environment.yml installs the package with
`-e .`, which cannot work from the copy Snakemake makes of a rule's environment file), one documented
activation instead (docs/slurm.md), and rule commands that run the job's own interpreter."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.version import Version
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

    from workflow_helpers import fetch_stand_ins, repo_copy, stand_in_hub, with_stand_in_hashes

    root = with_stand_in_hashes(repo_copy(tmp_path))
    command = "snakemake --cores 1 --configfile configs/paper/adra_aime.yaml"
    assert fetch_stand_ins(root, command).returncode == 0   # its data, from the stand-in hub
    env = {**os.environ, **stand_in_hub()[0], "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "0",
           "MIALAB_VLLM_VENV": "/nonexistent", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(command.split(), cwd=root, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "vLLM is configured but not installed" in out, out[-3000:]
    assert "adra.train.vllm" in out and "n_sampling.backend" in out
    assert "Finished jobid" not in out and not list(root.glob("results/pools/aime/*/pool.parquet"))


def _pins(path: Path) -> dict[str, str]:
    """``name -> version`` of a requirements file's ``name==version`` lines (names normalised)."""
    from packaging.utils import canonicalize_name

    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==")
            pins[canonicalize_name(name.split("[")[0])] = version.strip()
    return pins


def _declared() -> dict:
    """pyproject.toml's dependencies as ``name -> packaging Requirement``."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return {canonicalize_name(r.name): r for r in map(Requirement, deps)}


def test_the_tested_versions_lie_inside_the_declared_ranges():
    """envs/constraints.txt (the suite's versions, the cluster environment's through environment.yml), the
    oldest pass's envs/oldest.txt and the torch builds the installs pin are all inside pyproject.toml's ranges."""
    declared = _declared()
    constraints = _pins(REPO / "envs" / "constraints.txt")
    assert "torch" not in constraints   # pinned where it is installed: a CPU build here, a CUDA build there
    outside = {name: (version, str(declared[name].specifier)) for name, version in constraints.items()
               if name in declared and version not in declared[name].specifier}
    assert not outside, f"constraints outside pyproject.toml's ranges: {outside}"
    assert set(declared) <= set(constraints) | {"torch"}, "a dependency the suite does not pin"
    torch_pins = re.findall(r"torch==([\d.]+)", (REPO / "scripts" / "install.sh").read_text()
                            + (REPO / "environment.yml").read_text())
    assert len(torch_pins) == 2 and all(v in declared["torch"].specifier for v in torch_pins)
    assert "-c envs/constraints.txt" in (REPO / "environment.yml").read_text()
    assert (REPO / "scripts" / "install.sh").read_text().count("-c envs/constraints.txt") == 2


def test_the_oldest_pass_runs_the_lower_bounds():
    """Each package of envs/oldest.txt that pyproject.toml declares is pinned at its lower bound, so the
    second pass of scripts/test.sh tests what a fresh install may resolve at worst."""
    declared = _declared()
    oldest = {name: v for name, v in _pins(REPO / "envs" / "oldest.txt").items() if name in declared}
    assert set(oldest) == {"pandas", "transformers"}
    for name, version in oldest.items():
        lower = [s.version for s in declared[name].specifier if s.operator == ">="]
        assert [Version(v) for v in lower] == [Version(version)], (name, str(declared[name].specifier), version)


def test_this_interpreter_runs_declared_versions():
    """Whatever pass runs the suite (the constraints or the oldest), its packages satisfy pyproject.toml."""
    from importlib.metadata import version

    wrong = {name: version(name) for name, req in _declared().items()
             if Version(version(name)).public not in req.specifier}
    assert not wrong, f"installed versions outside pyproject.toml's ranges: {wrong}"


@pytest.mark.xfail(strict=True, reason="Snakemake < 9.17 (snakemake/snakemake#3815; envs/constraints.txt pins 9.15.0): "
                                       "a job selected alone never takes its cores, and its end gives them back")
def test_local_runs_keep_to_their_cores(tmp_path):
    """`--cores 2` runs at most two one-thread jobs at a time. Snakemake 9.15's scheduler returns early when one job
    is ready, before it takes that job's resources, and frees them at its end: each such job adds a core, so after a
    chain of two, four jobs ran at once (the tiny world ran up to four on its two cores). Fixed in 9.17.0, whose
    scheduler always takes them; strict: the bump that fixes it must drop this mark."""
    import subprocess
    import sys

    (tmp_path / "Snakefile").write_text(
        'rule all:\n    input: expand("fan/{i}", i=range(6))\n'
        'rule first:\n    output: "first"\n    shell: "sleep 1; touch {output}"\n'
        'rule second:\n    input: "first"\n    output: "second"\n    shell: "sleep 1; touch {output}"\n'
        'rule fan:\n    input: "second"\n    output: "fan/{i}"\n    threads: 1\n'
        '    shell: "echo 1 $(date +%s.%N) >> log; sleep 1; echo -1 $(date +%s.%N) >> log; touch {output}"\n')
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "-q"], cwd=tmp_path, check=True,
                   capture_output=True, timeout=300)
    lines = (line.split() for line in (tmp_path / "log").read_text().splitlines())
    events = sorted((float(t), int(step)) for step, t in lines)
    running = [sum(step for _, step in events[:i + 1]) for i in range(len(events))]
    assert max(running) <= 2, running
