"""mialab: membership inference and data-contamination detection for language models.

The package holds the logic; the Snakemake workflow (``Snakefile``, ``rules/``) and the thin
entry points in ``workflow_scripts/`` only wire it together. Sub-packages:

- ``mialab.data``: benchmark families, member/non-member splits (parquet), prefix rules.
- ``mialab.models``: the tiny world's tokenizer and Llama model, pretraining, SFT contamination.
- ``mialab.scoring``: token log-probabilities and the passive baselines (Loss, R-Loss, Zlib, Min-K%, Min-K%++).
- ``mialab.evaluation``: AUROC / TPR at FPR, tables, ROC plots.
- ``mialab.reconstruction``: reconstruction metrics (token, LCS, n-gram, embedding), the fast
  batched kernel, rewards (``trio``, ``ngram``, ADRA+ contrastive) and AoN/BoN aggregation.
- ``mialab.generation``: the rollout engine (``hf`` and ``vllm`` backends).
- ``mialab.rl``: the GRPO runner (TRL + LoRA) shared by ADRA and the RL-contamination stage.
- ``mialab.lara``: LaRA perturbations, layer-wise features, RSM / DC / RSI and the detection score.
- ``mialab.calibdcd``: controlled views, the DPDLLM / VeilProbe detectors and CalibDCD calibration.
- ``mialab.accounting``: SLURM job accounting (GPU-/CPU-hours per job, stage and dataset).
"""

__version__ = "0.1.0"
