"""Config files and --config values as Snakemake reads them: a YTE template is refused unread, a YAML error
names the file and the line, and nested --config values keep their YAML types (the workflow profile
profiles/default and mialab.pipeline.config)."""

import os
import subprocess
import sys

import pytest
from workflow_helpers import REPO, foundation_config, job_stats, make_workdir, snakemake

from mialab.pipeline.config import ConfigError, typed_overrides


def test_a_yte_template_config_is_refused_before_snakemake_evaluates_it(tmp_path):
    """Snakemake evaluates a config file's YTE expressions as Python when it loads it; the workflow profile
    (profiles/default) checks the --configfile files first, so the run stops, naming the file, and its
    expression never runs."""
    wd = make_workdir(tmp_path)
    marker = tmp_path / "marker"
    text = (wd / "config.yaml").read_text()
    (wd / "config.yaml").write_text(f"__use_yte__: true\nmarker: ?__import__('pathlib').Path({str(marker)!r}).touch()\n"
                                    + text)
    proc = snakemake(wd, "-n", check=False)
    assert proc.returncode != 0
    assert "config.yaml: __use_yte__ makes Snakemake evaluate the file's expressions as Python" in proc.stdout + proc.stderr
    assert not marker.exists() and not (wd / "results").exists()


@pytest.mark.parametrize("given, broken, line", [("--configfile", "seeds: [0, 1\ndatasets: {}\n", 2),
                                                 ("default", "seeds:\n\t- 0\n", 2)], ids=["syntax", "tab"])
def test_a_yaml_error_in_a_config_file_names_the_file_and_line_before_snakemake_reads_it(tmp_path, given, broken, line):
    """A config file given with --configfile (checked by the workflow profile) or the default config.yaml
    (checked by the Snakefile) that is not YAML: the message names the file and the line (Snakemake's
    loader says "not valid JSON or YAML")."""
    wd = make_workdir(tmp_path)
    (wd / "config.yaml").write_text(broken)
    if given == "--configfile":
        proc = snakemake(wd, "-n", check=False)
        where = f"{wd / 'config.yaml'}:{line}:"
    else:
        proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "-d", str(wd)],
                              capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        where = f"config.yaml:{line}:"
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"{where}" in out and "YAML syntax error" in out, out[-3000:]


def test_nested_config_overrides_keep_their_yaml_types(tmp_path):
    """--config values are read as YAML, nested ones too (Snakemake passes the scalars of a nested value, and
    the items of a list, as strings): the dry run plans with one seed and scoring.max_length 128."""
    wd = make_workdir(tmp_path, foundation_config())
    proc = snakemake(wd, "-n", "splits", "--config", "scoring={max_length: 128, device: cpu}", "seeds=[0]",
                     check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert job_stats(proc.stdout)["build_split"] == len(foundation_config()["datasets"])
    with pytest.raises(ConfigError, match=r"--config scoring=\{max_length: 128: not valid YAML"):
        typed_overrides(["scoring={max_length: 128"])
    assert typed_overrides(["rehearsal=true", "scoring={k: [0.2], device: cpu}", "x="]) == [
        ("rehearsal", True), ("scoring", {"k": [0.2], "device": "cpu"}), ("x", None)]

