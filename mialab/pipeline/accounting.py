"""Job accounting for workflow runs on SLURM: what every job cost, per job, stage and dataset.

snakemake-executor-plugin-slurm (2.8) submits each job with the run's UUID as job name (after the
experiment's prefix, ``mialab-<config file names>``: :func:`jobname_prefix`, profiles/slurm), the
comment ``rule_<rule>_wildcards_<values joined by _>`` (``rule_<rule>`` without wildcards) and
the log ``.snakemake/slurm_logs/rule_<rule>/<values>/<jobid>.log``; the log also carries
Snakemake's own ``wildcards: name=value, ...`` line. ``sacct`` (from slurmdbd) gives one row
per job allocation followed by its steps (``.batch``, ``.extern``, ``.0``): state, elapsed time,
allocated CPUs/GPUs/memory live on the allocation, the peak memory (``MaxRSS``) on the steps.

The per-job table joins both sources: the rule comes from the stored comment, or from the log
folder when the cluster does not store comments (``AccountingStoreFlags=job_comment``); named
wildcard columns (``dataset``, ``model``, ``seed``, ...) come from the logs. GPU-hours are
elapsed time x allocated GPUs, whatever the job did with them; how well they were used is in the
efficiency columns: CPU efficiency (``TotalCPU`` over elapsed x allocated CPUs), memory efficiency
(peak ``MaxRSS`` over ``ReqMem``), GPU utilisation and peak GPU memory (``gres/gpuutil``,
``gres/gpumem`` in the steps' ``TRESUsageInAve`` / ``TRESUsageInMax``, where the cluster tracks them:
SLURM >= 23.02 with ``AcctGatherGpu``/NVML and both in ``AccountingStorageTRES``; else blank), and
the queue wait (start - submit).

An experiment's jobs are those whose job name carries its prefix (and, where sacct stores it, whose working
directory is this checkout's): two configs run from one checkout are accounted apart, each run of one
config (its run UUID) in a table of its own. ``sacct`` separates its fields with :data:`DELIMITER`, which no job
name holds; a line that still does not parse is left out and named in a warning. :func:`efficiency_warnings`
names the stages below the efficiency thresholds (CPU, memory, GPU utilisation where tracked, and the share
of the time limit used).

Attribution (per dataset): a job with a ``dataset`` wildcard counts for that dataset; a job of a
shared stage (a ``model`` wildcard but no ``dataset``, e.g. fine-tuning a model later scored on
several datasets) counts in equal shares for the datasets of the other jobs of the same model; any
other job (no dataset, no model, or a model no dataset job names) counts under ``(shared)``.

:func:`estimate_gpu_hours` prices a dry run before it is launched: planned jobs per rule x the
rule's mean wall time in Snakemake benchmark files of earlier runs x the GPUs it asks for.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from mialab.core.finite import require_finite
from mialab.core.io import write_parquet, write_text

SACCT_FIELDS = (
    "JobID", "JobName", "State", "ElapsedRaw", "AllocCPUS", "AllocTRES",
    "MaxRSS", "Comment", "Submit", "Start", "End", "WorkDir",
    "TotalCPU", "ReqMem", "TRESUsageInAve", "TRESUsageInMax", "TimelimitRaw",
)  # fmt: skip
#: sacct's field separator: the ASCII unit separator, which no job name, comment or folder holds (``|`` may).
DELIMITER = "\x1f"
#: The prefix of every job name of this workflow's runs (:func:`jobname_prefix`).
PREFIX = "mialab"
#: Characters the plugin accepts in a job-name prefix, and its longest prefix.
PREFIX_CHARS = re.compile(r"[^A-Za-z0-9_-]")
PREFIX_MAX = 50
#: States after which sacct's record of a job allocation no longer changes.
RUNNING_STATES = ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED")

#: Columns of the per-job table before the named wildcard columns.
JOB_COLUMNS = (
    "job_id", "run_id", "rule", "wildcards", "attempt", "state", "submit", "start", "end",
    "queue_s", "elapsed_s", "alloc_cpus", "alloc_gpus", "alloc_mem_mb", "req_mem_mb", "max_rss_mb",
    "total_cpu_s", "cpu_hours", "gpu_hours", "cpu_efficiency", "mem_efficiency", "gpu_util_pct", "gpu_mem_mb",
    "time_limit_s", "time_efficiency",
)  # fmt: skip
#: Shown where a job's dataset share cannot be known (module doc, "Attribution").
SHARED = "(shared)"

_COMMENT_RE = re.compile(r"^(?:rule|group)_(?P<rule>.+?)(?:_wildcards_(?P<wildcards>.*))?$")
_SIZE_RE = re.compile(r"^(?P<value>[0-9.]+)(?P<unit>[KMGTP]?)$")
_UNIT_EXP = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
_NO_TIME = ("", "Unknown", "None")
_LOG_WILDCARDS_RE = re.compile(r"^\s+wildcards: (?P<pairs>.+)$", re.MULTILINE)


def experiment_name(config_files) -> str:
    """The experiment of a run's config files: their names without suffix joined by ``-`` (the Snakefile's
    ``config.yaml`` without any), in the characters a job name prefix may hold."""
    names = [Path(f).stem for f in config_files] or ["config"]
    return PREFIX_CHARS.sub("_", "-".join(names))


def jobname_prefix(config_files=None) -> str:
    """The job-name prefix of a run's jobs (profiles/slurm; default: the config files this process's command line
    names): :func:`experiment_prefix` of their experiment."""
    from mialab.pipeline.config import command_line_config_files

    return experiment_prefix(experiment_name(command_line_config_files(sys.argv[1:]) if config_files is None
                                             else config_files))


def experiment_prefix(experiment: str) -> str:
    """``mialab-<experiment>``, cut to the plugin's 50 characters with a digest of the whole kept."""
    prefix = f"{PREFIX}-{experiment}"
    if len(prefix) > PREFIX_MAX:
        prefix = f"{prefix[:PREFIX_MAX - 9]}-{hashlib.sha256(prefix.encode()).hexdigest()[:8]}"
    return prefix


