"""Rule summarize: the headline table and forest plot, the paper's figures beside the run's, then every method as
the appendix (parquet, markdown, csv for the report)."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import json
from pathlib import Path

import pandas as pd

from mialab.core.io import atomic_path, write_parquet, write_text
from mialab.evaluation.report import forest_figure, results_markdown

inp, out, params = snakemake.input, snakemake.output, snakemake.params  # noqa: F821
targets, boot = params.fpr_targets, params.bootstrap
summary = pd.concat([pd.read_parquet(p) for p in inp.summaries], ignore_index=True)
per_seed = pd.concat([pd.read_parquet(p) for p in inp.per_seed], ignore_index=True)
headline = pd.concat([pd.read_parquet(p) for p in inp.headlines], ignore_index=True)
reproduction = pd.concat([pd.read_parquet(p) for p in inp.reproductions], ignore_index=True)
write_parquet(summary, out.summary)
write_parquet(per_seed, out.per_seed)
write_parquet(headline, out.headline)
leakage = list(inp.get("leakage", []))
checks = pd.concat([pd.read_parquet(p) for p in leakage], ignore_index=True) if leakage else None
pools = [json.loads(Path(p).read_text()) for p in inp.get("pools", [])]
markdown = results_markdown(summary, headline, fpr_targets=targets, bootstrap=boot,
                            truncation_warn=params.truncation_warn, checks=checks,
                            repeats={m["dataset"]: m.get("exact_repeats_dropped") for m in pools},
                            controls=params.controls, reproduction=reproduction)
write_text(markdown, out.markdown)
write_text(summary.round(4).to_csv(index=False), out.csv)
write_text(headline.round(4).to_csv(index=False), out.headline_csv)
write_text(reproduction.round(4).to_csv(index=False), out.reproduction_csv)
with atomic_path(out.forest) as tmp:
    forest_figure(headline, params.headline, str(tmp), boot["level"])
