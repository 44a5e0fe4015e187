# mialab: membership inference and data-contamination detection for language models.
# The config is config.yaml (the offline tiny world) when no --configfile is given, else exactly the
# files given: one complete experiment config, then the overlays of it (docs/configuration.md).
# See README.md for the pipeline and docs/configuration.md for the targets.
import sys

sys.path.insert(0, workflow.basedir)  # mialab, for this file and the rule files

from mialab.pipeline.config import check_yaml_files
from mialab.pipeline.methods import methods, rule_file


if not workflow.config_settings.configfiles:
    check_yaml_files(["config.yaml"])  # before Snakemake reads it: a YAML error names the file and line

    configfile: "config.yaml"


include: "rules/common.smk"
include: "rules/rehearsal.smk"
include: "rules/data.smk"
include: "rules/paraphrase.smk"
include: "rules/models.smk"
include: "rules/scoring.smk"
include: "rules/evaluation.smk"
include: "rules/accounting.smk"
include: "rules/prefetch.smk"
include: "rules/leakage.smk"


# every registered method's rule file (mialab.pipeline.methods: rules/<method>.smk), each after those it needs
for _rules in [rule_file(m) for m in methods()]:

    include: _rules


include: "rules/targets.smk"


rule all:
    default_target: True
    input:
        all_outputs(),
