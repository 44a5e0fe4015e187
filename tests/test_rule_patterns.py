"""The plan is the only place a path pattern is written (issue #19): every rule's outputs are the folders
its stage method addresses, rule files spell no path and no wildcard grammar, and their include order
does not matter."""

import copy
import os
import re

from snakemake.utils import validate
from workflow_helpers import REPO, make_workdir, merged_config, snakemake

from mialab.adra.plan import ADRAPlan
from mialab.calibdcd.plan import CalibDCDPlan
from mialab.lara.plan import LaRAPlan
from mialab.n_sampling.plan import NSamplingPlan
from mialab.pipeline.plan import LAYOUTS, STAGE_VERSIONS, Plan
from mialab.scoring.attacks import ATTACKS
from mialab.training.plan import RLPlan

RULE_FILES = sorted(set((REPO / "rules").glob("*.smk")) - {REPO / "rules" / "common.smk"})


def config_with_adra() -> dict:
    """The default tiny world with the ADRA overlay: every keyed rule but the paraphrase and rehearsal ones."""
    return merged_config("config.yaml", "configs/tiny_adra.yaml")


def planned(out: str) -> list[tuple[str, dict, list[str]]]:
    """(rule, wildcards, outputs) of every job of a dry run's output."""
    jobs = []
    for block in re.split(r"\n(?:local)?rule ", out)[1:]:
        rule, fields = block.split(":", 1)[0], dict(re.findall(r"^    (\w+): (.*)$", block, re.M))
        wildcards = dict(w.split("=", 1) for w in fields["wildcards"].split(", ")) if "wildcards" in fields else {}
        jobs.append((rule, wildcards, fields.get("output", "").split(", ")))
    return jobs


def stage_of(plans: dict, rule: str, wc: dict):
    """The stage instance a keyed job builds, from its rule's stage method (None: a rule no key addresses)."""
    plan, ns, adra, lara, calib, rl = (plans[k] for k in ("plan", "ns", "adra", "lara", "calibdcd", "rl"))
    m, d = wc.get("model"), wc.get("dataset")
    seed = int(wc["seed"]) if "seed" in wc else None
    methods = {
        "build_pool": lambda: plan.pool(d), "build_split": lambda: plan.split(d, seed),
        "train_tokenizer": plan.tokenizer, "pretrain_model": lambda: plan.model(m),
        "pretrain_mlm": lambda: plan.model(m),
        "sft_contaminate": lambda: plan.model(m),
        "rl_contaminate": lambda: next(plan.model(name) for name, spec in plan.config["models"].items()
                                       if spec["kind"] == "rl" and plan.rl_run(name).key == wc["key"]
                                       and int(spec["epoch"]) == int(wc["epoch"])),
        "score_baselines": lambda: plan.score_run(m, d),
        "prepare_attack": lambda: ATTACKS.get(wc["attack"]).prepared_run(plan, d),
        "leakage_check": lambda: plan.leakage_run(d),
        "n_sampling_rollouts": lambda: ns.rollout_run(m, d), "n_sampling_scores": lambda: ns.score_run(m, d),
        "adra_train": lambda: adra.train(m, d, wc.get("variant"), seed),
        "adra_eval": lambda: adra.rollouts(m, d, seed, wc.get("policy")),
        "adra_scores": lambda: adra.scores(m, d, seed, wc.get("policy")),
        "lara_perturbations": lambda: lara.perturbation_run(d),
        "lara_features": lambda: lara.model_run("features", m, d),
        "lara_baselines": lambda: lara.model_run("baselines", m, d), "lara_scores": lambda: lara.score_run(m, d),
        "calibdcd_partition": lambda: calib.partition(d, seed), "calibdcd_reference": lambda: calib.reference(d),
        "calibdcd_perturbation": lambda: calib.perturbation(d),
        "calibdcd_features": lambda: calib.features(m, d, wc.get("scope")),
        "calibdcd_veilprobe": lambda: calib.veilprobe(m, d), "calibdcd_calibrate": lambda: calib.score_run(m, d),
    }
    if "key" not in wc:
        return None
    assert rule in methods, f"rule {rule}: a keyed rule this test does not know; add its stage method"
    return methods[rule]()