def sacct_command(since: str) -> list[str]:
    """The ``sacct`` call listing every job (and step) since ``since``, requeued runs included, its fields
    separated by :data:`DELIMITER`.

    Without ``-S`` sacct shows only jobs since midnight; ``since`` takes any sacct time
    (``2026-01-31T00:00``, ``now-30days``).
    """
    return [
        "sacct", "--parsable2", f"--delimiter={DELIMITER}", "--noheader", "--duplicates",
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


def cpu_seconds(text: str) -> float:
    """A sacct CPU time (``TotalCPU``: ``[D-][HH:]MM:SS[.mmm]``) in seconds; blank is 0."""
    if not text.strip():
        return 0.0
    days, _, clock = text.strip().rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    if not 1 <= len(parts) <= 3:
        raise ValueError(f"not a SLURM CPU time: {text!r}")
    seconds = sum(v * 60.0**i for i, v in enumerate(reversed(parts)))
    return seconds + (int(days) * 86400.0 if days else 0.0)


def req_mem_mb(text: str, cpus: int, nodes: int = 1) -> float:
    """``ReqMem`` in MiB for the whole job: ``4000M`` (22.05+), or older ``4000Mn`` (per node) /
    ``4000Mc`` (per CPU); blank is NaN."""
    text = text.strip()
    if not text:
        return math.nan
    if text[-1] in "nc":
        per = cpus if text[-1] == "c" else nodes
        return size_mb(text[:-1]) * per
    return size_mb(text)


def _timestamp(text: str) -> pd.Timestamp:
    """A sacct time; jobs not yet started or ended (``Unknown``) give NaT."""
    return pd.NaT if text in _NO_TIME else pd.Timestamp(text)


def _usage(tres: str, name: str, convert) -> float:
    """One entry of a step's ``TRESUsageIn*`` (NaN when the cluster does not track it)."""
    value = parse_tres(tres).get(name)
    return convert(value) if value not in (None, "") else math.nan


def _max(a: float, b: float) -> float:
    """The larger of two values, NaN (not tracked) only when both are."""
    return b if math.isnan(a) else a if math.isnan(b) else max(a, b)


def parse_sacct(text: str, fields: tuple[str, ...] = SACCT_FIELDS, delimiter: str = DELIMITER) -> pd.DataFrame:
    """One row per job allocation from ``sacct --parsable2 --noheader`` text (``fields``: the
    ``--format`` it was written with, :data:`SACCT_FIELDS` by default; text written without the
    efficiency fields gives NaN there; ``delimiter``: its ``--delimiter``, ``|`` without one).

    A line with another number of fields (a job name holding the delimiter) is left out with its steps, and
    listed in the frame's ``attrs["skipped"]``.

    Steps follow their allocation (with ``--duplicates`` a requeued job appears once per run,
    each run with its own steps), so rows are grouped in order; ``max_rss_mb`` is the largest
    ``MaxRSS`` over the steps (0 when no step ran), ``total_cpu_s`` the steps' ``TotalCPU`` summed
    (the allocation's own when no step is listed), ``gpu_util_pct`` / ``gpu_mem_mb`` the largest over the
    steps. Columns: job_id, run_id, state, elapsed_s, alloc_cpus, alloc_gpus, alloc_mem_mb, req_mem_mb,
    max_rss_mb, total_cpu_s, gpu_util_pct, gpu_mem_mb, time_limit_s, comment, submit, start, end, workdir.
    """
    rows: list[dict] = []
    step_cpu: dict[int, float] = {}  # row index -> TotalCPU summed over its steps
    skipped: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split(delimiter)
        if len(values) != len(fields):
            skipped.append(line.split(delimiter, 1)[0][:40])
            continue
        f = dict.fromkeys(SACCT_FIELDS, "") | dict(zip(fields, values))
        rss = size_mb(f["MaxRSS"]) if f["MaxRSS"] else 0.0
        util = _usage(f["TRESUsageInAve"], "gres/gpuutil", float)
        gmem = _usage(f["TRESUsageInMax"], "gres/gpumem", size_mb)
        if "." in f["JobID"]:
            parent = f["JobID"].split(".", 1)[0]
            if parent in skipped:
                continue
            if not rows or rows[-1]["job_id"] != parent:
                raise ValueError(f"sacct step {f['JobID']} does not follow its allocation")
            row = rows[-1]
            row["max_rss_mb"] = max(row["max_rss_mb"], rss)
            row["gpu_util_pct"] = _max(row["gpu_util_pct"], util)
            row["gpu_mem_mb"] = _max(row["gpu_mem_mb"], gmem)
            step_cpu[len(rows) - 1] = step_cpu.get(len(rows) - 1, 0.0) + cpu_seconds(f["TotalCPU"])
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
                "req_mem_mb": req_mem_mb(f["ReqMem"], int(f["AllocCPUS"]), int(tres.get("node", 1))),
                "max_rss_mb": rss,
                "total_cpu_s": cpu_seconds(f["TotalCPU"]) if "TotalCPU" in fields else math.nan,
                "gpu_util_pct": util,
                "gpu_mem_mb": gmem,
                "time_limit_s": int(f["TimelimitRaw"]) * 60.0 if f["TimelimitRaw"].isdigit() else math.nan,
                "comment": f["Comment"],
                "submit": _timestamp(f["Submit"]),
                "start": _timestamp(f["Start"]),
                "end": _timestamp(f["End"]),
                "workdir": f["WorkDir"],
            }
        )
    for i, seconds in step_cpu.items():
        if not math.isnan(rows[i]["total_cpu_s"]):
            rows[i]["total_cpu_s"] = seconds
    columns = [
        "job_id", "run_id", "state", "elapsed_s", "alloc_cpus", "alloc_gpus", "alloc_mem_mb", "req_mem_mb",
        "max_rss_mb", "total_cpu_s", "gpu_util_pct", "gpu_mem_mb", "time_limit_s", "comment", "submit", "start",
        "end", "workdir",
    ]  # fmt: skip
    frame = pd.DataFrame(rows, columns=columns)
    frame.attrs["skipped"] = skipped
    return frame


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


