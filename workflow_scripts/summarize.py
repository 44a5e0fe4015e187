"""Rule summarize: one results table over all datasets (parquet, markdown, csv for the report)."""

from mialab.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.evaluation.metrics import fpr_column
from mialab.evaluation.report import markdown_table
from mialab.io import write_parquet, write_text

targets = snakemake.params.fpr_targets  # noqa: F821
summary = pd.concat([pd.read_parquet(p) for p in snakemake.input.summaries], ignore_index=True)  # noqa: F821
per_seed = pd.concat([pd.read_parquet(p) for p in snakemake.input.per_seed], ignore_index=True)  # noqa: F821
write_parquet(summary, snakemake.output.summary)  # noqa: F821
write_parquet(per_seed, snakemake.output.per_seed)  # noqa: F821
metrics = ["auroc", *(fpr_column(t) for t in targets)]
markdown = ("# Membership inference results\n\nAUROC and TPR at FPR ≤ target, in %, mean ± std over seeds "
            "(higher score = member; see README, 'Conventions').\n\n" + markdown_table(summary, metrics))
leakage = list(snakemake.input.get("leakage", []))  # noqa: F821
if leakage:
    from mialab.data.leakage import split_checks_markdown

    checks = pd.concat([pd.read_parquet(p) for p in leakage], ignore_index=True)
    markdown += ("\n## Split checks\n\nPer dataset, without any model: the blind baseline (cross-validated AUROC "
                 "of a bag-of-n-grams classifier; near 50% = no topic or date shift, flagged above the "
                 "configured threshold), the AUROC of length alone, and cross-class duplicate pairs; "
                 "details in results/leakage/summary.md.\n\n" + split_checks_markdown(checks))
write_text(markdown, snakemake.output.markdown)  # noqa: F821
write_text(summary.round(4).to_csv(index=False), snakemake.output.csv)  # noqa: F821
