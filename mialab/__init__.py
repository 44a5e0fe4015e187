"""mialab: membership inference and data-contamination detection for language models.

The package holds the logic; the Snakemake workflow (``Snakefile``, ``rules/``) and the thin
entry points in ``workflow_scripts/`` only wire it together. Its sub-packages are floors
(:data:`FLOORS`, lowest first); a module imports only from its own package or from a lower floor,
so the imports have no cycles (``tests/test_layers.py``):

- ``core``: io, content hashes, registry, progress, job entry points, the launcher.
- ``text``: prefix cutting, word tokeniser, protected spans, WordNet, LLM prompt helpers.
- ``lm``: model loading, batched log-probabilities, generation (``hf``, ``vllm``), embeddings, tiny models.
- ``similarity``: reconstruction metrics (token, LCS, n-gram, embedding) and their fast kernel.
- ``data``: benchmark families, member/non-member pools and splits (parquet), corpora, paraphrases.
- ``checks``: train/evaluation leakage.
- ``pipeline``: the plan, the config, cluster checks, sizing, rehearsal, prefetch, accounting.
- ``training``: pretraining, SFT contamination, GRPO (TRL + LoRA) and its rewards.
- ``evaluation``: AUROC / TPR at FPR with confidence intervals, tables, figures.
- the methods: ``scoring`` (Loss, R-Loss, Zlib, Min-K%, Min-K%++), ``n_sampling``, then ``adra``
  (ADRA / ADRA+, evaluated by N-Sampling), ``lara`` and ``calibdcd``.

A method with a config section, stages and rules of its own declares them in its ``method`` module, which
registers it with :data:`mialab.pipeline.methods.METHODS`: the pipeline loops over the registered methods and names
none of them (``docs/extending.md``).
"""

__version__ = "0.1.0"

#: The floors, lowest first; packages of one floor do not import each other.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("core",), ("text",), ("lm",), ("similarity",), ("data",), ("checks",), ("pipeline",), ("training",),
    ("evaluation",), ("scoring",), ("n_sampling",), ("adra", "lara", "calibdcd"),
)
