"""LaRA: layer-wise representation analysis for contamination detection (Gwak et al. 2026).

For each question Q the method builds a structural control group and perturbations, reads the
mean-pooled hidden state of every layer for each text, and measures three geometric signatures
of memorisation, each standardised against Q's semantic neighbours:

- RSM (representation shift magnitude): how far Q moves when its key information is blanked;
- DC (directional collapse): whether that move points along the neighbours' mean move;
- RSI (representation stability index): how much paraphrases of the blanked Q spread out.

The detection score compresses each metric (signed log), standardises it per layer with a
robust z-score fitted on a clean reference set (known non-members only, never labels of the
evaluated set; the released code's label-using in-set reference is the opt-in ``lara_in_set``),
aligns each metric to its contamination direction and averages the absolute values over metrics
and layers. Higher score = more likely contaminated (member).

Modules, in pipeline order:

- :mod:`.neighbours`: semantically similar questions (``retrieval`` with faiss, or ``llm``).
- :mod:`.blanking`: BlankImportant (``numbers_entities``, ``token_loss``, ``llm``) and the code's
  edits (``num_replace``, ``var_rename``, ``distractor``).
- :mod:`.paraphrase`: paraphrastic variants keeping every ``[BLANK]`` (``wordnet``, ``llm``).
- :mod:`.construction`: the stage that builds the per-question text table with roles.
- :mod:`.features`: mean-pooled hidden states of every layer, resumable safetensors shards.
- :mod:`.metrics`: ``rsm``, ``directional_collapse``, ``rsi`` and the metrics table.
- :mod:`.detection`: signed log, robust z on the clean reference, alignment, aggregation, ablations.
- :mod:`.baselines`: output-level baselines: ReCaLL, and as the LaRA code defines them CDD,
  Self-Critique, its "Recall" (``recall_lara_code``), response PPL / Min-K% / Min-K%++, DIME.
- :mod:`.combine`: LaRA + Self-Critique rank mixture and its beta sweep.

Shared tools it uses live below it: :mod:`mialab.lm` (log-probabilities, generation with entropies,
an instruction model as a ``generate`` callable), :mod:`mialab.text` (prompt templates in
``resources/prompts/lara``, list parsing, WordNet).
"""