def test_every_keyed_output_is_in_the_folder_its_stage_method_addresses(tmp_path):
    """The dry run's outputs (Snakemake filling the rules' patterns) against the plans' own stage folders."""
    cfg = config_with_adra()
    out = snakemake(make_workdir(tmp_path, cfg), "-n", "--forceall").stdout
    cfg = copy.deepcopy(cfg)
    validate(cfg, str(REPO / "schemas" / "config.schema.yaml"))
    plan = Plan(cfg)
    ns = NSamplingPlan(plan, cfg)
    plans = {"plan": plan, "ns": ns, "adra": ADRAPlan(ns, cfg), "lara": LaRAPlan(plan, cfg),
             "calibdcd": CalibDCDPlan(plan, cfg), "rl": RLPlan(plan)}
    keyed = set()
    for rule, wc, outputs in planned(out):
        stage = stage_of(plans, rule, wc)
        if stage is None:
            assert not any(re.search(r"/[0-9a-f]{12}(/|$)", o) for o in outputs), (rule, outputs)
            continue
        keyed.add(rule)
        assert wc["key"] == stage.manifest.get("run", stage.key), rule  # an RL epoch's folder: its run's key
        assert stage.path("manifest.json") in outputs, (rule, outputs)
        assert all(os.path.commonpath([o, stage.dir]) == stage.dir for o in outputs), (rule, stage.dir, outputs)
    assert {"build_split", "rl_contaminate", "adra_eval", "calibdcd_calibrate", "lara_scores",
            "prepare_attack"} <= keyed


def test_rule_files_write_no_path_and_no_wildcard_grammar():
    """Outside rules/common.smk no rule file spells a results path, a seed or epoch folder, or a regex."""
    for smk in [*RULE_FILES, REPO / "Snakefile"]:
        code = "\n".join(line.split("  # ")[0] for line in smk.read_text().splitlines()
                         if not line.lstrip().startswith("#"))
        for literal in ("results/", "seed-{", "epoch-{", "{key}"):
            assert literal not in code, f"{smk.name}: {literal!r}: take the pattern from the plan"
        for block in re.findall(r"wildcard_constraints:\n((?:        .*\n)+)", code):
            literals = re.findall(r"[\"']([^\"']*)[\"']", block)  # a kind or a name is fine, a regex is not
            assert not any(re.search(r"[\\\[\]()*+?{}]", s) for s in literals), \
                f"{smk.name}: {block}: a wildcard's grammar belongs to the Python that defines it"


def test_every_stage_has_one_layout_and_one_version():
    """One table each, keyed by the full stage name (models: one version per trained kind)."""
    assert set(LAYOUTS) == {"models" if k.startswith("models/") else k for k in STAGE_VERSIONS}
    for smk in RULE_FILES:
        assert "STAGE_VERSIONS" not in smk.read_text()


def test_rule_files_work_in_any_include_order(tmp_path):
    """A Snakefile including the rule files in reverse order (common.smk first) plans the same jobs and outputs."""
    from mialab.pipeline.methods import methods, rule_file

    snakefile = (REPO / "Snakefile").read_text().replace('include: "rules/', f'include: "{REPO}/rules/')
    # the registered methods' rule files, which the Snakefile includes in a loop, as lines of their own
    snakefile, looped = re.subn(r"^for _rules in .*\n\n    include: _rules\n",
                                "".join(f'include: "{REPO}/{rule_file(m)}"\n' for m in methods()), snakefile, flags=re.M)
    assert looped == 1
    includes = re.findall(r'^include: ".*/rules/(?!common\.smk).*"\n', snakefile, re.M)
    for line in includes:
        snakefile = snakefile.replace(line, "", 1)
    common = f'include: "{REPO}/rules/common.smk"\n'
    alt = tmp_path / "Snakefile"
    alt.write_text(snakefile.replace(common, common + "".join(includes[::-1])))
    wd = make_workdir(tmp_path / "wd", config_with_adra())
    base = snakemake(wd, "-n", "--forceall").stdout
    other = snakemake(wd, "-n", "--forceall", "-s", str(alt)).stdout
    assert len(includes) > 10 and sorted(map(repr, planned(base))) == sorted(map(repr, planned(other)))
