"""Every paper-scale config validates and builds its DAG in a dry run (no download happens)."""

from pathlib import Path

import pytest
import yaml

from workflow_helpers import REPO, make_workdir, planned_jobs

CONFIGS = sorted((REPO / "configs" / "paper").glob("*.yaml"))


def test_there_are_paper_configs():
    assert CONFIGS, "configs/paper/*.yaml is empty"


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_paper_config_dry_runs(path: Path, tmp_path: Path):
    jobs = planned_jobs(make_workdir(tmp_path, yaml.safe_load(path.read_text())))
    assert jobs.get("all") == 1 and sum(jobs.values()) > 1, jobs
