"""Job accounting for workflow runs on SLURM: what every job cost, per job, stage and dataset.

snakemake-executor-plugin-slurm (2.8) submits each job with the run's UUID as job name, the
comment ``rule_<rule>_wildcards_<values joined by _>`` (``rule_<rule>`` without wildcards) and
the log ``.snakemake/slurm_logs/rule_<rule>/<values>/<jobid>.log``; the log also carries
Snakemake's own ``wildcards: name=value, ...`` line. ``sacct`` (from slurmdbd) gives one row
per job allocation followed by its steps (``.batch``, ``.extern``, ``.0``): state, elapsed time,
allocated CPUs/GPUs/memory live on the allocation, the peak memory (``MaxRSS``) on the steps.

The per-job table joins both sources: the rule comes from the stored comment, or from the log
folder when the cluster does not store comments (``AccountingStoreFlags=job_comment``); named
wildcard columns (``dataset``, ``model``, ``seed``, ...) come from the logs. GPU-hours are
elapsed time x allocated GPUs, whatever the job did with them.

:func:`estimate_gpu_hours` prices a dry run before it is launched: planned jobs per rule x the
rule's mean wall time in Snakemake benchmark files of earlier runs x the GPUs it asks for.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from pathlib import Path

import pandas as pd

from mialab.io import write_parquet, write_text

SACCT_FIELDS = (
    "JobID", "JobName", "State", "ElapsedRaw", "AllocCPUS", "AllocTRES",
    "MaxRSS", "Comment", "Submit", "Start", "End", "WorkDir",
)  # fmt: skip

#: Columns of the per-job table before the named wildcard columns.
JOB_COLUMNS = (
    "job_id", "run_id", "rule", "wildcards", "attempt", "state", "submit", "start", "end",
    "elapsed_s", "alloc_cpus", "alloc_gpus", "alloc_mem_mb", "max_rss_mb", "cpu_hours", "gpu_hours",
)  # fmt: skip

_COMMENT_RE = re.compile(r"^(?:rule|group)_(?P<rule>.+?)(?:_wildcards_(?P<wildcards>.*))?$")
_SIZE_RE = re.compile(r"^(?P<value>[0-9.]+)(?P<unit>[KMGTP]?)$")
_UNIT_EXP = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
_NO_TIME = ("", "Unknown", "None")
_LOG_WILDCARDS_RE = re.compile(r"^\s+wildcards: (?P<pairs>.+)$", re.MULTILINE)


def sacct_command(since: str) -> list[str]:
    """The ``sacct`` call listing every job (and step) since ``since``, requeued runs included.

    Without ``-S`` sacct shows only jobs since midnight; ``since`` takes any sacct time
    (``2026-01-31T00:00``, ``now-30days``).
    """
    return [
        "sacct", "--parsable2", "--noheader", "--duplicates",
        "-S", since, "-E", "now", f"--format={','.join(SACCT_FIELDS)}",
    ]  # fmt: skip


def run_sacct(since: str) -> str:
    """Run :func:`sacct_command`; a failing sacct raises with its stderr."""
    proc = subprocess.run(sacct_command(since), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"sacct failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def size_mb(text: str) -> float:
    """A SLURM size (``211360K``, ``4000M``, ``1.5G``; bare numbers are bytes) in MiB."""
    m = _SIZE_RE.match(text.strip())
    if m is None:
        raise ValueError(f"not a SLURM size: {text!r}")
    return float(m["value"]) * 1024.0 ** _UNIT_EXP[m["unit"]] / 1024.0**2


def parse_tres(text: str) -> dict[str, str]:
    """``AllocTRES`` (``cpu=1,gres/gpu=8,mem=2000M``) as a mapping; empty text gives ``{}``."""
    return dict(item.split("=", 1) for item in text.split(",") if item)


def parse_comment(comment: str) -> tuple[str, str] | None:
    """``(rule, wildcard values)`` from the plugin's job comment, ``None`` for other comments."""
    m = _COMMENT_RE.match(comment)
    if m is None:
        return None
    return m["rule"], m["wildcards"] or ""


def _timestamp(text: str) -> pd.Timestamp:
    """A sacct time; jobs not yet started or ended (``Unknown``) give NaT."""
    return pd.NaT if text in _NO_TIME else pd.Timestamp(text)


