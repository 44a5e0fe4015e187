"""Entry point of rule ``adra_train``: train one ADRA variant on a split's unlabelled candidates
(one process per device, torchrun). A rerun resumes from the last checkpoint in ``--work``."""

import argparse
import json
from pathlib import Path

import pandas as pd

from mialab.core.io import write_parquet
from mialab.core.jobs import Job, setup_job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True, help="the target model's folder (or hub id)")
    ap.add_argument("--trust-remote-code", action="store_true",
                    help="the config lets this model folder run its own code (models.<name>.trust_remote_code)")
    ap.add_argument("--split", required=True, help="the split whose candidates are trained on (labels dropped)")
    ap.add_argument("--baseline-scores", help="passive baseline scores of the split (ADRA+ weights)")
    ap.add_argument("--manifest", required=True, help="the stage manifest as JSON (its config drives the run)")
    ap.add_argument("--work", required=True, help="folder of the trainer's periodic checkpoints")
    for out in ("adapters", "training-set", "log", "manifest"):
        ap.add_argument(f"--out-{out}", required=True)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    setup_job(None, args.threads)
    from mialab.adra.stages import train
    from mialab.adra.training import run_record

    manifest = json.loads(args.manifest)
    job = Job.launched([args.out_adapters, args.out_training_set, args.out_log, args.out_manifest], scratch=[args.work])
    snapshots = Path(args.work) / "snapshots"
    baseline = pd.read_parquet(args.baseline_scores) if args.baseline_scores else None
    data, log = train(args.model, pd.read_parquet(args.split), manifest["config"], Path(args.work) / "trainer",
                      snapshots, baseline_scores=baseline, trust_remote_code=args.trust_remote_code)
    if not job.publishes:
        return
    job.publish_folder(snapshots, args.out_adapters)
    write_parquet(data, args.out_training_set)
    log, record = run_record(log, data)
    write_parquet(log, args.out_log)
    job.finish({**manifest, **record}, args.out_manifest)


if __name__ == "__main__":
    main()
