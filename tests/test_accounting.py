"""Unit tests of mialab.pipeline.accounting on text captured from the real test SLURM (22.05).

tests/slurm/sacct_22.05.txt is `sacct --parsable2 --noheader --duplicates --format=<SACCT_FIELDS>`
after one run of tests/slurm/fixture through profiles/slurm (jobs 8-13: make_data x2,
pretrain_model x2 with 8 GPUs, flaky failing at 4000 MB then passing at 8000 MB), a job
requeued once (14), a pending job cancelled before it ran (15) and a foreign job without a
comment in another folder (16); it was captured before the efficiency fields were added, so it is
read with its own field list (LEGACY_FIELDS). tests/slurm/dry_run_9.27.txt is `snakemake --dry-run` of
the fixture through the profile.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from mialab.pipeline import accounting

HERE = Path(__file__).resolve().parent / "slurm"
SACCT = (HERE / "sacct_22.05.txt").read_text()
DRY_RUN = (HERE / "dry_run_9.27.txt").read_text()
WORKDIR = "/tmp/fx"  # the fixture run's working directory, as stored by sacct
LEGACY_FIELDS = accounting.SACCT_FIELDS[:12]  # the --format of sacct_22.05.txt
EFFICIENCY_FIELDS = accounting.SACCT_FIELDS[:16]  # the --format of sacct_efficiency_22.05.txt (before TimelimitRaw)

# Logs as the plugin lays them out, each with Snakemake's own wildcards line (format copied
# from the real job logs of the same run).
LOGS = {
    "rule_make_data/beta/8.log": "dataset=beta",
    "rule_make_data/alpha/9.log": "dataset=alpha",
    "rule_pretrain_model/beta_tiny_1/10.log": "dataset=beta, model=tiny, seed=1",
    "rule_pretrain_model/alpha_tiny_1/11.log": "dataset=alpha, model=tiny, seed=1",
    "rule_flaky/alpha/12.log": "dataset=alpha",
    "rule_flaky/alpha/13.log": "dataset=alpha",
}


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    root = tmp_path / "slurm_logs"
    for rel, pairs in LOGS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        rule = rel.split("/")[0].removeprefix("rule_")
        path.write_text(f"rule {rule}:\n    jobid: 0\n    wildcards: {pairs}\n    resources: mem_mb=4000\n")
    return root


def allocations() -> pd.DataFrame:
    return accounting.parse_sacct(SACCT, LEGACY_FIELDS, "|")   # captured before --delimiter


def test_parse_sacct_merges_steps_into_allocations() -> None:
    df = allocations()
    assert list(df["job_id"]) == ["8", "9", "10", "11", "12", "13", "14", "14", "15", "16"]
    job8 = df.iloc[0]
    assert (job8["state"], job8["elapsed_s"], job8["alloc_cpus"], job8["alloc_gpus"]) == ("COMPLETED", 11, 1, 0)
    assert job8["alloc_mem_mb"] == 4000.0
    # MaxRSS lives on the steps: batch 211360K beats step .0 203344K
    assert job8["max_rss_mb"] == pytest.approx(211360 / 1024)
    assert job8["comment"] == "rule_make_data_wildcards_beta"
    assert job8["workdir"] == WORKDIR
    assert job8["submit"] == pd.Timestamp("2026-11-29T14:07:10")


def test_parse_sacct_reads_gpus_states_and_requeued_runs() -> None:
    df = allocations().set_index("job_id", drop=False)
    assert df.loc["10", "alloc_gpus"] == 8 and df.loc["10", "alloc_mem_mb"] == 2000.0
    assert df.loc["12", "state"] == "FAILED"
    first, second = df.loc["14"].itertuples()
    assert (first.state, first.max_rss_mb) == ("REQUEUED", 0.0)  # no step sampled memory
    assert (second.state, second.max_rss_mb) == ("COMPLETED", pytest.approx(3400 / 1024))
    cancelled = df.loc["15"]
    assert (cancelled["state"], cancelled["elapsed_s"], cancelled["alloc_mem_mb"]) == ("CANCELLED", 0, 0.0)


def test_parse_sacct_leaves_out_a_line_it_cannot_split() -> None:
    """A line with another number of fields (a job name holding the delimiter) is left out with its steps and
    named; the other jobs are read. A step without its allocation is still an error (not sacct's text)."""
    lines = SACCT.splitlines()
    odd = [lines[0].replace("|5e7541b3", "|a|b 5e7541b3", 1), *lines[1:]]   # job 8 named "a|b ..."
    df = accounting.parse_sacct("\n".join(odd), LEGACY_FIELDS, "|")
    assert "8" not in set(df["job_id"]) and "9" in set(df["job_id"]) and df.attrs["skipped"] == ["8"]
    orphan_step = SACCT.splitlines()[1]  # 8.batch without its allocation
    with pytest.raises(ValueError, match="does not follow its allocation"):
        accounting.parse_sacct(orphan_step, LEGACY_FIELDS, "|")


def test_sacct_separates_fields_with_a_character_no_job_name_holds() -> None:
    """sacct is asked for the unit separator between fields: a `|` in a job name, a comment or a folder is text."""
    command = accounting.sacct_command("now-1days")
    assert f"--delimiter={accounting.DELIMITER}" in command and accounting.DELIMITER == "\x1f"
    line = accounting.DELIMITER.join(["31", "mialab-a_run|x", "COMPLETED", "60", "1", "cpu=1,mem=4000M,node=1", "",
                                      "rule_x", "2026-12-04T10:00:00", "2026-12-04T10:00:01", "2026-12-04T10:01:01",
                                      "/w|here", "00:30", "4000M", "", "", "30"])
    job = accounting.parse_sacct(line).iloc[0]
    assert (job["run_id"], job["workdir"], job["time_limit_s"]) == ("mialab-a_run|x", "/w|here", 1800.0)


@pytest.mark.parametrize(
    ("text", "mb"),
    [("4000M", 4000.0), ("1.5G", 1536.0), ("211360K", 211360 / 1024), ("2048", 2048 / 1024**2), ("0", 0.0)],
)
def test_size_mb(text: str, mb: float) -> None:
    assert accounting.size_mb(text) == pytest.approx(mb)


def test_size_mb_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a SLURM size"):
        accounting.size_mb("12X")


@pytest.mark.parametrize(
    ("comment", "parsed"),
    [
        ("rule_pretrain_model_wildcards_beta_tiny_1", ("pretrain_model", "beta_tiny_1")),
        ("rule_make_data_wildcards_alpha", ("make_data", "alpha")),
        ("rule_later", ("later", "")),
        ("", None),
        ("nightly backup", None),
    ],
)
def test_parse_comment(comment: str, parsed: tuple[str, str] | None) -> None:
    assert accounting.parse_comment(comment) == parsed


def test_read_job_logs_follows_the_plugin_layout(log_dir: Path) -> None:
    logs = accounting.read_job_logs(log_dir).set_index("job_id")
    assert sorted(logs.index, key=int) == ["8", "9", "10", "11", "12", "13"]
    assert logs.loc["11", "rule"] == "pretrain_model"
    assert logs.loc["11", "wildcards"] == "alpha_tiny_1"
    assert logs.loc["11", "named"] == {"dataset": "alpha", "model": "tiny", "seed": "1"}


def test_snakemake_jobs_keeps_only_this_workflows_jobs(log_dir: Path) -> None:
    jobs = accounting.snakemake_jobs(allocations(), accounting.read_job_logs(log_dir), WORKDIR)
    # 16 has no comment and no log; every other job was submitted for WORKDIR
    assert list(jobs["job_id"]) == ["8", "9", "10", "11", "12", "13", "14", "14", "15"]
    assert list(jobs.columns) == list(accounting.JOB_COLUMNS) + ["dataset", "model", "seed"]
    elsewhere = accounting.snakemake_jobs(allocations(), accounting.read_job_logs(log_dir), "/somewhere/else")
    assert list(elsewhere["job_id"]) == ["8", "9", "10", "11", "12", "13"]  # only those with a log here


def test_snakemake_jobs_rule_wildcards_and_cost(log_dir: Path) -> None:
    jobs = accounting.snakemake_jobs(allocations(), accounting.read_job_logs(log_dir), WORKDIR)
    job11 = jobs.set_index("job_id").loc["11"]
    assert (job11["rule"], job11["wildcards"]) == ("pretrain_model", "alpha_tiny_1")
    assert (job11["dataset"], job11["model"], job11["seed"]) == ("alpha", "tiny", "1")
    assert job11["gpu_hours"] == pytest.approx(11 * 8 / 3600)
    assert job11["cpu_hours"] == pytest.approx(11 * 1 / 3600)
    make_data = jobs[jobs["rule"] == "make_data"]
    assert make_data["model"].isna().all()  # make_data has no model wildcard
    comment_only = jobs[jobs["rule"] == "sleepy"]
    assert list(comment_only["wildcards"]) == ["gamma_7", "gamma_7"]
    assert comment_only["dataset"].isna().all()  # no log: no names for the values


def test_attempts_count_retries_and_requeues(log_dir: Path) -> None:
    jobs = accounting.snakemake_jobs(allocations(), accounting.read_job_logs(log_dir), WORKDIR)
    flaky = jobs[jobs["rule"] == "flaky"]
    assert list(zip(flaky["attempt"], flaky["state"], flaky["alloc_mem_mb"])) == [
        (1, "FAILED", 4000.0),
        (2, "COMPLETED", 8000.0),
    ]
    assert list(jobs.loc[jobs["rule"] == "sleepy", "attempt"]) == [1, 2]


def test_wildcard_names_must_not_clash_with_columns(log_dir: Path) -> None:
    (log_dir / "rule_make_data" / "beta" / "8.log").write_text("    wildcards: state=beta\n")
    with pytest.raises(ValueError, match=r"wildcard names \['state'\] clash"):
        accounting.snakemake_jobs(allocations(), accounting.read_job_logs(log_dir), WORKDIR)


def test_logs_stand_in_for_comments_not_stored(log_dir: Path) -> None:
    """Without AccountingStoreFlags=job_comment the rule and wildcards come from the logs."""
    fields = LEGACY_FIELDS.index("Comment")
    no_comments = "\n".join(
        "|".join("" if i == fields else v for i, v in enumerate(line.split("|"))) for line in SACCT.splitlines()
    )
    jobs = accounting.snakemake_jobs(accounting.parse_sacct(no_comments, LEGACY_FIELDS, "|"),
                                     accounting.read_job_logs(log_dir), WORKDIR)
    assert list(jobs["rule"]) == ["make_data", "make_data", "pretrain_model", "pretrain_model", "flaky", "flaky"]
    assert list(jobs["wildcards"]) == ["beta", "alpha", "beta_tiny_1", "alpha_tiny_1", "alpha", "alpha"]


def test_totals_per_stage_and_dataset(log_dir: Path) -> None:
    jobs = accounting.snakemake_jobs(allocations(), accounting.read_job_logs(log_dir), WORKDIR)
    stages = accounting.totals(jobs, "rule").set_index("rule")
    assert stages.index[0] == "pretrain_model"  # the only GPU stage comes first
    assert stages.loc["pretrain_model", "gpu_hours"] == pytest.approx((9 + 11) * 8 / 3600)
    assert (stages.loc["pretrain_model", "jobs"], stages.loc["pretrain_model", "elapsed_s"]) == (2, 20)
    assert (stages.loc["flaky", "jobs"], stages.loc["flaky", "not_completed"]) == (2, 1)
    assert stages.loc["make_data", "max_rss_mb"] == pytest.approx(211360 / 1024)
    datasets = accounting.totals(jobs, "dataset").set_index("dataset")
    assert (datasets.loc["alpha", "jobs"], datasets.loc["alpha", "elapsed_s"]) == (4, 9 + 11 + 11 + 11)
    assert datasets.loc["beta", "gpu_hours"] == pytest.approx(9 * 8 / 3600)
    assert datasets.loc["(shared)", "jobs"] == 3  # sleepy x2 and later: no dataset, no model wildcard
    assert datasets["jobs"].sum() == len(jobs)


def test_write_accounting(tmp_path: Path, log_dir: Path) -> None:
    jobs = accounting.snakemake_jobs(allocations(), accounting.read_job_logs(log_dir), WORKDIR)
    accounting.write_accounting(jobs, tmp_path / "out")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out" / "jobs.parquet"), jobs, check_dtype=False)
    assert set(pd.read_parquet(tmp_path / "out" / "stages.parquet")["rule"]) == set(jobs["rule"])
    md = (tmp_path / "out" / "jobs.md").read_text()
    assert "9 jobs, 0.044 GPU-hours" in md
    assert "| pretrain_model | alpha_tiny_1 |" in md
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "datasets.parquet", "gpu_hours.png", "jobs.md", "jobs.parquet", "models.parquet", "runs.parquet",
        "stages.parquet",
    ]  # fmt: skip


