"""mialab: membership inference and data-contamination detection for language models.

The package holds the logic; the Snakemake workflow (``Snakefile``, ``rules/``) and the thin
entry points in ``workflow_scripts/`` only wire it together. Sub-packages:

- ``mialab.data``: benchmark families, member/non-member splits (parquet), prefix rules.
- ``mialab.models``: the tiny world's tokenizer and Llama model, pretraining, SFT contamination.
- ``mialab.scoring``: token log-probabilities and the passive baselines (Loss, R-Loss, Zlib, Min-K%, Min-K%++).
- ``mialab.evaluation``: AUROC / TPR at FPR, tables, ROC plots.
"""

__version__ = "0.1.0"
