"""Unit tests of mialab.accounting on text captured from the real test SLURM (22.05).

tests/slurm/sacct_22.05.txt is `sacct --parsable2 --noheader --duplicates --format=<SACCT_FIELDS>`
after one run of tests/slurm/fixture through profiles/slurm (jobs 8-13: make_data x2,
pretrain_model x2 with 8 GPUs, flaky failing at 4000 MB then passing at 8000 MB), a job
requeued once (14), a pending job cancelled before it ran (15) and a foreign job without a
comment in another folder (16). tests/slurm/dry_run_9.27.txt is `snakemake --dry-run` of the
fixture through the profile.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from mialab import accounting

HERE = Path(__file__).resolve().parent / "slurm"
SACCT = (HERE / "sacct_22.05.txt").read_text()
DRY_RUN = (HERE / "dry_run_9.27.txt").read_text()
WORKDIR = "/tmp/fx"  # the fixture run's working directory, as stored by sacct

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
    return accounting.parse_sacct(SACCT)


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


def test_parse_sacct_rejects_malformed_text() -> None:
    with pytest.raises(ValueError, match="fields"):
        accounting.parse_sacct("8|name|COMPLETED")
    orphan_step = SACCT.splitlines()[1]  # 8.batch without its allocation
    with pytest.raises(ValueError, match="does not follow its allocation"):
        accounting.parse_sacct(orphan_step)


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
    fields = accounting.SACCT_FIELDS.index("Comment")
    no_comments = "\n".join(
        "|".join("" if i == fields else v for i, v in enumerate(line.split("|"))) for line in SACCT.splitlines()
    )
    jobs = accounting.snakemake_jobs(accounting.parse_sacct(no_comments), accounting.read_job_logs(log_dir), WORKDIR)
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
    assert datasets.loc["(none)", "jobs"] == 3  # sleepy x2 and later: no dataset wildcard
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
        "datasets.parquet", "jobs.md", "jobs.parquet", "stages.parquet",
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