def parse_sacct(text: str) -> pd.DataFrame:
    """One row per job allocation from ``sacct --parsable2 --noheader`` text (:data:`SACCT_FIELDS`).

    Steps follow their allocation (with ``--duplicates`` a requeued job appears once per run,
    each run with its own steps), so rows are grouped in order; ``max_rss_mb`` is the largest
    ``MaxRSS`` over the steps (0 when no step ran). Columns: job_id, run_id, state, elapsed_s,
    alloc_cpus, alloc_gpus, alloc_mem_mb, max_rss_mb, comment, submit, start, end, workdir.
    """
    rows: list[dict] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) != len(SACCT_FIELDS):
            raise ValueError(f"sacct line has {len(values)} fields, expected {len(SACCT_FIELDS)}: {line!r}")
        f = dict(zip(SACCT_FIELDS, values))
        rss = size_mb(f["MaxRSS"]) if f["MaxRSS"] else 0.0
        if "." in f["JobID"]:
            parent = f["JobID"].split(".", 1)[0]
            if not rows or rows[-1]["job_id"] != parent:
                raise ValueError(f"sacct step {f['JobID']} does not follow its allocation")
            rows[-1]["max_rss_mb"] = max(rows[-1]["max_rss_mb"], rss)
            continue
        tres = parse_tres(f["AllocTRES"])
        rows.append(
            {
                "job_id": f["JobID"],
                "run_id": f["JobName"],
                "state": f["State"].split(" ", 1)[0],
                "elapsed_s": int(f["ElapsedRaw"]),
                "alloc_cpus": int(f["AllocCPUS"]),
                "alloc_gpus": int(tres.get("gres/gpu", 0)),
                "alloc_mem_mb": size_mb(tres["mem"]) if "mem" in tres else 0.0,
                "max_rss_mb": rss,
                "comment": f["Comment"],
                "submit": _timestamp(f["Submit"]),
                "start": _timestamp(f["Start"]),
                "end": _timestamp(f["End"]),
                "workdir": f["WorkDir"],
            }
        )
    columns = [
        "job_id", "run_id", "state", "elapsed_s", "alloc_cpus", "alloc_gpus", "alloc_mem_mb",
        "max_rss_mb", "comment", "submit", "start", "end", "workdir",
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def parse_log_wildcards(text: str) -> dict[str, str]:
    """Named wildcards from the first ``wildcards: a=1, b=x`` line of a Snakemake job log."""
    m = _LOG_WILDCARDS_RE.search(text)
    if m is None:
        return {}
    return dict(pair.split("=", 1) for pair in m["pairs"].split(", "))


def read_job_logs(log_dir: str | os.PathLike) -> pd.DataFrame:
    """Rule, wildcard values and named wildcards of every job log under the plugin's log folder.

    Layout: ``rule_<rule>/<values>/<jobid>.log`` (``rule_<rule>/<jobid>.log`` without wildcards
    and for array tasks, named ``<arrayid>_<task>.log``). Columns: job_id, rule, wildcards
    (values joined by ``_`` as the plugin does), named (dict name -> value, ``{}`` if unknown).
    """
    log_dir = Path(log_dir)
    rows = []
    for path in sorted(log_dir.glob("*/**/*.log")):
        top, *middle, _ = path.relative_to(log_dir).parts
        parsed = parse_comment(top)
        if parsed is None or len(middle) > 1:
            continue
        named = parse_log_wildcards(path.read_text(errors="replace"))
        values = "_".join(v.replace("/", "_") for v in named.values()) if named else "".join(middle)
        rows.append({"job_id": path.stem, "rule": parsed[0], "wildcards": values, "named": named})
    return pd.DataFrame(rows, columns=["job_id", "rule", "wildcards", "named"])


def snakemake_jobs(allocations: pd.DataFrame, logs: pd.DataFrame, workdir: str | os.PathLike | None) -> pd.DataFrame:
    """The per-job table (:data:`JOB_COLUMNS` + one column per wildcard name) of a workflow's jobs.

    Keeps the allocations submitted by the Snakemake plugin for ``workdir`` (stored comment and
    working directory) or with a log in the workflow's log folder (``logs``, from
    :func:`read_job_logs`); other users' and other workflows' jobs are dropped. Logs win over
    comments: they name the wildcards, and the tasks of an array job share one comment.
    ``attempt`` numbers the submissions of one rule + wildcards in one run by submit time
    (Snakemake retries and SLURM requeues both count).
    """
    parsed = allocations["comment"].map(parse_comment)
    if workdir is not None:
        parsed = parsed.where(allocations["workdir"].map(_same_path(workdir)), None)
    jobs = allocations.assign(
        rule=parsed.map(lambda p: p[0] if p else None),
        wildcards=parsed.map(lambda p: p[1] if p else None),
    ).merge(logs, on="job_id", how="left", suffixes=("", "_log"), validate="many_to_one")
    jobs["rule"] = jobs["rule_log"].combine_first(jobs["rule"])
    jobs["wildcards"] = jobs["wildcards_log"].combine_first(jobs["wildcards"])
    jobs = jobs[jobs["rule"].notna()].copy()

    named = [wc if isinstance(wc, dict) else {} for wc in jobs["named"]]
    names = list(dict.fromkeys(name for wc in named for name in wc))
    clash = set(names) & (set(JOB_COLUMNS) | set(jobs.columns))
    if clash:
        raise ValueError(f"wildcard names {sorted(clash)} clash with accounting columns")
    for name in names:
        jobs[name] = [wc.get(name) for wc in named]

    jobs["cpu_hours"] = jobs["elapsed_s"] * jobs["alloc_cpus"] / 3600.0
    jobs["gpu_hours"] = jobs["elapsed_s"] * jobs["alloc_gpus"] / 3600.0
    jobs = jobs.sort_values(["submit", "job_id"], kind="stable")
    jobs["attempt"] = jobs.groupby(["run_id", "rule", "wildcards"]).cumcount() + 1
    return jobs[list(JOB_COLUMNS) + names].reset_index(drop=True)


def _same_path(workdir: str | os.PathLike):
    """Predicate: does a sacct ``WorkDir`` name the same folder as ``workdir``?"""
    target = Path(workdir).resolve()
    return lambda wd: bool(wd) and Path(wd).resolve() == target


def totals(jobs: pd.DataFrame, by: str) -> pd.DataFrame:
    """Cost of ``jobs`` grouped by column ``by`` (e.g. ``rule`` = stage, ``dataset``).

    Jobs without a value for ``by`` (no such wildcard) are grouped under ``(none)``.
    Columns: by, jobs, not_completed (state other than COMPLETED), elapsed_s, cpu_hours, gpu_hours,
    max_rss_mb (largest over the group), sorted by GPU- then CPU-hours, largest first.
    """
    keys = jobs[by].fillna("(none)") if by in jobs else pd.Series("(none)", index=jobs.index)
    grouped = jobs.assign(**{by: keys, "not_completed": jobs["state"] != "COMPLETED"}).groupby(by, sort=False)
    out = grouped.agg(
        jobs=("job_id", "size"),
        not_completed=("not_completed", "sum"),
        elapsed_s=("elapsed_s", "sum"),
        cpu_hours=("cpu_hours", "sum"),
        gpu_hours=("gpu_hours", "sum"),
        max_rss_mb=("max_rss_mb", "max"),
    ).reset_index()
    return out.sort_values(["gpu_hours", "cpu_hours", by], ascending=[False, False, True]).reset_index(drop=True)


def markdown_table(df: pd.DataFrame) -> str:
    """``df`` as a markdown table: floats with 3 decimals, times to the second, missing as ``-``."""

    def cell(v: object) -> str:
        if v is None or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
            return "-"
        if isinstance(v, float):
            return f"{v:.3f}"
        if isinstance(v, pd.Timestamp):
            return v.strftime("%Y-%m-%d %H:%M:%S")
        return str(v)

    return df.map(cell).to_markdown(index=False, disable_numparse=True)


def markdown_report(jobs: pd.DataFrame) -> str:
    """Markdown: overall GPU-/CPU-hours, totals per stage and per dataset, then every job."""
    parts = [
        "# SLURM job accounting\n",
        f"{len(jobs)} jobs, {jobs['gpu_hours'].sum():.3f} GPU-hours, {jobs['cpu_hours'].sum():.3f} CPU-hours, "
        f"{int((jobs['state'] != 'COMPLETED').sum())} not completed.\n",
        "## Per stage (rule)\n",
        markdown_table(totals(jobs, "rule")) + "\n",
        "## Per dataset\n",
        markdown_table(totals(jobs, "dataset")) + "\n",
        "## Jobs\n",
        markdown_table(jobs.drop(columns=["run_id"])) + "\n",
    ]
    return "\n".join(parts)


def write_accounting(jobs: pd.DataFrame, out_dir: str | os.PathLike) -> None:
    """Write ``jobs.parquet``, ``stages.parquet``, ``datasets.parquet`` and ``jobs.md`` atomically."""
    out_dir = Path(out_dir)
    write_parquet(jobs, out_dir / "jobs.parquet")
    write_parquet(totals(jobs, "rule"), out_dir / "stages.parquet")
    write_parquet(totals(jobs, "dataset"), out_dir / "datasets.parquet")
    write_text(markdown_report(jobs), out_dir / "jobs.md")


# --- dry-run estimate -----------------------------------------------------------------------

_DRY_RUN_JOB_RE = re.compile(r"^(?:local)?rule (?P<rule>\w+):$")
_DRY_RUN_GPU_RE = re.compile(r"(?:^|, )gpu=(?P<gpus>\d+)(?:,|$)")


def parse_dry_run(text: str) -> pd.DataFrame:
    """Planned jobs from ``snakemake --dry-run`` output: one row per job, columns rule and gpus.

    Each job block starts with ``rule <name>:`` (``localrule`` for local ones); its
    ``resources:`` line holds ``gpu=<n>`` for GPU jobs (0 when absent).
    """
    rows: list[dict] = []
    for line in text.splitlines():
        m = _DRY_RUN_JOB_RE.match(line.strip())
        if m is not None:
            rows.append({"rule": m["rule"], "gpus": 0})
        elif rows and line.strip().startswith("resources:"):
            g = _DRY_RUN_GPU_RE.search(line.strip().removeprefix("resources:").strip())
            rows[-1]["gpus"] = int(g["gpus"]) if g else 0
    return pd.DataFrame(rows, columns=["rule", "gpus"])


def benchmark_mean_seconds(root: str | os.PathLike) -> pd.Series:
    """Mean wall time (column ``s``) per rule over Snakemake benchmark files ``<root>/<rule>/**/*.tsv``."""
    root = Path(root)
    per_rule: dict[str, list[float]] = {}
    for path in sorted(root.glob("*/**/*.tsv")):
        seconds = pd.read_csv(path, sep="\t")["s"].astype(float)
        if not seconds.map(math.isfinite).all():
            raise ValueError(f"non-finite wall time in benchmark file {path}")
        per_rule.setdefault(path.relative_to(root).parts[0], []).extend(seconds)
    return pd.Series({rule: sum(v) / len(v) for rule, v in per_rule.items() if v}, name="mean_s", dtype=float)


def estimate_gpu_hours(planned: pd.DataFrame, mean_s: pd.Series) -> pd.DataFrame:
    """Expected GPU-hours per stage: planned jobs x mean benchmark seconds x GPUs per job.

    Only GPU rules need a benchmark; a planned GPU rule without one is an error naming it.
    Columns: rule, jobs, gpus (per job), mean_s, gpu_hours; largest first.
    """
    gpu = planned[planned["gpus"] > 0]
    missing = sorted(set(gpu["rule"]) - set(mean_s.index))
    if missing:
        raise ValueError(f"no benchmark files for GPU rules {missing}; known: {sorted(mean_s.index)}")
    out = gpu.groupby(["rule", "gpus"]).size().rename("jobs").reset_index()
    out["mean_s"] = out["rule"].map(mean_s).astype(float)
    out["gpu_hours"] = out["jobs"] * out["mean_s"] * out["gpus"] / 3600.0
    out = out[["rule", "jobs", "gpus", "mean_s", "gpu_hours"]]
    return out.sort_values(["gpu_hours", "rule"], ascending=[False, True]).reset_index(drop=True)
