"""The DAG, config validation and content addressing, without running any job."""

import copy
import os
import re
import subprocess
import sys
import time

from workflow_helpers import REPO, default_config, foundation_config, make_workdir, planned_jobs, snakemake

from mialab.pipeline.plan import Plan


def test_default_dag(tmp_path):
    jobs = planned_jobs(make_workdir(tmp_path))
    assert jobs == {"build_pool": 2, "build_split": 4, "train_tokenizer": 1, "pretrain_model": 2,
                    "sft_contaminate": 2, "score_baselines": 9, "evaluate_dataset": 2, "summarize": 1, "all": 1,
                    "calibdcd_partition": 2, "calibdcd_features": 4, "calibdcd_calibrate": 2, "calibdcd_report": 1,
                    # DPDLLM's reference fine-tuned once per pool; VeilProbe's mapping models per (model, dataset)
                    "calibdcd_reference": 1, "calibdcd_veilprobe": 2,
                    # VeilProbe's key-token perturbation once per pool, for every target
                    "calibdcd_perturbation": 1,
                    # RL contamination: grpo_e1 and grpo_e2 are epochs 1 and 2 of one GRPO run (scored on aime)
                    "rl_contaminate": 2,
                    # LaRA on sft, grpo_e1, grpo_e2 x aime, one job per model for the 2 seeds; perturbations are model-free (one job)
                    "lara_perturbations": 1, "lara_features": 3, "lara_baselines": 3, "lara_scores": 3,
                    "lara_report": 1,
                    # leakage / shift checks of every split (one job per dataset) and their summary
                    "leakage_check": 2, "leakage_summary": 1,
                    # N-Sampling on sft x aime and base x wikimia (one job per target for the 2 seeds), a
                    # reconstruction report per dataset; ADRA is in configs/tiny_adra.yaml (tests/test_adra_workflow.py)
                    "n_sampling_rollouts": 2, "n_sampling_scores": 2, "adra_report": 2,
                    # MIMIR's masked LM, and the neighbourhood attack's neighbours once per dataset
                    "pretrain_mlm": 1, "prepare_attack": 2}


def test_foundation_dag(tmp_path):
    jobs = planned_jobs(make_workdir(tmp_path, foundation_config()))
    assert jobs == {"build_pool": 2, "build_split": 4, "train_tokenizer": 1, "pretrain_model": 2,
                    "sft_contaminate": 1, "score_baselines": 6, "evaluate_dataset": 2, "summarize": 1, "all": 1,
                    "leakage_check": 2, "leakage_summary": 1}


def test_multi_dataset_multi_seed_dag(tmp_path):
    cfg = foundation_config()
    cfg["seeds"] = [0, 1, 2, 3, 4]
    cfg["datasets"]["wikimia32"] = copy.deepcopy(cfg["datasets"]["wikimia"])
    cfg["datasets"]["wikimia32"]["pool"]["source"] = "resources/data/wikimia/WikiMIA_length32.parquet"
    cfg["models"]["sft"]["datasets"] = ["aime"]
    jobs = planned_jobs(make_workdir(tmp_path, cfg))
    assert jobs["build_split"] == 3 * 5
    assert jobs["score_baselines"] == 3 + 3 + 1  # base, control on 3 datasets; sft on aime only; all seeds in one job
    assert jobs["evaluate_dataset"] == 3


def test_per_dataset_target_plans_only_that_dataset(tmp_path):
    out = snakemake(make_workdir(tmp_path, foundation_config()), "-n", "dataset_aime").stdout
    assert "results/splits/aime/" in out and "results/splits/wikimia/" not in out
    assert "results/scores/sft/wikimia/" not in out


def test_keys_change_only_downstream_of_a_changed_dataset():
    a = Plan(default_config())
    cfg = default_config()
    cfg["datasets"]["aime"]["split"]["n_per_class"] = 32
    b = Plan(cfg)
    assert a.split("aime", 0).key != b.split("aime", 0).key
    assert a.scores("sft", "aime", 0).key != b.scores("sft", "aime", 0).key
    assert a.pool("aime").key == b.pool("aime").key and a.model("sft").key == b.model("sft").key
    assert a.split("wikimia", 0).key == b.split("wikimia", 0).key
    assert a.scores("base", "wikimia", 1).key == b.scores("base", "wikimia", 1).key
    cfg["datasets"]["aime"]["pool"]["max_words"] = 80  # the pool feeds SFT: the model changes too
    c = Plan(cfg)
    assert c.model("sft").key != a.model("sft").key and c.model("base").key == a.model("base").key
    assert Plan(default_config()).scores("sft", "aime", 0).manifest == a.scores("sft", "aime", 0).manifest


