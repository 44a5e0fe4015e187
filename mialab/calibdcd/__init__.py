"""CalibDCD (Yang et al. 2026): calibrating post-training feature shifts of feature-based DCD detectors.

Modules, in pipeline order:

- ``views``: the controlled query views (8 universal response-format cues + 2 chat-template
  boundary views per model family) and the original query ``e0``.
- ``perturb`` / ``reference`` / ``mapping`` / ``features`` / ``extract``: the two feature-based detectors'
  feature extractors, DPDLLM (a reference model fine-tuned on the pool texts reads the target's
  sampled continuation) and VeilProbe (two BERT encoder-decoder mapping models trained on the
  target's input-output pairs read the query and its key-token-perturbed copy), and their entries.
- ``classifiers``: Gaussian naive Bayes (DPDLLM) and the prototypical network with Welch-test
  feature pruning (VeilProbe).
- ``shift``: Multi-View Shift Detection (FPP view ranking, weighted shift bases, consensus).
- ``correction``: Bounded Feature Correction and the (r, lambda) selection rule.
- ``calibrate``: the fitted calibration, the ablation variants, false-positive recovery, and the
  stage entry ``run_calibdcd``; ``frames``: the feature tables passed between stages.
"""
