"""Entry point of rule ``rl_contaminate``: one epoch of a GRPO run (one process per device, torchrun)."""

import argparse
import json

import pandas as pd

from mialab.core.io import write_parquet
from mialab.core.jobs import Job, setup_job
from mialab.data.rl_corpus import stage_corpus
from mialab.training.grpo import GRPOSettings, epoch_record, export_checkpoint, run_grpo
from mialab.training.rewards import make_reward


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--init", required=True, help="model directory the run starts from")
    ap.add_argument("--trust-remote-code", action="store_true",
                    help="the config lets the init folder run its own code (models.<name>.trust_remote_code)")
    ap.add_argument("--member-pool", required=True, help="pool parquet whose label-1 rows are the members")
    ap.add_argument("--member-split", help="split parquet: only its label-1 rows are members (members.split_seed)")
    ap.add_argument("--spec", required=True, help="the model's config entry as JSON")
    ap.add_argument("--manifest", required=True, help="the run's manifest as JSON")
    ap.add_argument("--epoch", type=int, required=True, help="train until the end of this epoch")
    ap.add_argument("--previous", help="trainer checkpoint at the end of the previous epoch")
    ap.add_argument("--work", required=True, help="folder of this epoch's periodic trainer checkpoints")
    for out in ("model", "trainer", "corpus", "log", "manifest"):
        ap.add_argument(f"--out-{out}", required=True)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    setup_job(None, args.threads)
    spec, manifest = json.loads(args.spec), json.loads(args.manifest)
    job = Job.launched([args.out_model, args.out_trainer, args.out_corpus, args.out_log, args.out_manifest],
                       scratch=[args.work])

    corpus = stage_corpus(spec, pd.read_parquet(args.member_pool),
                          pd.read_parquet(args.member_split) if args.member_split else None)
    run = run_grpo(args.init, corpus[["prompt", "reference"]], make_reward(spec["reward"]),
                   GRPOSettings.from_config(spec["train"]), args.work, resume_from=args.previous,
                   until_epoch=args.epoch, trust_remote_code=args.trust_remote_code)
    if not job.publishes:
        return
    log, record = epoch_record(run, corpus, args.epoch, f"GRPO epoch {args.epoch} ({args.out_model})")
    with job.directory(args.out_model) as tmp:
        export_checkpoint(run.checkpoint, tmp, init=args.init, trust_remote_code=args.trust_remote_code)
    job.publish_folder(run.checkpoint, args.out_trainer)
    write_parquet(corpus, args.out_corpus)
    write_parquet(log, args.out_log)
    job.finish({**manifest, **record}, args.out_manifest)


if __name__ == "__main__":
    main()