def snakemake_jobs(allocations: pd.DataFrame, logs: pd.DataFrame, workdir: str | os.PathLike | None,
                   prefix: str | None = None) -> pd.DataFrame:
    """The per-job table (:data:`JOB_COLUMNS` + one column per wildcard name) of a workflow's jobs.

    Keeps the allocations submitted by the Snakemake plugin for ``workdir`` (stored comment and
    working directory) or with a log in the workflow's log folder (``logs``, from
    :func:`read_job_logs`); other users' and other workflows' jobs are dropped, and with ``prefix`` (an
    experiment's :func:`jobname_prefix`) every job whose name does not carry it: another experiment's run from
    the same checkout. Logs win over comments: they name the wildcards, and the tasks of an array job share
    one comment. ``attempt`` numbers the submissions of one rule + wildcards in one run by submit time
    (Snakemake retries and SLURM requeues both count).
    """
    if prefix is not None:
        allocations = allocations[allocations["run_id"].str.startswith(f"{prefix}_")]
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
    jobs["queue_s"] = (jobs["start"] - jobs["submit"]).dt.total_seconds()
    cpu_s = jobs["elapsed_s"] * jobs["alloc_cpus"]
    jobs["cpu_efficiency"] = (jobs["total_cpu_s"] / cpu_s).where(cpu_s > 0)
    jobs["mem_efficiency"] = (jobs["max_rss_mb"] / jobs["req_mem_mb"]).where(jobs["req_mem_mb"] > 0)
    jobs["time_efficiency"] = (jobs["elapsed_s"] / jobs["time_limit_s"]).where(jobs["time_limit_s"] > 0)
    jobs = jobs.sort_values(["submit", "job_id"], kind="stable")
    jobs["attempt"] = jobs.groupby(["run_id", "rule", "wildcards"]).cumcount() + 1
    return jobs[list(JOB_COLUMNS) + names].reset_index(drop=True)


