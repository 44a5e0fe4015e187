# Config validation, the content-addressed stage plans of the pipeline and of every method, input functions,
# wildcard constraints. Every name the rule files share is defined here, so their include order does not matter.
import atexit
import json
import re
import shlex
import sys

from snakemake.utils import min_version, update_config

min_version("9.0")

sys.path.insert(0, workflow.basedir)

from mialab.pipeline.cluster_checks import check_cluster_arithmetic, check_devices, check_vllm_installed, visible_gpus
from mialab.pipeline.columns import check_columns, check_targets
from mialab.pipeline.config import check_config, check_config_files, check_yaml_files, typed_overrides, validate_config
from mialab.data.sources import local_paths
from mialab.core.integrity import check_stages
from mialab.core.jobs import entry_point, export_entry_points, go_offline, tune_malloc
from mialab.lm.loading import allow_hub_kernels, pin_hub_revisions, trusts_remote_code
from mialab.pipeline.lock import apply_lock, check_sources_fetched, fetches, lock_path, read_lock
from mialab.pipeline.prefetch import check_hub_cache, hub_items, hub_revisions, pin_models
from mialab.pipeline.rehearsal import RehearsalPlan, rehearsal_log, rehearse, rehearsing, stand_in_paths, with_samples
from mialab.pipeline.sizing import Sizing, cost_report, unset_site_settings
from mialab.scoring.attacks import ATTACKS
from mialab.scoring.baselines import attack_inputs_of, attacks_of, check_methods, passive_columns
from mialab.pipeline.methods import method_plans, methods
from mialab.pipeline.plan import EPOCH_PART, SEED_PART, WILDCARDS, Plan, no_member_models, seed_part
from mialab.training.plan import RLPlan
# what one job of each sized rule computes (mialab.lm.cost), per package; each method's, from its Method entry
from mialab.data.cost import WORK as PARAPHRASE_WORK
from mialab.scoring.cost import WORK as SCORING_WORK
from mialab.training.cost import WORK as TRAINING_WORK


check_yaml_files(workflow.configfiles)  # each file Snakemake read, again: a key given twice fails (YAML keeps the last)
# before validation: a lone overlay gets the right command (this one, its base added)
check_config_files(workflow.config_settings.configfiles, sys.argv[1:])
for _key, _value in typed_overrides(workflow.config_settings.config_args):  # --config values keep their YAML types
    update_config(config, {_key: _value})
validate_config(config)  # schemas/config.schema.yaml, defaults filled in; finite numbers
# the config's lock file (mialab.pipeline.lock): the hub revisions rule prefetch resolved for it
CONFIG_FILE = workflow.configfiles[0] if workflow.configfiles else None
LOCK = lock_path(workflow.configfiles)
LOCK_MODELS = read_lock(LOCK, "models")  # the hub models' commits, for those the config does not pin
if rehearsing(config):  # CPU rehearsal (mialab.pipeline.rehearsal): the paper config with local data samples, checked as written
    _paper = with_samples(config)
    config.clear()
    config.update(_paper)
else:
    apply_lock(config, read_lock(LOCK))
    pin_models(config, LOCK_MODELS)
check_config(config)
check_methods(config["scoring"]["methods"], config["scoring"])  # the passive baselines' and the scoring attacks' names
# every data source pinned and fetched before any job (dry runs included), except for the run that fetches them
FETCHING = workflow.is_main_process and fetches(sys.argv[1:])  # this run fetches them (rule prefetch, the login node)
if workflow.is_main_process and not rehearsing(config) and not FETCHING:
    check_sources_fetched(config, LOCK, sys.argv[1:])
# batches, tensor parallelism and lengths vs the models and the GPUs each job gets (the profile's
# set-resources); at plan time only: a job's own process sees its node's GPUs, not every rule's
if workflow.is_main_process:
    check_cluster_arithmetic(config, set_resources=workflow.resource_settings.overwrite_resources,
                             job_gpus=Sizing(config).gpus)
if rehearsing(config):  # ... then at CPU sizes with tiny stand-in models, validated again
    _rehearsed = rehearse(config)
    if workflow.is_main_process:
        for _change in rehearsal_log(_paper, _rehearsed):
            print(f"mialab: rehearsal: {_change}", file=sys.stderr)
    config.clear()
    config.update(_rehearsed)
    validate_config(config)

