# mialab: membership inference and data-contamination detection for language models.
# The default config.yaml is the offline tiny world; see README.md for the pipeline and targets.

configfile: "config.yaml"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/paraphrase.smk"
include: "rules/models.smk"
include: "rules/scoring.smk"
include: "rules/evaluation.smk"
include: "rules/accounting.smk"
include: "rules/calibdcd.smk"
include: "rules/lara.smk"
include: "rules/leakage.smk"
include: "rules/reconstruction.smk"
include: "rules/adra.smk"
include: "rules/targets.smk"


rule all:
    default_target: True
    input:
        all_outputs(),
