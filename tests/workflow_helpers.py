"""Run the real workflow (Snakemake CLI, in a subprocess) in a scratch working directory."""

from __future__ import annotations

import atexit
import copy
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config, validate


REPO = Path(__file__).resolve().parents[1]
JOBS_LINE = re.compile(r"^# jobs: (\d+)(?: \((.*)\))?$", re.M)  # a config header's planned jobs


def validated(cfg: dict) -> dict:
    """``cfg`` checked against the schema with its defaults filled in, as the workflow sees it."""
    validate(cfg, str(REPO / "schemas" / "config.schema.yaml"))
    return cfg


def schema_node(*path: str) -> dict:
    """The config schema's node at ``path``: property names, and ``kind=<k>`` for the branch of a ``models``
    entry of kind ``k``, ``*`` for the schema of every entry of a map (its additionalProperties)."""
    from mialab.data.registry import config_schema

    node = config_schema()
    for step in path:
        if step == "*":
            node = node["additionalProperties"]
        elif step.startswith("kind="):
            node = next(b["then"] for b in node["allOf"] if b["if"]["properties"]["kind"]["const"] == step[5:])
        else:
            node = node["properties"][step]
    return node


def schema_defaults(*path: str) -> dict:
    """``{key: default}`` of the keys the object schema at ``path`` (:func:`schema_node`) gives a default."""
    return {k: copy.deepcopy(v["default"]) for k, v in schema_node(*path)["properties"].items() if "default" in v}


#: where the schema declares an RL model's GRPO settings, and an N-Sampling task
RL_TRAIN = ("models", "*", "kind=rl", "train")
NS_TASK = ("n_sampling", "tasks", "*")


def grpo_settings(**changes):
    """GRPOSettings of an RL model's ``train`` section holding ``changes`` (the schema's defaults filled in)."""
    from mialab.training.grpo import GRPOSettings

    return GRPOSettings.from_config({**schema_defaults(*RL_TRAIN), **changes})


def ns_sampling(**changes):
    """A SamplingConfig as N-Sampling's (``n_sampling.sampling`` and a task's ``max_new_tokens`` at the schema's
    defaults; one completion per prompt) with ``changes``."""
    from mialab.lm.engine import SamplingConfig

    return SamplingConfig(**{"max_new_tokens": schema_defaults(*NS_TASK)["max_new_tokens"],
                             **schema_defaults("n_sampling", "sampling"), **changes})


def ns_task(template: str, **changes):
    """The Task of an ``n_sampling.tasks`` entry holding ``template`` and ``changes`` (the schema's defaults filled in)."""
    from mialab.n_sampling.tasks import Task

    return Task.from_config({**schema_defaults(*NS_TASK), "template": template, **changes})


def default_config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def suite_world_config() -> dict:
    """The suite's world: config.yaml with one seed and smaller method sizes, for the tests that check the workflow's
    outputs rather than the README's AUROCs (the fixture ``suite_world``, tests/conftest.py).

    Every model that pretraining or SFT builds is config.yaml's own (same keys, so the same weights), and seed 0's
    splits are the README world's seed 0: its per-seed AUROCs of the passive baselines are the README world's.
    What shrinks is bounded by no test beyond the control's chance interval: the seeds (1 of 2), MIMIR's masked LM
    (50 of 100 steps), the quantile regressor's epochs (4 of 10). The neighbours' number, N-Sampling's, CalibDCD's
    and LaRA's sizes are config.yaml's. The README's seeds are read by tests/test_tiny_world.py's AUROC test, which
    scores them with the passive baselines on these models."""
    cfg = default_config()
    cfg["seeds"] = [0]
    cfg["models"]["mimir_mlm"]["train"]["steps"] = 50
    cfg["scoring"]["quantile"]["epochs"] = 4
    return cfg


FOUNDATION_KEYS = ("seeds", "datasets", "tokenizer", "models", "scoring", "evaluation", "launch")


