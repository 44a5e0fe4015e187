"""Every command line the documentation shows runs as written from the repository root.

Commands come from README.md and docs/*.md (```bash blocks and inline code spans) and from the
comments of the config files (config.yaml, configs/**/*.yaml, profiles/*/config.yaml: comment lines
that start with ``snakemake``, ``Run: snakemake`` or ``Usage: snakemake``). A ``snakemake`` command
runs as a dry run in a copy of the checkout, with the profile it names; it must succeed, and plan
jobs of its own experiment only (every model and dataset wildcard one of the config it names).
A config file whose header gives a ``# jobs: N (rule n, ...)`` line plans exactly that many jobs with
its command. Other commands (``bash scripts/test.sh``, ``pytest ...``) are not run: the scripts,
modules and test files they name must exist.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from workflow_helpers import PAPER_PLANS, REPO, check_command, dry_run_as_documented, jobs_line

from mialab.pipeline.config import ConfigError, check_config_files, check_sections

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CONFIGS = [REPO / "config.yaml", *sorted((REPO / "configs").rglob("*.yaml")),
           *sorted((REPO / "profiles").glob("*/config.yaml"))]
INLINE_COMMAND = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(?:snakemake|bash|python|pytest)\b")  # a code span that is a command


def markdown_commands(path: Path) -> list[tuple[str, str]]:
    """(where, command) of each line of a ```bash block and each inline code span that is a command."""
    found, text = [], path.read_text()
    fences = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
    for block in fences.finditer(text):
        if block.group(1) in ("bash", "sh", "shell", ""):
            first = text[:block.start(2)].count("\n") + 1
            for i, line in enumerate(block.group(2).splitlines()):
                line = re.sub(r"\s+#\s.*$", "", line).strip()
                if line and not line.startswith("#"):
                    found.append((f"{path.relative_to(REPO)}:{first + i}", line))
    prose = fences.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for span in re.finditer(r"`([^`]+)`", prose):
        command = " ".join(span.group(1).split())
        if INLINE_COMMAND.match(command):
            found.append((f"{path.relative_to(REPO)}:{prose[:span.start()].count(chr(10)) + 1}", command))
    return found


def config_commands(path: Path) -> list[tuple[str, str]]:
    """(where, command) of each comment line of a config file that shows a snakemake command."""
    found = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = re.match(r"^\s*#\s*(?:(?:Run|Usage):\s*)?(snakemake\b.*)$", line)
        if m:
            found.append((f"{path.relative_to(REPO)}:{i}", m.group(1).strip()))
    return found


def documented() -> list[tuple[str, str]]:
    return [c for p in DOCS for c in markdown_commands(p)] + [c for p in CONFIGS for c in config_commands(p)]


COMMANDS = documented()
SNAKEMAKE = [(w, c) for w, c in COMMANDS if c.startswith("snakemake")]
OTHERS = [(w, c) for w, c in COMMANDS if not c.startswith("snakemake")]


def test_commands_are_found():
    """The extraction sees the commands this test exists for (a format change must not empty it)."""
    wheres = {w.split(":")[0] for w, _ in SNAKEMAKE}
    assert {"README.md", "docs/slurm.md", "configs/tiny_adra.yaml", "configs/tiny_recon.yaml",
            "configs/tiny_veilprobe.yaml"} <= wheres
    assert all(f"configs/paper/{p.name}" in wheres for p in (REPO / "configs" / "paper").glob("*.yaml"))
    assert any(c.startswith("bash scripts/") for _, c in OTHERS)


def check_named_files(where: str, command: str) -> None:
    """The scripts, modules and test files a (not run) command names exist; only a shell builtin may name none."""
    words = [w.strip("\"'()$") for w in command.split()]
    named = [w for w in words if w.endswith((".sh", ".py"))]
    named += [words[i + 1].replace(".", "/") + ".py" for i, w in enumerate(words[:-1]) if w == "-m"]
    named += [words[i + 1] for i, w in enumerate(words[:-1]) if w == "bash" and not words[i + 1].endswith(".sh")]
    assert named or words[0] in ("export", "cd"), f"{where}: {command!r} names no script, module or test file"
    missing = [n for n in named if not (REPO / n).is_file()]
    assert not missing, f"{where}: {command!r} names files that do not exist: {missing}"


@PAPER_PLANS
@pytest.mark.parametrize("where, command", SNAKEMAKE, ids=[w for w, _ in SNAKEMAKE])
def test_snakemake_command_runs_as_written(where: str, command: str):
    snakemake, *piped = command.split("|")  # what reads the dry run's output is not run, only checked
    for part in piped:
        check_named_files(where, part.strip())
    # a config file's command is held to its `# jobs:` line (a doc page's command to none)
    path = REPO / where.rsplit(":", 1)[0]
    expected = jobs_line(path) if path.suffix == ".yaml" else None
    if expected is not None:
        assert str(path.relative_to(REPO)) in shlex.split(snakemake), f"{where}: the command does not name {path.name}"
    check_command(snakemake.strip(), expected)


@pytest.mark.parametrize("where, command", OTHERS, ids=[w for w, _ in OTHERS])
def test_other_commands_name_existing_files(where: str, command: str):
    check_named_files(where, command)


def test_every_config_with_a_command_states_its_jobs():
    """Each experiment config (paper configs, overlays) lists the jobs its command plans."""
    for path in [*(REPO / "configs" / f"tiny_{name}.yaml" for name in ("adra", "recon", "veilprobe")),
                 *sorted((REPO / "configs" / "paper").glob("*.yaml"))]:
        assert jobs_line(path), f"{path.relative_to(REPO)}: no '# jobs: N' line in its header"


# --- the configuration rules README.md states ("Configuration") ------------------------------------

@pytest.mark.parametrize("command, message", [
    ("snakemake adra --profile profiles/local --configfile configs/tiny_adra.yaml",
     "an overlay of config.yaml (overlay_of), which is not given before it; name both: "
     "snakemake -n adra --profile profiles/local --configfile config.yaml configs/tiny_adra.yaml"),
    ("snakemake --configfile config.yaml configs/paper/lara_rl_models.yaml",
     "configs/paper/lara_rl_models.yaml: a complete config (no overlay_of) cannot be merged after config.yaml"),
])
def test_configs_are_never_merged_by_surprise(command: str, message: str):
    """The plan refuses them; a command the error suggests runs as written (the user's own, its base added:
    the dry run the test ran, its target and profile kept) and plans what the overlay's header says."""
    proc = dry_run_as_documented(command)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and message in out, out[-6000:]
    for suggested in re.findall(r"name both: (snakemake .*)$", out, re.M):
        check_command(suggested, jobs_line(REPO / "configs" / "tiny_adra.yaml"))


def test_config_files_order(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, text in {"base.yaml": "seeds: [0]\n", "other.yaml": "seeds: [1]\n",
                       "over.yaml": "overlay_of: base.yaml\nseeds: [2]\n"}.items():
        (tmp_path / name).write_text(text)
    check_config_files([tmp_path / "base.yaml", tmp_path / "over.yaml"])  # absolute, as Snakemake passes them
    check_config_files(["base.yaml"])
    with pytest.raises(ConfigError, match="over.yaml: an overlay of base.yaml .* snakemake --configfile base.yaml over.yaml"):
        check_config_files(["over.yaml"])
    with pytest.raises(ConfigError, match="other.yaml: a complete config"):
        check_config_files(["base.yaml", "other.yaml"])
    # the suggested command is the user's (targets, profile, options kept), the base before the overlay
    for argv, suggested in [
        (["all", "--profile", "profiles/local", "--configfile", "over.yaml"],
         "snakemake all --profile profiles/local --configfile base.yaml over.yaml"),
        (["--configfile=over.yaml", "-n"], "snakemake --configfile base.yaml over.yaml -n"),
        (["--configfile", "./over.yaml", "--config", "seeds=[0]"],
         "snakemake --configfile base.yaml ./over.yaml --config 'seeds=[0]'"),
        (["--configfile", "other.yaml", "over.yaml"], None),  # adding base.yaml would merge two experiments
    ]:
        with pytest.raises(ConfigError) as err:
            check_config_files([w.rpartition("=")[2] for w in argv if w.endswith(".yaml")], argv)
        assert str(err.value).endswith(f"name both: {suggested}" if suggested else "give it first, then its overlays")


def test_a_section_without_the_section_it_builds_on_fails():
    config = yaml.safe_load((REPO / "configs" / "paper" / "adra_aime.yaml").read_text())
    del config["n_sampling"]
    with pytest.raises(ConfigError, match="adra: needs a 'n_sampling' section"):
        check_sections(config)