def _same_path(workdir: str | os.PathLike):
    """Predicate: does a sacct ``WorkDir`` name the same folder as ``workdir``?"""
    target = Path(workdir).resolve()
    return lambda wd: bool(wd) and Path(wd).resolve() == target


def attributed(jobs: pd.DataFrame) -> pd.DataFrame:
    """``jobs`` with one row per (job, dataset) it counts for and its ``share`` of the job (module doc,
    "Attribution"): its own dataset (1), equal shares of its model's datasets, else :data:`SHARED`."""
    own = jobs["dataset"] if "dataset" in jobs else pd.Series(None, index=jobs.index, dtype=object)
    model = jobs["model"] if "model" in jobs else pd.Series(None, index=jobs.index, dtype=object)
    of_model = {m: sorted(set(own[(model == m) & own.notna()])) for m in model.dropna().unique()}
    rows = []
    for i, job in jobs.iterrows():
        if pd.notna(own[i]):
            targets = [own[i]]
        else:
            targets = of_model.get(model[i]) if pd.notna(model[i]) else None
            targets = targets or [SHARED]
        rows += [{**job.to_dict(), "dataset": d, "share": 1.0 / len(targets)} for d in targets]
    return pd.DataFrame(rows, columns=[*jobs.columns, *([] if "dataset" in jobs else ["dataset"]), "share"])