def foundation_config() -> dict:
    """The default config reduced to the foundation: its datasets, the base, control and sft
    models and the scoring methods that read no other model (method sections left out: not the masked LM of
    the neighbourhood and quantile attacks), for DAG tests of the spine."""
    cfg = {k: v for k, v in default_config().items() if k in FOUNDATION_KEYS}
    cfg["datasets"] = {k: cfg["datasets"][k] for k in ("wikimia", "aime")}
    cfg["models"] = {k: cfg["models"][k] for k in ("base", "control", "sft")}
    cfg["scoring"]["methods"] = [m for m in cfg["scoring"]["methods"] if m not in ("neighbourhood", "quantile")]
    return cfg


def make_workdir(path: Path, config: dict | None = None) -> Path:
    """A working directory with ``resources`` linked in and ``config.yaml`` written."""
    path.mkdir(parents=True, exist_ok=True)
    if not (path / "resources").exists():
        (path / "resources").symlink_to(REPO / "resources")
    write_config(path, config if config is not None else default_config())
    return path


def write_config(workdir: Path, config: dict) -> None:
    (workdir / "config.yaml").write_text(yaml.safe_dump(copy.deepcopy(config), sort_keys=False))


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: int = 1800) -> subprocess.CompletedProcess:
    """``snakemake -s REPO/Snakefile -d workdir --configfile workdir/config.yaml ARGS``."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
           "--configfile", str(workdir / "config.yaml"), *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def planned_jobs(workdir: Path, *args: str) -> dict[str, int]:
    """Jobs a dry run would execute, per rule (the 'Job stats' table)."""
    proc = snakemake(workdir, "-n", *args)
    return job_stats(proc.stdout + proc.stderr)


def job_stats(out: str) -> dict[str, int]:
    """Jobs per rule of a dry run's output (its first 'Job stats' table; {} when nothing is to be done)."""
    if "Nothing to be done" in out:
        return {}
    table = out.split("Job stats:", 1)[1]
    jobs = {}
    for line in table.splitlines()[3:]:
        m = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if not m:
            break
        if m.group(1) != "total":
            jobs[m.group(1)] = int(m.group(2))
    return jobs


def planned_wildcards(out: str, name: str) -> set[str]:
    """Values of wildcard ``name`` over the jobs of a dry run's output."""
    return {m.group(1) for m in re.finditer(rf"^\s*wildcards: .*?\b{name}=([^,\s]+)", out, re.M)}


def planned_outputs(out: str) -> list[tuple[str, dict[str, str], list[str]]]:
    """(rule, wildcards, output files) of each job of a dry run's output."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?(?:rule|checkpoint) \w+:\n)", out):
        head = re.match(r"(?:local)?(?:rule|checkpoint) (\w+):\n", block)
        if not head:
            continue
        outputs = re.search(r"^\s+output: (.*)$", block, re.M)
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        jobs.append((head.group(1), dict(w.split("=", 1) for w in wildcards.group(1).split(", ")) if wildcards else {},
                     outputs.group(1).split(", ") if outputs else []))
    return jobs


def repo_copy(dest: Path) -> Path:
    """The checkout's files (tracked, and untracked but not ignored) copied to ``dest``.

    Commands run there exactly as a user runs them from the repository root, without touching the
    checkout's results/ or .snakemake/.
    """
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src = REPO / name
        if src.is_file():  # a tracked file deleted in the working tree is left out
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@functools.lru_cache(maxsize=None)
def checkout_copy() -> Path:
    """One :func:`repo_copy` per test process (removed at exit), where documented commands run; its paper
    configs name the stand-in hub's files (:func:`with_stand_in_hashes`)."""
    root = Path(tempfile.mkdtemp(prefix="mialab-checkout-"))
    atexit.register(shutil.rmtree, root, True)
    return with_stand_in_hashes(repo_copy(root))


def dry_run_as_documented(command: str) -> subprocess.CompletedProcess:
    """:func:`run_documented` in :func:`checkout_copy`, once per command line, site settings (the environment's
    ``MIALAB_SLURM_*``, which a test may set) and test process, after its sources were fetched there from the
    stand-in hub (:func:`fetch_stand_ins`)."""
    site = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("MIALAB_SLURM_")))
    return _dry_run(command, site)


@functools.lru_cache(maxsize=None)
def _dry_run(command: str, site: tuple[tuple[str, str], ...]) -> subprocess.CompletedProcess:
    """:func:`dry_run_as_documented`'s run; ``site`` keys the cache (the run reads it from the environment)."""
    fetched = fetch_stand_ins(checkout_copy(), command)
    proc = run_documented(checkout_copy(), command)
    if fetched is not None and fetched.returncode:   # shown where the dry run fails too
        proc.stderr += f"\n(the prefetch run before it failed:\n{(fetched.stdout + fetched.stderr)[-3000:]})"
    return proc