def test_lint_passes(tmp_path):
    """Snakemake's linter finds nothing but the per-rule software environment the rules leave out on
    purpose (one activated environment serves every job: docs/slurm.md, "The environment")."""
    proc = snakemake(make_workdir(tmp_path), "--lint", check=False)
    out = proc.stdout + proc.stderr
    findings = set(re.findall(r"^\s+\* (.+?):?$", out, re.M))
    assert findings == {"Specify a conda environment or container for each rule."}, out


#: The default world's jobs that run a trained model over every text of a dataset (its longest after training), and
#: its tables and checks of seconds.
LONG_STAGES = ("score_baselines", "calibdcd_features", "calibdcd_veilprobe", "lara_baselines", "n_sampling_rollouts")
SHORT_STAGES = ("evaluate_dataset", "leakage_check", "lara_scores", "summarize", "adra_report")


def test_long_model_jobs_go_before_the_short_tables(tmp_path):
    """Where several jobs are ready, Snakemake starts the higher priority first: the default world's long model jobs
    outrank its short tables, so that at the end short jobs fill both cores instead of one long job running alone
    (docs/status.md, "Measured on": the tiny world's seconds with one job running)."""
    out = snakemake(make_workdir(tmp_path), "-n").stdout
    priority: dict[str, set[int]] = {}
    for block in re.split(r"^(?:local)?rule ", out, flags=re.M)[1:]:
        found = re.search(r"^\s+priority: (\d+)$", block, re.M)
        priority.setdefault(block.split(":", 1)[0], set()).add(int(found[1]) if found else 0)
    assert min(min(priority[r]) for r in LONG_STAGES) > max(max(priority[r]) for r in SHORT_STAGES), priority


#: What a job that computes reconstruction metrics or reads the hub loads, and planning never needs: numba and the
#: suffix arrays of mialab.similarity.kernel, huggingface_hub.
NOT_FOR_PLANNING = ("numba", "pydivsufsort", "mialab.similarity.kernel", "huggingface_hub")


def test_planning_the_default_world_loads_no_job_library(tmp_path):
    """A dry run of the default world (every method) imports none of :data:`NOT_FOR_PLANNING`: each Snakemake
    process parses the workflow (each SLURM job's too), and would load them for nothing."""
    argv = ["snakemake", "-s", str(REPO / "Snakefile"), "--configfile", "config.yaml", "-n", "--quiet", "all"]
    code = (f"import sys\nfrom snakemake.cli import main\nsys.argv = {argv!r}\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            f"print('loaded:', sorted(m for m in {NOT_FOR_PLANNING!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=make_workdir(tmp_path), capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.findall(r"^loaded: (.*)$", proc.stdout, re.M) == ["[]"], proc.stdout[-2000:]


def test_paper_scale_grid_dry_run_is_fast(tmp_path):
    """10 datasets x 3 models x 5 seeds: the DAG builds in well under 10 s (no download in a dry run)."""
    cfg = foundation_config()
    cfg["seeds"] = [0, 1, 2, 3, 4]
    base = cfg["datasets"]["wikimia"]
    cfg["datasets"] = {f"d{i}": copy.deepcopy(base) for i in range(10)}
    cfg["models"] = {"target": {"kind": "hf", "path": "allenai/tulu-2-7b", "reference": "ref"},
                     "ref": {"kind": "hf", "path": "meta-llama/Llama-2-7b-hf"},
                     "other": {"kind": "hf", "path": "Qwen/Qwen2-7B"}}
    wd = make_workdir(tmp_path, cfg)
    t0 = time.perf_counter()
    jobs = planned_jobs(wd)
    elapsed = time.perf_counter() - t0
    assert jobs["score_baselines"] == 10 * 3 and jobs["build_split"] == 10 * 5   # scoring: one job per (model, dataset)
    assert elapsed < 20, f"dry run took {elapsed:.1f}s"