def totals(jobs: pd.DataFrame, by: str) -> pd.DataFrame:
    """Cost and efficiency of ``jobs`` grouped by column ``by`` (e.g. ``rule`` = stage, ``model``); per
    ``dataset`` the jobs are :func:`attributed` first.

    Jobs without a value for ``by`` (no such wildcard) are grouped under ``(none)``. Columns: by, jobs,
    not_completed (state other than COMPLETED), elapsed_s, mean_queue_s, cpu_hours, gpu_hours (a shared
    job's share), cpu_efficiency (TotalCPU over allocated CPU time), mem_efficiency (mean over jobs of
    MaxRSS / ReqMem), gpu_util_pct (GPU-hour-weighted mean where tracked), time_efficiency (elapsed over
    the time limits asked for, where sacct gives them), max_rss_mb (largest over the group), sorted by GPU-
    then CPU-hours, largest first.
    """
    if by == "dataset":
        jobs = attributed(jobs)
    else:
        jobs = jobs.assign(share=1.0)
    keys = jobs[by].fillna("(none)") if by in jobs else pd.Series("(none)", index=jobs.index)
    w = jobs["share"]
    known = jobs["total_cpu_s"].notna()
    tracked = jobs["gpu_util_pct"].notna() & (jobs["gpu_hours"] > 0)
    frame = pd.DataFrame({
        by: keys, "job_id": jobs["job_id"], "not_completed": jobs["state"] != "COMPLETED",
        "elapsed_s": jobs["elapsed_s"] * w, "queue_s": jobs["queue_s"],
        "cpu_hours": jobs["cpu_hours"] * w, "gpu_hours": jobs["gpu_hours"] * w,
        "used_cpu_s": (jobs["total_cpu_s"] * w).where(known, 0.0),
        "alloc_cpu_s": (jobs["elapsed_s"] * jobs["alloc_cpus"] * w).where(known, 0.0),
        "mem_efficiency": jobs["mem_efficiency"], "max_rss_mb": jobs["max_rss_mb"],
        "util_gpu_h": (jobs["gpu_util_pct"] * jobs["gpu_hours"] * w).where(tracked, 0.0),
        "tracked_gpu_h": (jobs["gpu_hours"] * w).where(tracked, 0.0),
        "limited_s": (jobs["elapsed_s"] * w).where(jobs["time_limit_s"] > 0, 0.0),
        "limit_s": (jobs["time_limit_s"] * w).where(jobs["time_limit_s"] > 0, 0.0),
    })
    out = frame.groupby(by, sort=False).agg(
        jobs=("job_id", "size"),
        not_completed=("not_completed", "sum"),
        elapsed_s=("elapsed_s", "sum"),
        mean_queue_s=("queue_s", "mean"),
        cpu_hours=("cpu_hours", "sum"),
        gpu_hours=("gpu_hours", "sum"),
        used_cpu_s=("used_cpu_s", "sum"),
        alloc_cpu_s=("alloc_cpu_s", "sum"),
        mem_efficiency=("mem_efficiency", "mean"),
        util_gpu_h=("util_gpu_h", "sum"),
        tracked_gpu_h=("tracked_gpu_h", "sum"),
        limited_s=("limited_s", "sum"),
        limit_s=("limit_s", "sum"),
        max_rss_mb=("max_rss_mb", "max"),
    ).reset_index()
    out["cpu_efficiency"] = (out["used_cpu_s"] / out["alloc_cpu_s"]).where(out["alloc_cpu_s"] > 0)
    out["gpu_util_pct"] = (out["util_gpu_h"] / out["tracked_gpu_h"]).where(out["tracked_gpu_h"] > 0)
    out["time_efficiency"] = (out["limited_s"] / out["limit_s"]).where(out["limit_s"] > 0)
    out = out[[by, "jobs", "not_completed", "elapsed_s", "mean_queue_s", "cpu_hours", "gpu_hours",
               "cpu_efficiency", "mem_efficiency", "gpu_util_pct", "time_efficiency", "max_rss_mb"]]
    return out.sort_values(["gpu_hours", "cpu_hours", by], ascending=[False, False, True]).reset_index(drop=True)


#: What each efficiency warning compares (schema: accounting.thresholds): the column of totals(), and as what.
EFFICIENCIES = {"cpu": ("cpu_efficiency", "CPU efficiency (TotalCPU / allocated CPU time): fewer CPUs would do"),
                "memory": ("mem_efficiency", "memory efficiency (MaxRSS / ReqMem): less memory would do"),
                "gpu": ("gpu_util_pct", "GPU utilisation (gres/gpuutil): fewer GPUs, or more work per GPU"),
                "time": ("time_efficiency", "share of the time limit used: a shorter runtime would queue sooner")}


def efficiency_warnings(stages: pd.DataFrame, thresholds: dict[str, float]) -> list[str]:
    """A warning for each stage (``stages``: :func:`totals` by rule) and efficiency below its threshold
    (``thresholds``: :data:`EFFICIENCIES`' names, fractions); an efficiency the cluster does not give is not
    judged, GPU utilisation only for stages that held GPUs."""
    warnings = []
    for row in stages.itertuples():
        for name, (column, what) in EFFICIENCIES.items():
            value = getattr(row, column)
            value = value / 100 if name == "gpu" else value
            if pd.notna(value) and value < thresholds[name] and (name != "gpu" or row.gpu_hours > 0):
                warnings.append(f"stage {row.rule}: {what}: {value:.0%} < {thresholds[name]:.0%}")
    return warnings