PAPER_CONFIGS = sorted((REPO / "configs" / "paper").glob("*.yaml"))
#: The tests that dry-run a paper config's command share one test process (a pytest-xdist group): each config is
#: fetched from the stand-in hub once and each command line planned once (:func:`dry_run_as_documented`'s cache).
#: Marked ``plans`` too: the second pass, on the oldest versions (scripts/test.sh), runs the code, not the paper plans.
def PAPER_PLANS(test):
    return pytest.mark.plans(pytest.mark.xdist_group("paper_plans")(test))


def run_line(path: Path) -> str:
    """A paper config's documented command: its header's ``# Run:`` line."""
    (line,) = [ln for ln in path.read_text().splitlines() if ln.startswith("# Run: ")]
    return line.removeprefix("# Run: ")


@functools.lru_cache(maxsize=None)
def stand_in_hub() -> tuple[dict[str, str], dict[str, str]]:
    """One local hub and file server per test process (tests/fake_hub.py) serving stand-ins, with the real
    columns, of every source the paper configs name, and the caches a run fetches them into (removed at exit):
    (the environment that points a run there, each file source's sha256 -> its stand-in's)."""
    from fake_hub import serve, stand_in_sources

    root = Path(tempfile.mkdtemp(prefix="mialab-hub-"))
    atexit.register(shutil.rmtree, root, True)
    hashes = stand_in_sources(root / "hub", [validated(yaml.safe_load(p.read_text())) for p in PAPER_CONFIGS])
    server, _ = serve(root / "hub")
    atexit.register(server.shutdown)
    address = f"http://127.0.0.1:{server.server_port}"
    return {"HF_ENDPOINT": address, "MIALAB_GITHUB_RAW": f"{address}/raw", "HF_HOME": str(root / "hf"),
            "MIALAB_DATA_CACHE": str(root / "data")}, hashes


def with_stand_in_hashes(root: Path) -> Path:
    """``root``'s paper configs with each file source's sha256 replaced by its stand-in's (the stand-in hub serves
    other bytes than the real file); nothing else changes."""
    _, hashes = stand_in_hub()
    for path in (root / "configs" / "paper").glob("*.yaml"):
        text = path.read_text()
        for real, stand_in in hashes.items():
            text = text.replace(real, stand_in)
        path.write_text(text)
    return root


_FETCHED: set[tuple[Path, tuple[str, ...]]] = set()


def fetch_stand_ins(root: Path, command: str) -> subprocess.CompletedProcess | None:
    """Run ``snakemake prefetch`` for the config files of ``command`` in ``root`` against the stand-in hub (once per
    root and config files): the lock file beside the first, the sources in the caches every run in ``root`` reads
    (:func:`run_documented`). A command of a config without hub or file sources fetches nothing; a failed prefetch
    (a command meant to fail, e.g. two complete configs) is returned, not raised."""
    from mialab.pipeline.lock import file_sources, hub_sources

    files = config_files(command)
    config = merged_config(*files, root=root)
    if (root, files) in _FETCHED or not (hub_sources(config) or file_sources(config)):
        return None
    proc = run_documented(root, shlex.join(["snakemake", "prefetch", "--cores", "1", "--configfile", *files]), dry=False)
    if proc.returncode == 0:
        _FETCHED.add((root, files))
    return proc


def run_documented(root: Path, command: str, timeout: int = 600, *, dry: bool = True) -> subprocess.CompletedProcess:
    """A documented ``snakemake ...`` command line run as written in ``root``, as a dry run (``-n`` added
    after the word ``snakemake`` unless the line is one already, or ``dry`` is false), with the venv's tools on
    PATH and the stand-in hub's caches (:func:`stand_in_hub`: where :func:`fetch_stand_ins` fetched)."""
    argv = shlex.split(command)
    assert argv[0] == "snakemake", command
    if dry and not {"-n", "--dry-run", "--dryrun"} & set(argv):
        argv.insert(1, "-n")
    env = {**os.environ, **stand_in_hub()[0], "HF_HUB_OFFLINE": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=timeout, env=env)


