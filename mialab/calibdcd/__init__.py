"""CalibDCD (Yang et al. 2026): calibrating post-training feature shifts of feature-based DCD detectors.

Modules, in pipeline order:

- ``views``: the controlled query views (8 universal response-format cues + 2 chat-template
  boundary views per model family) and the original query ``e0``.
- ``lm`` / ``features`` / ``extract``: the two feature-based detectors' feature extractors,
  DPDLLM (reference-LM token probabilities of the target's continuation) and VeilProbe
  (input-output mapping features under key-token perturbation), and their stage entries.
- ``classifiers``: Gaussian naive Bayes (DPDLLM) and the prototypical network (VeilProbe).
- ``shift``: Multi-View Shift Detection (FPP view ranking, weighted shift bases, consensus).
- ``correction``: Bounded Feature Correction and the (r, lambda) selection rule.
- ``calibrate``: the fitted calibration, the ablation variants, false-positive recovery, and the
  stage entry ``run_calibdcd``; ``frames``: the feature tables passed between stages.
"""
