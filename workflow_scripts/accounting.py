"""Thin CLI over :mod:`mialab.pipeline.accounting`.

  report:   per-job, per-stage, per-dataset and per-model cost and efficiency of this workflow's SLURM
            jobs (sacct; scontrol for whether the cluster tracks GPUs)
      python workflow_scripts/accounting.py report --out-dir results/accounting/<experiment> \
          [--since now-30days] [--workdir .] [--log-dir .snakemake/slurm_logs] [--prefix mialab-<experiment>]
          [--thresholds cpu=0.25,memory=0.1,gpu=0.3,time=0.1] [--sacct-file FILE [--sacct-delimiter '|']]
          [--scontrol-file FILE]
  estimate: expected GPU-hours of a dry run, from benchmark files of earlier runs
      snakemake --profile profiles/slurm --dry-run | python workflow_scripts/accounting.py estimate
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mialab.pipeline import accounting  # noqa: E402


def report(args: argparse.Namespace) -> None:
    thresholds = {k: float(v) for k, v in (item.split("=", 1) for item in args.thresholds.split(",") if item)} \
        if args.thresholds else None
    jobs, warnings = accounting.report(
        args.out_dir, args.since, args.workdir, args.log_dir, args.prefix, thresholds,
        sacct_text=Path(args.sacct_file).read_text() if args.sacct_file else None,
        scontrol_text=Path(args.scontrol_file).read_text() if args.scontrol_file else None,
        delimiter=args.sacct_delimiter)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"{len(jobs)} jobs, {jobs['gpu_hours'].sum():.3f} GPU-hours -> {args.out_dir}")


def estimate(args: argparse.Namespace) -> None:
    text = sys.stdin.read() if args.dry_run == "-" else Path(args.dry_run).read_text()
    table = accounting.estimate_gpu_hours(
        accounting.parse_dry_run(text), accounting.benchmark_mean_seconds(args.benchmarks)
    )
    print(table.to_markdown(index=False, floatfmt=".3f"))
    print(f"\ntotal: {table['gpu_hours'].sum():.3f} GPU-hours")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="account this workflow's SLURM jobs")
    rep.add_argument("--out-dir", required=True)
    rep.add_argument("--since", default="now-30days", help="sacct -S (default: now-30days)")
    rep.add_argument("--workdir", default=".", help="the workflow's working directory (default: .)")
    rep.add_argument("--log-dir", default=".snakemake/slurm_logs")
    rep.add_argument("--prefix", help="only jobs whose name starts with this and '_' (an experiment's runs)")
    rep.add_argument("--thresholds", help="efficiency warnings: name=fraction,... (cpu, memory, gpu, time)")
    rep.add_argument("--sacct-file", help="read sacct text captured earlier instead of calling sacct")
    rep.add_argument("--sacct-delimiter", default=accounting.DELIMITER,
                     help="the captured text's field separator (sacct --delimiter; '|' without one)")
    rep.add_argument("--scontrol-file", help="read `scontrol show config` text instead of calling scontrol")
    rep.set_defaults(run=report)
    est = sub.add_parser("estimate", help="expected GPU-hours of a dry run")
    est.add_argument("--dry-run", default="-", help="snakemake --dry-run output (default: stdin)")
    est.add_argument("--benchmarks", default="results/benchmarks",
                     help="benchmark root: <root>/<rule>/**/*.tsv (default: results/benchmarks, where the rules write them)")
    est.set_defaults(run=estimate)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