# jobs inherit this: large tensors on huge pages, freed memory reused (mialab.core.jobs.with_malloc_tunables)
tune_malloc()
# ... and no run-time downloads, hub kernels included, whatever a job's script does (mialab.core.jobs.offline_environment)
go_offline()

PLAN = (RehearsalPlan if rehearsing(config) else Plan)(config, results="results",
                                                        hash_cache=".snakemake/mialab/content-hashes.json")
if workflow.is_main_process:
    for _warning in PLAN.unpinned():
        print(f"mialab: warning: {_warning}", file=sys.stderr)
SEEDS = PLAN.seeds()
DATASETS = list(config["datasets"])
MODELS = list(config["models"])
# every registered method's stages (mialab.pipeline.methods; its rules in rules/<method>.smk, which take its plan
# from METHOD_PLANS) and the GRPO runs (rules/models.smk)
METHOD_PLANS = method_plans(PLAN, config)
RL_PLAN = RLPlan(PLAN)
# the headline's and the baseline's columns are among those the methods' score tables will hold, and each paper
# target's figure is one the run computes
COLUMNS = [*passive_columns(PLAN), *(c for plan in METHOD_PLANS.values() for c in plan.columns())]
check_columns(config["evaluation"], COLUMNS)
check_targets(config["paper_targets"], COLUMNS)

# shell rules run "$MIALAB_PYTHON" and "$MIALAB_SCRIPTS/<script>": this process's, not params
export_entry_points(workflow.basedir)
# ... and load hub kernels for the models whose config allows them, no other (mialab.lm.loading.load_pretrained)
allow_hub_kernels(PLAN.hub_kernel_paths())
# ... and every hub model at its pinned commit (the config's revision or the lock file's; mialab.lm.loading.pinned)
pin_hub_revisions(hub_revisions(hub_items(config, LOCK_MODELS)))

# GPUs, CPUs, memory, runtime and partition of each GPU-capable job from the plan and the work it does
# (mialab.pipeline.sizing); a profile's set-resources still overrides them per rule
SIZING = Sizing(config, work={**SCORING_WORK, **TRAINING_WORK, **PARAPHRASE_WORK,
                              **{rule: work for m in methods() for rule, work in m.work.items()}})


def print_cost(title):
    """The planned jobs' GPU-hours per rule, requested at the first attempt and estimated (Sizing.cost)."""
    jobs = [(job.rule.name, job.wildcards) for job in workflow.dag.needrun_jobs(exclude_finished=False)]
    table = SIZING.cost(jobs)
    if len(table):
        print(cost_report(table, title))


def print_dry_run_cost():
    """A dry run's cost, after its job list (a dry run calls no onstart hook)."""
    if workflow.dryrun and getattr(workflow, "_dag", None) is not None:
        print_cost("this dry run's jobs")


if workflow.is_main_process:
    atexit.register(print_dry_run_cost)


onstart:
    # a run (not a dry run, nor the one that fetches the data) on a cluster or a GPU machine that asks for vLLM
    # fails before any job when vLLM is missing, instead of generating with transformers (a CPU run and its
    # rehearsal may)
    _executor = workflow.executor_plugin.cli_prefix if workflow.executor_plugin else "local"
    if workflow.is_main_process and not FETCHING and not rehearsing(config) and (_executor != "local" or visible_gpus()):
        check_vllm_installed(config)
    # devices a local run's jobs do not see, and hub models its offline jobs would not find, fail before any job
    if workflow.is_main_process and not FETCHING and _executor == "local":
        check_devices(config, visible_gpus())
    if workflow.is_main_process and not FETCHING:
        check_hub_cache(config, LOCK_MODELS, LOCK, sys.argv[1:])
    # a SLURM run names its site's account and partitions (docs/slurm.md, "Site settings"): the defaults are the
    # test SLURM's
    if workflow.is_main_process and not FETCHING and _executor == "slurm" and unset_site_settings():
        raise WorkflowError("site settings not set (docs/slurm.md, \"Site settings\"): "
                            + ", ".join(unset_site_settings()) + "; export them before running on SLURM")
    if workflow.is_main_process and not FETCHING:
        print_cost("this run's jobs")