def gpu_tracking_warning(config_text: str | None) -> str | None:
    """A warning when ``scontrol show config`` text shows an ``AccountingStorageTRES`` without
    ``gres/gpu``: sacct then reports no GPUs, and every GPU-hour reads 0. None when tracked or unknown."""
    if config_text is None:
        return None
    m = re.search(r"^AccountingStorageTRES\s*=\s*(.*)$", config_text, re.M)
    if m is None:
        return None
    if "gres/gpu" in (t.split(":")[0] for t in m[1].split(",")):
        return None
    return (f"this cluster's AccountingStorageTRES ({m[1].strip()}) does not track gres/gpu: sacct reports no "
            "GPUs, so GPU-hours below read 0; ask the admins to add gres/gpu (and gres/gpuutil, gres/gpumem for "
            "utilisation)")


def scontrol_config() -> str | None:
    """``scontrol show config`` text, or None where scontrol is missing or fails."""
    try:
        proc = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


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


def markdown_report(jobs: pd.DataFrame, warnings: list[str] = ()) -> str:
    """Markdown: warnings, overall GPU-/CPU-hours, totals per stage, dataset and model, then every job."""
    parts = ["# SLURM job accounting\n"]
    parts += [f"**Warning:** {w}\n" for w in warnings]
    parts += [
        f"{len(jobs)} jobs, {jobs['gpu_hours'].sum():.3f} GPU-hours, {jobs['cpu_hours'].sum():.3f} CPU-hours, "
        f"{int((jobs['state'] != 'COMPLETED').sum())} not completed.\n",
        "Efficiencies: CPU = TotalCPU / (elapsed x CPUs), memory = MaxRSS / ReqMem, GPU = gres/gpuutil "
        "(blank where the cluster does not track it). Per dataset, a shared stage's job (a model wildcard, no "
        f"dataset) is split equally over its model's datasets; other jobs without a dataset are `{SHARED}`.\n",
        "## Per run\n",
        markdown_table(totals(jobs, "run_id")) + "\n",
        "## Per stage (rule)\n",
        markdown_table(totals(jobs, "rule")) + "\n",
        "## Per dataset\n",
        markdown_table(totals(jobs, "dataset")) + "\n",
        "## Per model\n",
        markdown_table(totals(jobs, "model")) + "\n",
        "## Jobs\n",
        markdown_table(jobs.drop(columns=["run_id"])) + "\n",
    ]
    return "\n".join(parts)


def gpu_hours_figure(stages: pd.DataFrame, path: str | os.PathLike) -> None:
    """A bar chart of GPU-hours per stage (``stages``: :func:`totals` by rule), written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpu = stages[stages["gpu_hours"] > 0]
    fig, ax = plt.subplots(figsize=(7, 0.4 * max(len(gpu), 1) + 1.2))
    ax.barh(gpu["rule"].astype(str)[::-1], gpu["gpu_hours"][::-1], color="#4c72b0")
    ax.set_xlabel("GPU-hours")
    ax.set_title("GPU-hours per stage" if len(gpu) else "GPU-hours per stage: no GPU job")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    os.replace(tmp, path)


def write_accounting(jobs: pd.DataFrame, out_dir: str | os.PathLike, warnings: list[str] = ()) -> None:
    """Write ``jobs.parquet``, ``runs.parquet``, ``stages.parquet``, ``datasets.parquet``, ``models.parquet``,
    ``jobs.md`` and ``gpu_hours.png`` (GPU-hours per stage), each atomically."""
    out_dir = Path(out_dir)
    stages = totals(jobs, "rule")
    write_parquet(jobs, out_dir / "jobs.parquet")
    write_parquet(totals(jobs, "run_id"), out_dir / "runs.parquet")
    write_parquet(stages, out_dir / "stages.parquet")
    write_parquet(totals(jobs, "dataset"), out_dir / "datasets.parquet")
    write_parquet(totals(jobs, "model"), out_dir / "models.parquet")
    gpu_hours_figure(stages, out_dir / "gpu_hours.png")
    write_text(markdown_report(jobs, warnings), out_dir / "jobs.md")


def report(out_dir: str | os.PathLike, since: str, workdir: str | os.PathLike | None, log_dir: str | os.PathLike,
           prefix: str | None = None, thresholds: dict[str, float] | None = None, sacct_text: str | None = None,
           scontrol_text: str | None = None, delimiter: str = DELIMITER) -> tuple[pd.DataFrame, list[str]]:
    """Account this workflow's SLURM jobs (of the experiment whose job names carry ``prefix``) into ``out_dir``
    (from ``sacct``/``scontrol``, or the given texts of their output, ``delimiter`` separating sacct's
    fields); return the jobs and the warnings: an untracked gres/gpu, sacct lines left out, and the stages
    below ``thresholds`` (:func:`efficiency_warnings`)."""
    text = run_sacct(since) if sacct_text is None else sacct_text
    allocations = parse_sacct(text, delimiter=delimiter)
    jobs = snakemake_jobs(allocations, read_job_logs(log_dir), workdir, prefix)
    config = scontrol_config() if scontrol_text is None else scontrol_text
    warnings = [w for w in [gpu_tracking_warning(config)] if w]
    if allocations.attrs["skipped"]:
        warnings.append(f"{len(allocations.attrs['skipped'])} sacct line(s) left out, their fields not parsed "
                        f"(jobs {', '.join(allocations.attrs['skipped'][:5])}): not this workflow's job names")
    warnings += efficiency_warnings(totals(jobs, "rule"), thresholds) if thresholds else []
    write_accounting(jobs, out_dir, warnings)
    return jobs, warnings


def submitted_since(log_dir: str | os.PathLike, start: float) -> set[str]:
    """SLURM job ids of the plugin's job logs under ``log_dir`` written since ``start`` (a run's own jobs: the
    plugin writes each job's log from its submission on)."""
    return {path.stem for path in Path(log_dir).glob("*/**/*.log") if path.stat().st_mtime >= start}