def test_parse_dry_run_counts_planned_jobs_and_gpus() -> None:
    planned = accounting.parse_dry_run(DRY_RUN)
    assert planned.groupby("rule")["gpus"].agg(list).to_dict() == {
        "all": [0],
        "flaky": [0],
        "make_data": [0, 0],
        "pretrain_model": [8, 8],
    }


def _benchmark(path: Path, seconds: list[float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{s}\t0:00:00\t100\t200\t90\t95\t0\t0\t0.5\t{s}\n" for s in seconds)
    path.write_text("s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n" + rows)


def test_estimate_gpu_hours_from_benchmarks(tmp_path: Path) -> None:
    _benchmark(tmp_path / "pretrain_model" / "alpha" / "tiny_1.tsv", [100.0])
    _benchmark(tmp_path / "pretrain_model" / "beta_tiny_1.tsv", [200.0, 300.0])
    _benchmark(tmp_path / "make_data" / "alpha.tsv", [5.0])
    means = accounting.benchmark_mean_seconds(tmp_path)
    assert means.to_dict() == {"make_data": 5.0, "pretrain_model": 200.0}
    estimate = accounting.estimate_gpu_hours(accounting.parse_dry_run(DRY_RUN), means)
    assert estimate.to_dict("records") == [
        {"rule": "pretrain_model", "jobs": 2, "gpus": 8, "mean_s": 200.0, "gpu_hours": 2 * 200.0 * 8 / 3600}
    ]


def test_estimate_needs_benchmarks_for_gpu_rules_only(tmp_path: Path) -> None:
    planned = accounting.parse_dry_run(DRY_RUN)
    with pytest.raises(ValueError, match=r"no benchmark files for GPU rules \['pretrain_model'\]"):
        accounting.estimate_gpu_hours(planned, accounting.benchmark_mean_seconds(tmp_path))
    _benchmark(tmp_path / "make_data" / "x.tsv", [float("nan")])
    with pytest.raises(ValueError, match="non-finite"):
        accounting.benchmark_mean_seconds(tmp_path)
    assert math.isclose(
        accounting.estimate_gpu_hours(planned[planned["gpus"] == 0], pd.Series(dtype=float))["gpu_hours"].sum(), 0.0
    )


# --- efficiency, attribution, warnings ------------------------------------------------------------

@pytest.mark.parametrize(("text", "seconds"), [("00:01.500", 1.5), ("01:02:03", 3723.0), ("1-00:00:01", 86401.0),
                                               ("05:00", 300.0), ("", 0.0)])
def test_cpu_seconds(text: str, seconds: float) -> None:
    assert accounting.cpu_seconds(text) == pytest.approx(seconds)


def test_req_mem_per_job_node_or_cpu() -> None:
    assert accounting.req_mem_mb("4000M", cpus=4) == 4000.0
    assert accounting.req_mem_mb("1000Mc", cpus=4) == 4000.0
    assert accounting.req_mem_mb("2Gn", cpus=4, nodes=2) == 4096.0
    assert math.isnan(accounting.req_mem_mb("", cpus=1))


def test_shared_stage_jobs_are_split_over_their_models_datasets(log_dir: Path) -> None:
    """A job with a model but no dataset (fine-tuning a model scored on alpha and beta) counts half for each."""
    jobs = accounting.snakemake_jobs(allocations(), accounting.read_job_logs(log_dir), WORKDIR)
    tiny = jobs[jobs["job_id"] == "11"].assign(job_id="99", rule="sft_contaminate", dataset=None, gpu_hours=1.0)
    other = jobs[jobs["job_id"] == "11"].assign(job_id="98", rule="sft_contaminate", dataset=None, model="lonely",
                                                gpu_hours=2.0)
    jobs = pd.concat([jobs, tiny, other], ignore_index=True)
    before = accounting.totals(jobs.iloc[:-2], "dataset").set_index("dataset")["gpu_hours"]
    after = accounting.totals(jobs, "dataset").set_index("dataset")
    assert after.loc["alpha", "gpu_hours"] == pytest.approx(before["alpha"] + 0.5)
    assert after.loc["beta", "gpu_hours"] == pytest.approx(before["beta"] + 0.5)
    assert after.loc["(shared)", "gpu_hours"] == pytest.approx(2.0)   # a model no dataset job names
    assert after["gpu_hours"].sum() == pytest.approx(jobs["gpu_hours"].sum())   # nothing counted twice
    by_model = accounting.totals(jobs, "model").set_index("model")
    assert by_model.loc["tiny", "gpu_hours"] == pytest.approx(before.sum() + 0.5 + 0.5)


def test_warning_when_the_cluster_does_not_track_gpus() -> None:
    untracked = "Configuration data as of 2026-11-29T14:00:00\nAccountingStorageTRES   = cpu,mem,energy,node,billing\n"
    warning = accounting.gpu_tracking_warning(untracked)
    assert "does not track gres/gpu" in warning and "GPU-hours below read 0" in warning
    assert accounting.gpu_tracking_warning("AccountingStorageTRES = cpu,mem,gres/gpu,gres/gpu:h200\n") is None
    assert accounting.gpu_tracking_warning(None) is None and accounting.gpu_tracking_warning("Other = 1\n") is None


def test_report_script_writes_the_warning(tmp_path: Path, log_dir: Path) -> None:
    """workflow_scripts/accounting.py report: sacct and scontrol text from files, the warning in jobs.md."""
    import subprocess
    import sys

    legacy = tmp_path / "sacct.txt"   # the script reads the current --format: pad the legacy text's lines
    legacy.write_text("\n".join(line + "|" * (len(accounting.SACCT_FIELDS) - len(LEGACY_FIELDS))
                                for line in SACCT.splitlines()))
    scontrol = tmp_path / "scontrol.txt"
    scontrol.write_text("AccountingStorageTRES   = cpu,mem,energy,node,billing\n")
    proc = subprocess.run([sys.executable, str(HERE.parents[1] / "workflow_scripts" / "accounting.py"), "report",
                           "--out-dir", str(tmp_path / "out"), "--workdir", WORKDIR, "--log-dir", str(log_dir),
                           "--sacct-file", str(legacy), "--sacct-delimiter", "|", "--scontrol-file", str(scontrol)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "does not track gres/gpu" in proc.stderr
    assert "**Warning:** this cluster's AccountingStorageTRES" in (tmp_path / "out" / "jobs.md").read_text()


#: tests/slurm/sacct_efficiency_22.05.txt: `sacct` with the current SACCT_FIELDS after tests/test_slurm.py on
#: the test SLURM (jobs 1-9: make_data, flaky failing then passing, pretrain_model with 8 GPUs, broken
#: failing, then the partial rerun's make_data and pretrain_model of beta).
EFFICIENCY = (HERE / "sacct_efficiency_22.05.txt").read_text()


def test_efficiency_fields_from_the_test_slurm() -> None:
    df = accounting.parse_sacct(EFFICIENCY, EFFICIENCY_FIELDS, "|").set_index("job_id")
    job1 = df.loc["1"]
    assert job1["total_cpu_s"] == pytest.approx(1.050 + 1.008)   # the steps' TotalCPU (batch + step 0)
    assert job1["req_mem_mb"] == 4000.0 and job1["max_rss_mb"] == pytest.approx(182036 / 1024)
    assert df["gpu_util_pct"].isna().all() and df["gpu_mem_mb"].isna().all()   # 22.05 tracks no gpuutil
    jobs = accounting.snakemake_jobs(accounting.parse_sacct(EFFICIENCY, EFFICIENCY_FIELDS, "|"),
                                     accounting.read_job_logs(Path("/nonexistent")),
                                     "/tmp/mialab-slurm-fixture-9u7omkrb").set_index("job_id")
    assert jobs.loc["1", "queue_s"] == 0.0 and jobs.loc["3", "queue_s"] == 1.0
    assert jobs.loc["1", "cpu_efficiency"] == pytest.approx(2.058 / 9)
    assert jobs.loc["1", "mem_efficiency"] == pytest.approx(182036 / 1024 / 4000)
    stages = accounting.totals(jobs.reset_index(), "rule").set_index("rule")
    assert stages.index[0] == "pretrain_model" and stages.loc["broken", "not_completed"] == 1
    pre = jobs[jobs["rule"] == "pretrain_model"]
    assert stages.loc["pretrain_model", "cpu_efficiency"] == pytest.approx(
        pre["total_cpu_s"].sum() / (pre["elapsed_s"] * pre["alloc_cpus"]).sum())


#: Steps as SLURM >= 23.02 with AcctGatherGpuType=gpu/nvml and gres/gpuutil, gres/gpumem in
#: AccountingStorageTRES writes them (written by hand after that format: the test SLURM's GPUs are fake).
GPU_TRACKED = """\
20|run|COMPLETED|3600|16|billing=16,cpu=16,gres/gpu=4,mem=64000M,node=1||rule_adra_eval_wildcards_m_d_0_init|2026-11-30T10:00:00|2026-11-30T10:05:00|2026-11-30T11:05:00|/w|10:00:00|64000M||
20.batch|batch|COMPLETED|3600|16|cpu=16,gres/gpu=4,mem=64000M,node=1|30G||2026-11-30T10:05:00|2026-11-30T10:05:00|2026-11-30T11:05:00||00:10:00|||
20.0|python|COMPLETED|3590|16|cpu=16,gres/gpu=4,mem=64000M,node=1|32000M||2026-11-30T10:05:05|2026-11-30T10:05:05|2026-11-30T11:05:00||09:50:00||cpu=09:50:00,gres/gpumem=50000M,gres/gpuutil=62,mem=32000M|cpu=09:50:00,gres/gpumem=120000M,gres/gpuutil=100,mem=32000M
"""


def test_gpu_utilisation_where_the_cluster_tracks_it() -> None:
    job = accounting.parse_sacct(GPU_TRACKED, EFFICIENCY_FIELDS, "|").iloc[0]
    assert (job["gpu_util_pct"], job["gpu_mem_mb"]) == (62.0, 120000.0)   # average utilisation, peak memory
    assert job["total_cpu_s"] == pytest.approx(10 * 3600)
    jobs = accounting.snakemake_jobs(accounting.parse_sacct(GPU_TRACKED, EFFICIENCY_FIELDS, "|"),
                                     accounting.read_job_logs(Path("/nonexistent")), "/w")
    assert jobs.loc[0, "queue_s"] == 300.0 and jobs.loc[0, "cpu_efficiency"] == pytest.approx(10 / 16)
    assert accounting.totals(jobs, "rule").loc[0, "gpu_util_pct"] == 62.0


# --- experiments apart, efficiency warnings, slurmdbd's lag -------------------------------------------------------

def test_the_job_name_prefix_names_the_experiment() -> None:
    """profiles/slurm names every job mialab-<config file names>_<run uuid>: one prefix per experiment, in the
    characters (and the 50 of them) the plugin accepts."""
    assert accounting.experiment_name(["configs/paper/adra_aime.yaml"]) == "adra_aime"
    assert accounting.experiment_name(["/abs/config.yaml", "configs/tiny_adra.yaml"]) == "config-tiny_adra"
    assert accounting.experiment_name([]) == "config"   # the Snakefile's config.yaml
    assert accounting.jobname_prefix(["configs/paper/adra_aime_13b.yaml"]) == "mialab-adra_aime_13b"
    long = accounting.jobname_prefix([f"{'x' * 60}.yaml"])
    assert len(long) == 50 and re.fullmatch(r"[A-Za-z0-9_-]+", long)
    assert accounting.jobname_prefix([]) == accounting.jobname_prefix(["config.yaml"]) == "mialab-config"


def test_two_experiments_from_one_checkout_are_kept_apart(log_dir: Path) -> None:
    """The same checkout (working directory, log folder) ran two configs: each experiment's accounting keeps the
    jobs whose names carry its prefix."""
    df = allocations()
    ours = df["job_id"].isin(["8", "9", "10"])
    df["run_id"] = df["run_id"].where(~ours, "mialab-a_" + df["run_id"]).where(ours, "mialab-b_" + df["run_id"])
    a = accounting.snakemake_jobs(df, accounting.read_job_logs(log_dir), WORKDIR, "mialab-a")
    b = accounting.snakemake_jobs(df, accounting.read_job_logs(log_dir), WORKDIR, "mialab-b")
    assert list(a["job_id"]) == ["8", "9", "10"] and not set(a["job_id"]) & set(b["job_id"])
    assert len(a) + len(b) == len(accounting.snakemake_jobs(df, accounting.read_job_logs(log_dir), WORKDIR))
    assert accounting.snakemake_jobs(df, accounting.read_job_logs(log_dir), WORKDIR, "mialab-c").empty


def test_efficiency_warnings_name_the_stages_below_their_thresholds(log_dir: Path) -> None:
    jobs = accounting.snakemake_jobs(accounting.parse_sacct(EFFICIENCY, EFFICIENCY_FIELDS, "|"),
                                     accounting.read_job_logs(Path("/nonexistent")), "/tmp/mialab-slurm-fixture-9u7omkrb")
    jobs["time_limit_s"] = 3600.0   # asked for an hour each
    jobs["time_efficiency"] = jobs["elapsed_s"] / jobs["time_limit_s"]
    stages = accounting.totals(jobs, "rule")
    warnings = accounting.efficiency_warnings(stages, {"cpu": 0.5, "memory": 0.01, "gpu": 0.3, "time": 0.1})
    assert any(w.startswith("stage pretrain_model: CPU efficiency") for w in warnings)
    assert any(w.startswith("stage pretrain_model: share of the time limit used") for w in warnings)
    assert not any("GPU utilisation" in w for w in warnings)   # not tracked on this SLURM: not judged
    assert accounting.efficiency_warnings(stages, {"cpu": 0.0, "memory": 0.0, "gpu": 0.0, "time": 0.0}) == []


def test_the_end_of_run_accounting_waits_for_slurmdbd(tmp_path: Path, monkeypatch) -> None:
    """A job the run submitted (its log written since the run started) that sacct does not show ended yet is
    asked for again until it is, or until accounting.wait; the report is written either way, per experiment."""
    logs = tmp_path / ".snakemake" / "slurm_logs" / "rule_make_data" / "beta"
    logs.mkdir(parents=True)
    (logs / "8.log").write_text("    wildcards: dataset=beta\n")
    pad = "|" * (len(accounting.SACCT_FIELDS) - len(LEGACY_FIELDS))
    ended = "\n".join((line.replace("|5e7541b3", "|mialab-x_5e7541b3", 1) + pad).replace("|", accounting.DELIMITER)
                      for line in SACCT.splitlines()[:3])   # job 8 and its steps, as sacct now writes them
    running = ended.replace("COMPLETED", "RUNNING", 1).replace("2026-11-29T14:07:22", "Unknown", 1)
    answers = [running, running, ended]
    monkeypatch.setattr(accounting, "run_sacct", lambda since: answers.pop(0))
    monkeypatch.setattr(accounting, "scontrol_config", lambda: None)
    monkeypatch.chdir(tmp_path)
    settings = {"since": "now-1days", "wait": 60, "thresholds": {"cpu": 0, "memory": 0, "gpu": 0, "time": 0}}
    accounting.report_after_run("succeeded", settings, "x", start=0.0, poll_s=0.0)
    assert answers == []   # asked three times: twice the job had not ended
    jobs = pd.read_parquet(tmp_path / "results" / "accounting" / "x" / "jobs.parquet")
    assert list(jobs["job_id"]) == ["8"] and list(jobs["state"]) == ["COMPLETED"]
    assert (tmp_path / "results" / "logs" / "accounting-x.log").read_text().startswith("1 jobs")
    answers[:] = [running]
    accounting.report_after_run("failed", {**settings, "wait": 0}, "x", start=0.0, poll_s=0.0)
    assert "sacct did not show the end of job(s) 8" in (tmp_path / "results" / "logs" / "accounting-x.log").read_text()