def sized(rule, **getters):
    """``resources:`` of ``rule`` (``resources: **sized("rule")``); ``model=`` / ``dataset=`` map a
    job's wildcards to its model / dataset where the wildcards of those names do not name them, further
    getters give its cost model what the wildcards do not (mialab.pipeline.sizing.Sizing.rule_resources)."""
    return SIZING.rule_resources(rule, **getters)


def trust_flag(model):
    """``--trust-remote-code`` when the config lets ``model``'s folder run its own code, else ''."""
    return "--trust-remote-code" if trusts_remote_code(config, model) else ""


wildcard_constraints:
    dataset="|".join(DATASETS),
    model="|".join(MODELS),
    **{name: grammar for m in methods() for name, grammar in m.wildcards.items()},
    name="|".join(re.escape(name) for name, _ in getattr(PLAN, "stand_ins", {})) or "(?!)",
    # the scoring attacks the config runs that do per-dataset work (rule prepare_attack)
    attack="|".join(a for a in attacks_of(config["scoring"]) if ATTACKS.get(a).prepared_by) or "(?!)",
    **WILDCARDS,


def _checked(stage, wildcards):
    """The stage, after making sure the requested folder is the one the current config addresses."""
    if wildcards.key != stage.key:
        raise WorkflowError(
            f"{stage.dir}: requested key {wildcards.key} is stale; the current config addresses "
            f"key {stage.key} (outputs are content-addressed, request them through the target rules)"
        )
    return stage


def local_files(source):
    """The local files a source names (hub datasets are not files Snakemake can track)."""
    return local_paths(source)


def models_of(kind):
    """Regex alternation of the model names of one kind, for a rule's wildcard constraint."""
    names = [m for m, spec in config["models"].items() if spec["kind"] == kind]
    return "|".join(names) if names else "(?!)"


# -- paths of stage outputs, used by target rules and input functions ---------------------------
def pool_file(dataset):
    return PLAN.pool(dataset).path("pool.parquet")


def member_pool_file(dataset):
    """The pool a contaminating model trains on: paraphrased members when the dataset asks for that."""
    return PLAN.member_pool(dataset).path("pool.parquet")


def split_file(dataset, seed):
    """The split the attacks read: the paraphrased one when the dataset asks for that setting."""
    return PLAN.evaluated_split(dataset, seed).path("split.parquet")


def model_dir(model):
    """The folder a rule must build for ``model``; nothing for a given (``hf``) model."""
    return PLAN.model_path(model) if PLAN.is_built(model) else []


def model_dirs(models):
    """The folders to build for several models (given ``hf`` models need none)."""
    return [d for d in map(model_dir, models) if d]


def scores_file(model, dataset, seed):
    return PLAN.scores(model, dataset, seed).path("scores.parquet")


# Extension points, filled from every method's plan (mialab.pipeline.methods.MethodPlan):
# - SCORE_PROVIDERS: functions (model, dataset, seed) -> path of a score table (columns id, label
#   and one column per method, higher = member) or None; evaluate_dataset joins every table of a
#   (model, dataset, seed) on id, so their methods appear in the same results table.
# - EXTRA_TARGETS: further files `rule all` builds (per-method reports, figures).
# - DATASET_OUTPUTS: functions dataset -> list of paths that the per-dataset target
#   `dataset_<name>` (and `rule all`) also builds (e.g. the leakage checks of its splits).
SCORE_PROVIDERS = [scores_file, *(p for plan in METHOD_PLANS.values() for p in plan.score_providers())]
# the per-split leakage tables of every (dataset, seed), in that order (rules leakage_summary and summarize)
LEAKAGE_TABLES = [PLAN.leakage(d, s).path("leakage.parquet") for d in DATASETS for s in SEEDS]
LEAKAGE_SUMMARY = {"markdown": PLAN.output("leakage", "summary.md"), "csv": PLAN.output("leakage", "summary.csv")}
EXTRA_TARGETS = [*LEAKAGE_SUMMARY.values(), *(path for plan in METHOD_PLANS.values() for path in plan.targets())]
DATASET_OUTPUTS = [lambda ds: [PLAN.leakage(ds, s).path("leakage.parquet") for s in SEEDS]]


def evaluation_outputs(dataset):
    """The evaluation tables of a dataset (``{dataset}``: rule evaluate_dataset's patterns)."""
    files = {"per_seed": "per_seed.parquet", "summary": "summary.parquet", "headline": "headline.parquet",
             "reproduction": "reproduction.parquet", "roc": "roc.png"}
    return {name: PLAN.output("evaluation", dataset, file) for name, file in files.items()}