def unsettled(jobs: pd.DataFrame, ids: set[str]) -> set[str]:
    """The job ids among ``ids`` that sacct does not show yet, or shows without an end (slurmdbd records a job's
    end a little after it ends)."""
    latest = jobs.groupby("job_id").last() if len(jobs) else pd.DataFrame(columns=["state", "end"])
    done = {j for j, row in latest.iterrows() if row["state"] not in RUNNING_STATES and pd.notna(row["end"])}
    return set(ids) - done


def report_after_run(outcome: str, settings: dict, experiment: str, start: float, *,
                     results: str = "results", log_dir: str = ".snakemake/slurm_logs", poll_s: float = 10.0) -> None:
    """The accounting of experiment ``experiment`` at the end of a SLURM run started at ``start`` (``outcome``:
    succeeded / failed; ``settings``: the config's ``accounting`` section), into
    ``<results>/accounting/<experiment>/``, after waiting (up to ``settings["wait"]`` seconds, asking every
    ``poll_s``) for sacct to show each job the run submitted ended. A failure here is reported (on stderr and in
    ``<results>/logs/accounting-<experiment>.log``), not raised: it must not hide the run's own outcome."""
    out_dir, log = Path(results) / "accounting" / experiment, Path(results) / "logs" / f"accounting-{experiment}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        prefix, ids = experiment_prefix(experiment), submitted_since(log_dir, start)
        deadline = time.monotonic() + settings["wait"]
        while True:
            text = run_sacct(settings["since"])
            waiting = unsettled(parse_sacct(text), ids)
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(poll_s)
        jobs, warnings = report(out_dir, settings["since"], ".", log_dir, prefix, settings["thresholds"],
                                sacct_text=text)
        if waiting:
            warnings.append(f"sacct did not show the end of job(s) {', '.join(sorted(waiting, key=int))} within "
                            f"{settings['wait']} s (accounting.wait); refresh the accounting later")
        log.write_text("".join(f"warning: {w}\n" for w in warnings)
                       + f"{len(jobs)} jobs, {jobs['gpu_hours'].sum():.3f} GPU-hours -> {out_dir}\n")
        for w in warnings:
            print(f"job accounting: warning: {w}", file=sys.stderr)
        print(f"job accounting of the {outcome} run: {out_dir}/jobs.md", file=sys.stderr)
    except Exception as err:  # noqa: BLE001 - reported, never raised (see above)
        log.write_text(f"{type(err).__name__}: {err}\n")
        print(f"job accounting failed ({err}); see {log}", file=sys.stderr)


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
        require_finite(f"wall times in benchmark file {path}", seconds)
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
