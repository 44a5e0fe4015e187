"""Rule leakage_summary: every split's checks in one markdown and csv table, with warnings."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.checks.leakage import summary_markdown, warnings_of
from mialab.core.io import write_text

table = pd.concat([pd.read_parquet(p) for p in snakemake.input.tables], ignore_index=True)  # noqa: F821
table = table.sort_values(["dataset", "seed"]).reset_index(drop=True)
for line in warnings_of(table):
    print(line)
write_text(summary_markdown(table), snakemake.output.markdown)  # noqa: F821
write_text(table.round(4).to_csv(index=False), snakemake.output.csv)  # noqa: F821