# the results table of every dataset (rule summarize)
SUMMARY = {name: PLAN.output("evaluation", file) for name, file in (
    ("summary", "summary.parquet"), ("per_seed", "per_seed.parquet"), ("markdown", "summary.md"),
    ("csv", "summary.csv"), ("headline", "headline.parquet"), ("headline_csv", "headline.csv"),
    ("reproduction_csv", "reproduction.csv"), ("forest", "forest.png"))}


def paper_targets(dataset):
    """The config's paper targets on ``dataset`` (the Reproduction tables' rows)."""
    return [t for t in config["paper_targets"] if t["dataset"] == dataset]


def dataset_outputs(dataset):
    """Everything one dataset produces: its splits, scores and evaluation (models excluded)."""
    out = [split_file(dataset, s) for s in SEEDS]
    out += [path for _, _, path in evaluation_runs(dataset)]
    ev = evaluation_outputs(dataset)
    out += list(ev.values())
    for provider in DATASET_OUTPUTS:
        out += provider(dataset)
    return out


def all_outputs():
    """The default target's outputs. Called by `rule all`, the last rule parsed, when every plan has
    addressed its stages: a built one whose recorded files changed or vanished fails here, before any job
    (mialab.core.integrity.check_stages; Snakemake itself only sees that the folder exists)."""
    out = model_dirs(MODELS)
    for ds in DATASETS:
        out += dataset_outputs(ds)
    if workflow.is_main_process:
        check_stages(PLAN.built)
    return out + [SUMMARY["markdown"], SUMMARY["csv"], *EXTRA_TARGETS]


def attack_inputs(dataset):
    """Each scoring attack's input files on ``dataset``, by attack and name."""
    return attack_inputs_of(PLAN, dataset)


def attack_files(wc):
    """The scoring attacks' input files as rule inputs (``<attack>_<name>``)."""
    return {f"{a}_{k}": v for a, files in attack_inputs(wc.dataset).items() for k, v in files.items()}


def prepared_run(attack, dataset):
    """The prepare_attack job of ``attack`` on ``dataset`` (mialab.pipeline.plan.Plan.attack_run)."""
    return ATTACKS.get(attack).prepared_run(PLAN, dataset)


def prepare_inputs(attack, dataset):
    """The files ``attack``'s per-dataset work reads besides the splits, by name."""
    return ATTACKS.get(attack).prepare_inputs(PLAN, dataset)


def prepare_files(wc):
    """:func:`prepare_inputs` as rule inputs."""
    return prepare_inputs(wc.attack, wc.dataset)


def prepare_model(attack):
    """The model ``attack``'s per-dataset work runs (sizes its job)."""
    return ATTACKS.get(attack).prepare_model(PLAN.scoring()[attack])


def reference_scores(wc):
    """R-Loss input: the reference model's scores on the same splits, when the model has a reference."""
    ref = PLAN.reference_of(wc.model)
    return {"reference": [scores_file(ref, wc.dataset, s) for s in SEEDS]} if ref else {}


def evaluation_runs(dataset):
    """(model, seed, path) of every score table evaluated on ``dataset``, from every provider."""
    runs = []
    for m, _ in PLAN.evaluated_pairs([dataset]):
        for s in SEEDS:
            for provider in SCORE_PROVIDERS:
                path = provider(m, dataset, s)
                if path:
                    runs.append((m, s, path))
    return runs


# -- the CPU rehearsal (rules/rehearsal.smk) -----------------------------------------------------
def stand_in(wc):
    """The stand-in stage of rule rehearsal_model's wildcards (only a rehearsal plans any)."""
    stands = getattr(PLAN, "stand_ins", {})
    if (wc.name, wc.key) not in stands:
        raise WorkflowError(f"{PLAN.pattern('rehearsal', name=wc.name, key=wc.key)}: not a stand-in of this config "
                            f"(rehearsal: {config['rehearsal']}); stand-ins: {sorted(s.dir for s in stands.values())}")
    return stands[(wc.name, wc.key)]


def stand_ins_of(value):
    """The stand-in folders a config value names (an input of the rules reading them that read no model)."""
    return sorted(stand_in_paths(value))
