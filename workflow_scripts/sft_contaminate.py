"""Entry point of rule ``sft_contaminate``; run under torchrun/deepspeed (one process per device)."""

import argparse
import json
import os

import pandas as pd

from mialab.core.jobs import Job, setup_job
from mialab.lm.loading import load_tokenizer
from mialab.training.checkpoints import check_steps, checkpoint_root
from mialab.training.sft import SFTSettings, run_sft, stage_corpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--init", required=True, help="model directory to fine-tune")
    ap.add_argument("--trust-remote-code", action="store_true",
                    help="the config lets the init folder run its own code (models.<name>.trust_remote_code)")
    ap.add_argument("--member-pool", nargs="*", default=[],
                    help="pool parquet whose label-1 rows are the members (none: post-training without members)")
    ap.add_argument("--spec", required=True, help="the model's config entry as JSON")
    ap.add_argument("--manifest", required=True, help="stage manifest as JSON")
    ap.add_argument("--out", required=True, help="output model directory")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    setup_job(None, args.threads)
    spec, manifest = json.loads(args.spec), json.loads(args.manifest)

    train = SFTSettings.from_config(spec["train"])
    # absent: plain texts; chat: filler rows and members as conversations in the init model's chat template
    chat_tok = None
    if spec.get("format") == "chat":
        chat_tok = load_tokenizer(args.init, trust_remote_code=args.trust_remote_code)
    texts, stats = stage_corpus(spec, [pd.read_parquet(p) for p in args.member_pool], chat_tok, seed=train.seed)
    manifest_path = os.path.join(os.path.dirname(args.out), "manifest.json")
    checkpoints = checkpoint_root(args.out)
    job = Job.launched([args.out, manifest_path], scratch=[checkpoints])
    # non-zero ranks write nothing; they only take part in training
    with job.directory(args.out) as tmp:
        run = run_sft(args.init, texts, str(tmp), train, trust_remote_code=args.trust_remote_code,
                      checkpoint_dir=str(checkpoints))
        steps = check_steps(run.steps, run.expected_steps, f"SFT {args.out}")
    job.finish({**manifest, "corpus": stats, "final_loss": run.losses[-1], "n_micro_steps": len(run.losses),
                "steps": steps}, manifest_path, timed=False)


if __name__ == "__main__":
    main()