def config_files(command: str) -> tuple[str, ...]:
    """The config files a ``snakemake`` command line runs with: its --configfile files in order, else config.yaml
    (the Snakefile's rule)."""
    argv = shlex.split(command)
    files: list[str] = []
    if "--configfile" in argv:
        for arg in argv[argv.index("--configfile") + 1:]:
            if arg.startswith("-"):
                break
            files.append(arg)
    return tuple(files) or ("config.yaml",)


def command_config(root: Path, command: str) -> dict:
    """The config a ``snakemake`` command line runs with (:func:`config_files` merged in order)."""
    return merged_config(*config_files(command), root=root)


def merged_config(*files: str, root: Path = REPO) -> dict:
    """The config that ``--configfile`` ``files`` give, as one complete config (a workdir's config.yaml): each file
    merged over the ones before as Snakemake merges them (deep), without the overlays' ``overlay_of``, e.g.
    ``merged_config("config.yaml", "configs/tiny_adra.yaml")``."""
    config: dict = {}
    for name in files:
        update_config(config, yaml.safe_load((root / name).read_text()))
    config.pop("overlay_of", None)
    return config


def jobs_line(path: Path) -> tuple[int, dict[str, int]] | None:
    """The total and per-rule counts of a config file's ``# jobs:`` line, or None."""
    m = JOBS_LINE.search(path.read_text())
    if not m:
        return None
    per_rule = {}
    for item in filter(None, (m.group(2) or "").split(",")):
        rule, n = item.split()
        per_rule[rule] = int(n)
    return int(m.group(1)), per_rule


def check_command(command: str, expected: tuple[int, dict[str, int]] | None = None) -> dict[str, int]:
    """Dry-run a documented snakemake command line as written; check it plans its own experiment only
    (and ``expected`` jobs, when given). Returns the planned jobs per rule."""
    config = command_config(checkout_copy(), command)
    if "datasets" not in config:   # a sweep's config (workflow/sweep.smk): its runs are of its base experiment
        config = {k: v for base in config["base"] for k, v in yaml.safe_load((REPO / base).read_text()).items()}
    proc = dry_run_as_documented(command)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{command!r} failed ({proc.returncode}):\n{out[-4000:]}"
    for name, configured in (("model", config["models"]), ("dataset", config["datasets"])):
        foreign = planned_wildcards(out, name) - set(configured)
        assert not foreign, f"{command!r} plans jobs of {name}s its config does not name: {sorted(foreign)}"
    jobs = job_stats(out)
    if expected is not None:
        total, per_rule = expected
        assert sum(jobs.values()) == total, f"{command!r}: {sum(jobs.values())} jobs planned, the header says {total}: {jobs}"
        assert {r: jobs.get(r, 0) for r in per_rule} == per_rule, f"{command!r}: {jobs}"
    return jobs


def slurm_state(job: str, env: dict, timeout: float = 60) -> str:
    """The state squeue gives SLURM job ``job`` (``PENDING``, ``RUNNING``, ...; empty once it left the queue),
    asked again while squeue fails (a busy slurmctld does not answer)."""
    deadline = time.monotonic() + timeout
    while True:
        proc = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True)
        if proc.returncode == 0:
            return proc.stdout.strip()
        assert time.monotonic() < deadline, f"squeue failed ({proc.returncode}): {proc.stderr.strip()}"
        time.sleep(1)


def requeue(job: str, env: dict, timeout: float = 120) -> None:
    """`scontrol requeue` a running SLURM job; returns once it is pending again (its run stopped) and made eligible
    at once (a requeued job otherwise waits 2 minutes before it starts again)."""
    subprocess.run(["scontrol", "requeue", job], env=env, check=True)
    deadline = time.monotonic() + timeout
    while slurm_state(job, env) != "PENDING":
        assert time.monotonic() < deadline, f"SLURM job {job} not pending {timeout:.0f} s after its requeue"
        time.sleep(0.5)
    # slurmd refuses a credential issued in the second it revoked the run's own ("Job credential revoked": the
    # new run fails at once), which is why SLURM delays a requeued job; two seconds clear that second.
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"jobid={job}", "StartTime=now"], env=env, check=True)
