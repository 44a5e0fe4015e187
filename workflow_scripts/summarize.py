"""Rule summarize: the headline table and forest plot, then every method as the appendix (parquet,
markdown, csv for the report)."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.core.io import atomic_path, write_parquet, write_text
from mialab.evaluation.headline import headline_markdown
from mialab.evaluation.metrics import fpr_column
from mialab.evaluation.report import forest_figure, markdown_table, truncation_warnings

inp, out, params = snakemake.input, snakemake.output, snakemake.params  # noqa: F821
targets, boot = params.fpr_targets, params.bootstrap
summary = pd.concat([pd.read_parquet(p) for p in inp.summaries], ignore_index=True)
per_seed = pd.concat([pd.read_parquet(p) for p in inp.per_seed], ignore_index=True)
headline = pd.concat([pd.read_parquet(p) for p in inp.headlines], ignore_index=True)
write_parquet(summary, out.summary)
write_parquet(per_seed, out.per_seed)
write_parquet(headline, out.headline)
metrics = ["auroc", *(fpr_column(t) for t in targets)]
warnings = truncation_warnings(summary, params.truncation_warn)
markdown = "# Membership inference results\n\n"
if warnings:
    markdown += "".join(f"> **Warning (truncation):** {w}\n>\n" for w in warnings) + "\n"
markdown += ("## Headline\n\n" + headline_markdown(headline, targets, boot["level"], boot["resamples"])
             + "\nFigures: `results/evaluation/forest.png` (AUROC with intervals), "
               "`results/evaluation/<dataset>/roc.png` (low-FPR ROC of the headline rows); per-method figures "
               "in `results/adra/report/<dataset>/steps.png` (AUROC against the RL step) and "
               "`results/lara/report/<dataset>/layers.png` (LaRA's layers), where those methods ran.\n")
markdown += ("\n## Appendix: every method and ablation\n\nAUROC and TPR at FPR ≤ target, in %, mean ± std over "
             "seeds (higher score = member; see README, 'Conventions'). Summaries picked on the evaluation labels "
             "(best, top-5) are optimistic.\n\n" + markdown_table(summary, metrics))
leakage = list(inp.get("leakage", []))
if leakage:
    from mialab.checks.leakage import split_checks_markdown

    checks = pd.concat([pd.read_parquet(p) for p in leakage], ignore_index=True)
    markdown += ("\n## Split checks\n\nPer dataset, without any model: the blind baseline (cross-validated AUROC "
                 "of a bag-of-n-grams classifier; near 50% = no topic or date shift, flagged above the "
                 "configured threshold), the AUROC of length alone, and cross-class duplicate pairs; "
                 "details in results/leakage/summary.md.\n\n" + split_checks_markdown(checks))
write_text(markdown, out.markdown)
write_text(summary.round(4).to_csv(index=False), out.csv)
write_text(headline.round(4).to_csv(index=False), out.headline_csv)
with atomic_path(out.forest) as tmp:
    forest_figure(headline, params.headline, str(tmp), boot["level"])
