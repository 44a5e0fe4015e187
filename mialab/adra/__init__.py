"""ADRA and ADRA+ (Yin et al. 2026, active data reconstruction attack) and the N-Sampling attack.

- :mod:`.tasks`: a dataset's reconstruction task: prompt template, assistant prefix, lengths;
- :mod:`.attack`: rollouts -> per-metric membership scores (AoN / BoN), the top-5 summary;
- :mod:`.rewards`: ADRA's reward rules (own suffix, max, ADRA+ contrastive), distractors, weights;
- :mod:`.training`: the unlabelled training set, GRPO / SFT-ablation training, policy snapshots;
- :mod:`.plan`: the workflow's stage keys; :mod:`.stages`: what each workflow job does;
- :mod:`.report`: AUROC per attack and step, the comparison table and the AUROC-vs-step plot.
"""

VARIANTS = ("adra", "adra_plus", "adra_sft")  # GRPO, GRPO + contrastive reward, the SFT ablation
FINAL = "final"  # the policy at the end of training
