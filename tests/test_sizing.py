"""Cluster resources from the plan (mialab.pipeline.sizing): every job asks for the GPUs its code uses, CPUs,
memory from the model size and the GPUs, a runtime from the work it does (mialab.lm.cost,
resources/throughputs.yaml), its partition, and a single node; a dry run of every paper config under
profiles/slurm shows it and prints the GPU-hours it asks for beside the estimate, which its header states."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate
from workflow_helpers import PAPER_PLANS, REPO, default_config, dry_run_as_documented

from mialab.data.cost import WORK as PARAPHRASE_WORK
from mialab.lm.cost import Work, load_throughputs, seconds
from mialab.pipeline.cluster_checks import check_cluster_arithmetic
from mialab.pipeline.config import ConfigError
from mialab.pipeline.methods import methods
from mialab.pipeline.sizing import Sizing, site, sized_rules, unset_site_settings
from mialab.scoring.cost import WORK as SCORING_WORK
from mialab.training.cost import WORK as TRAINING_WORK

SCHEMA = str(REPO / "schemas" / "config.schema.yaml")
CONFIGS = sorted((REPO / "configs" / "paper").glob("*.yaml"))
JOB_RE = re.compile(r"^(?:local)?rule (?P<rule>\w+):$")
#: Every method's cost model, as rules/common.smk hands them to the sizing.
WORK = {**SCORING_WORK, **TRAINING_WORK, **PARAPHRASE_WORK, **{r: w for m in methods() for r, w in m.work.items()}}
#: The partitions the paper configs' dry runs are given, apart so a job's shows which it is.
PARTITIONS = {"MIALAB_SLURM_PARTITION": "h200-part", "MIALAB_SLURM_CPU_PARTITION": "cpu-part"}
#: A config header's statement of the dry run's GPU-hours.
GPU_HOURS_LINE = re.compile(r"^# GPU-hours: requested ([\d,]+) at the first attempt, estimated ([\d,]+)", re.M)
COST_ROW = re.compile(r"^  (?P<rule>\w+)\s+(?P<kind>\w+)\s+(?P<jobs>\d+)\s+(?P<gpus>[\d/]+)\s+(?P<requested>[\d.]+)\s+"
                      r"(?P<estimated>[\d.]+)\s+(?P<ratio>[\d.]+|-)$")
TOTALS = re.compile(r"^mialab: GPU-hours requested at the first attempt: ([\d,]+); estimated: ([\d,]+)$", re.M)


def validated(cfg: dict) -> dict:
    cfg = copy.deepcopy(cfg)
    validate(cfg, SCHEMA)
    return cfg


def paper(name: str) -> dict:
    return validated(yaml.safe_load((REPO / "configs" / "paper" / f"{name}.yaml").read_text()))


def planned_resources(out: str) -> list[tuple[str, dict, dict]]:
    """(rule, wildcards, resources) of every job of a dry run's output."""
    jobs, current = [], None
    for line in out.splitlines():
        text = line.strip()
        m = JOB_RE.match(text)
        if m:
            current = [m["rule"], {}, {}]
            jobs.append(current)
        elif current is not None and text.startswith("wildcards:"):
            current[1] = dict(p.split("=", 1) for p in text.removeprefix("wildcards:").strip().split(", "))
        elif current is not None and text.startswith("resources:"):
            current[2] = dict(p.split("=", 1) for p in text.removeprefix("resources:").strip().split(", "))
    return [tuple(j) for j in jobs]


def cost_table(out: str) -> dict[str, dict]:
    """The dry run's GPU-hours per rule (mialab.pipeline.sizing.cost_report), by rule."""
    block = out.split("mialab: GPU-hours of", 1)[1]
    return {m["rule"]: m.groupdict() for m in map(COST_ROW.match, block.splitlines()) if m}


def expected_gpus(cfg: dict, rule: str, wc: dict) -> int:
    """What the job's code uses, read straight from the paper config (every paper model has >= 7B
    parameters, so `launch.nproc: auto` trains on a full node of 8)."""
    if rule in ("sft_contaminate", "rl_contaminate", "adra_train"):
        assert cfg["launch"]["nproc"] == "auto"
        return 8
    if rule in ("n_sampling_rollouts", "adra_eval"):
        ns = cfg["n_sampling"]
        return ns["backend_options"]["tensor_parallel_size"] if ns["backend"] == "vllm" else 1
    if rule == "calibdcd_features":
        gen = cfg["calibdcd"]["generation"]
        return gen["backend_options"]["tensor_parallel_size"] if gen["backend"] == "vllm" else 1
    if rule in ("score_baselines", "lara_features", "lara_baselines"):
        return 1
    if rule == "lara_perturbations":   # lara.llm's instruction model writes the perturbations (none: model-free)
        llm = cfg["lara"].get("llm")
        return 0 if not llm else llm["backend_options"]["tensor_parallel_size"] if llm["engine"] == "vllm" else 1
    if rule in ("calibdcd_reference", "calibdcd_veilprobe", "calibdcd_perturbation"):
        return 0 if cfg["calibdcd"]["lm"]["device"] == "cpu" else 1   # GPT-2's fine-tuning, the mapping models, GPT-2s + BERT
    if rule in ("paraphrase", "paraphrase_pool"):   # an LLM paraphraser's engine (adra_pretraining: Qwen2.5-7B on vLLM)
        para = cfg["datasets"][wc["dataset"]]["paraphrase"]
        return 0 if para["backend"] == "offline" else para["options"].get("tensor_parallel_size", 1)
    if rule in ("n_sampling_scores", "adra_scores"):
        metrics = cfg["n_sampling"]["metrics"]
        assert (metrics["embedding_model"], metrics["embedding_dtype"]) == ("Qwen/Qwen3-Embedding-8B", "bfloat16")
        return 1   # the 8B encoder on the job's GPU, in bf16
    return 0


@PAPER_PLANS
@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_paper_config_jobs_ask_for_what_their_code_uses(path: Path, monkeypatch):
    """Each job's GPUs, memory, runtime and partition; a generation job's engine on the one GPU a 7-13B model
    fits on; the GPU-hours the dry run prints: no rule asks for more than 3x its estimate, and the header
    states the totals."""
    for name, value in PARTITIONS.items():
        monkeypatch.setenv(name, value)
    command = f"snakemake --profile profiles/slurm --configfile configs/paper/{path.name}"
    proc = dry_run_as_documented(command)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    cfg = validated(yaml.safe_load(path.read_text()))
    jobs = planned_resources(proc.stdout)
    assert jobs and all(res for _, _, res in jobs)
    gpu_rules = set()
    for rule, wc, res in jobs:
        want = expected_gpus(cfg, rule, wc)
        assert int(res.get("gpu", 0)) == want, (rule, wc, res)
        assert res["nodes"] == "1", (rule, res)
        if rule in sized_rules():   # the others: the profile's default resources, the CPU partition
            assert res["slurm_partition"] == PARTITIONS["MIALAB_SLURM_PARTITION" if want else "MIALAB_SLURM_CPU_PARTITION"]
        if rule in ("n_sampling_rollouts", "adra_eval", "calibdcd_features", "paraphrase", "paraphrase_pool",
                    "lara_perturbations"):
            assert want == 1, (rule, wc)   # a 7-13B model's bf16 weights fit one H200: no tensor parallelism
        if want:
            gpu_rules.add(rule)
            assert res["gpu_model"] == "h200"
            assert int(res["cpus_per_task"]) >= 4 * want
            small = rule in ("calibdcd_reference", "calibdcd_veilprobe", "calibdcd_perturbation")   # GPT-2(-large), mapping: < 1B
            assert (8000 if small else 30000) < int(res["mem_mb"]) <= 256000, (rule, res)   # a 7B model's weights
            assert 0 < int(res["runtime"]) <= 1440
    assert gpu_rules, "no GPU job planned"
    table = cost_table(proc.stdout)
    assert gpu_rules <= set(table), (gpu_rules, table)
    over = {r: row["ratio"] for r, row in table.items() if row["ratio"] != "-" and float(row["ratio"]) > 3}
    assert not over, f"{path.name}: rules asking for more than 3x their estimated GPU-hours: {over}"
    printed = TOTALS.search(proc.stdout)
    stated = GPU_HOURS_LINE.search(path.read_text())
    assert stated, f"{path.name}: no '# GPU-hours: requested N at the first attempt, estimated M' header line"
    assert stated.groups() == printed.groups(), (f"{path.name}: the header states {stated.groups()}, the dry run "
                                                 f"prints {printed.groups()} (requested, estimated GPU-hours)")



def test_the_slurm_guide_states_each_config_headers_gpu_hours():
    """docs/slurm.md's table of paper configs repeats each header's GPU-hours (requested, estimated), which the
    test above holds to the dry run: one figure, the same in both places."""
    rows = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(
        r"^\| (\w+) \| [\d,]+ \| ([\d,]+) \| ([\d,]+) \|$", (REPO / "docs" / "slurm.md").read_text(), re.M)}
    headers = {p.stem: GPU_HOURS_LINE.search(p.read_text()).groups() for p in CONFIGS}
    assert rows == headers


def test_gpus_are_the_tensor_parallel_size_the_world_size_or_one():
    cfg = paper("calibdcd_instruct_models")
    cfg["calibdcd"]["generation"]["backend_options"]["tensor_parallel_size"] = 4
    s = Sizing(cfg, environ={})
    assert s.job("calibdcd_features", "qwen25_7b_instruct").gpus == 4
    cfg["calibdcd"]["generation"]["backend"] = "hf"
    assert Sizing(cfg, environ={}).job("calibdcd_features", "qwen25_7b_instruct").gpus == 1
    assert s.job("score_baselines", "gpt2_reference").gpus == 1
    lara = paper("lara_rl_models")
    assert Sizing(lara, environ={}).job("rl_contaminate", "qwen25_7b").gpus == 8   # nproc auto, 7B: a full node
    lara["launch"]["nproc"] = 2
    assert Sizing(lara, environ={}).job("rl_contaminate", "qwen25_7b").gpus == 2
    tiny = validated(default_config())
    t = Sizing(tiny, environ={})
    assert t.job("sft_contaminate", "sft").gpus == 1 and t.params_b("sft") < 0.1   # the tiny world's models
    assert t.job("n_sampling_scores").gpus == 0     # the packaged MiniLM encoder stays on the CPU
    assert t.gpus("pretrain_model") is None and t.gpus("sft_contaminate") is None  # not sized / model unknown


def test_calibdcds_training_stages_run_on_one_device():
    """DPDLLM's reference fine-tuning and VeilProbe's mapping models use calibdcd.lm.device: one GPU, none on CPU."""
    cfg = paper("calibdcd_instruct_models")
    s = Sizing(cfg, WORK, environ={})
    reference, mapping = s.job("calibdcd_reference"), s.job("calibdcd_veilprobe")
    assert (reference.kind, reference.gpus, reference.params_b) == ("train", 1, pytest.approx(0.124))  # GPT-2
    assert (mapping.kind, mapping.gpus) == ("train", 1) and 0.05 < mapping.params_b < 0.1   # 6 + 6 BERT layers
    estimate = s.estimate("calibdcd_reference", reference, None, "bookmia", {})
    assert 60 < estimate < 3600   # minutes of GPT-2 fine-tuning on BookMIA's 9,870 texts, not a day
    r = s.resources(reference, estimate)
    assert (r["gpu"], r["cpus_per_task"], r["runtime"]) == (1, 4, math.ceil(2 * estimate / 60))   # a GPU's share
    assert r["mem_mb"] == int(4000 + 0.124 * 2000 * 2 + 4000)
    assert s.gpus("calibdcd_veilprobe") == 1
    perturbation = s.job("calibdcd_perturbation")   # VeilProbe's attribution: GPT-2 / -medium / -large, once per pool
    assert (perturbation.kind, perturbation.gpus, perturbation.params_b) == ("generate", 1, pytest.approx(0.774, abs=0.01))
    cfg["calibdcd"]["lm"]["device"] = "cpu"
    cpu = Sizing(cfg, environ={})
    assert cpu.job("calibdcd_reference").gpus == cpu.job("calibdcd_veilprobe").gpus == 0
    assert cpu.job("calibdcd_perturbation").gpus == 0
    r = cpu.resources(cpu.job("calibdcd_veilprobe"), 60.0)
    assert (r["gpu_model"], r["runtime"], r["slurm_partition"]) == ("", 120, "mialab")   # a CPU job


def test_site_settings_and_attempts_change_the_request():
    cfg = paper("adra_aime")
    env = {"MIALAB_SLURM_GPU_MODEL": "", "MIALAB_SLURM_CONSTRAINT": "h200&ib", "MIALAB_SLURM_RUNTIME_CAP": "600",
           "MIALAB_SLURM_GPUS_PER_NODE": "4", "MIALAB_SLURM_GPU_CPUS": "64", "MIALAB_SLURM_GPU_MEM_MB": "100000",
           "MIALAB_SLURM_PARTITION": "gpu", "MIALAB_SLURM_CPU_PARTITION": "cpu", "MIALAB_SLURM_QOS": "gpu-q",
           "MIALAB_SLURM_CPU_QOS": "cpu-q"}
    s = Sizing(cfg, WORK, environ=env)
    job = s.job("sft_contaminate", "tulu2_aime")
    assert job.gpus == 4                                 # a full node of this site
    r1, r2 = s.resources(job, 200 * 60.0, 1), s.resources(job, 200 * 60.0, 2)
    assert (r1["gpu"], r1["gpu_model"], r1["constraint"], r1["cpus_per_task"]) == (4, "", "h200&ib", 64)
    assert (r1["runtime"], r2["runtime"]) == (400, 600)   # twice the estimate, x attempt, capped
    assert r1["mem_mb"] == 4000 + 6.74 * 2000 * 5 + 4000 and r2["mem_mb"] == 100000   # x attempt, capped at a node
    assert (r1["slurm_partition"], r1["qos"]) == ("gpu", "gpu-q")
    assert set(s.rule_resources("adra_eval")) == {"gpu", "gpu_model", "cpus_per_task", "mem_mb", "runtime",
                                                  "slurm_partition", "qos", "constraint"}
    scores = s.resources(s.job("adra_scores"), 60.0)
    assert scores["cpus_per_task"] == 16 and scores["gpu"] == 1  # metrics.workers; the 8B encoder on a GPU
    cpu = Sizing(validated(default_config()), environ=env)
    r = cpu.resources(cpu.job("n_sampling_scores"), 60.0)
    assert "constraint" not in r and (r["slurm_partition"], r["qos"]) == ("cpu", "cpu-q")   # the CPU partition


def test_a_slurm_run_needs_its_sites_account_and_partitions():
    assert unset_site_settings({}) == ["MIALAB_SLURM_ACCOUNT", "MIALAB_SLURM_PARTITION", "MIALAB_SLURM_CPU_PARTITION"]
    site_env = {"MIALAB_SLURM_ACCOUNT": "a", "MIALAB_SLURM_PARTITION": "g", "MIALAB_SLURM_CPU_PARTITION": "c"}
    assert unset_site_settings(site_env) == []
    assert unset_site_settings(site_env | {"MIALAB_SLURM_CPU_QOS": "q"}) == [
        "MIALAB_SLURM_QOS (MIALAB_SLURM_CPU_QOS is set)"]   # a GPU job would take the CPU jobs' QOS
    assert (site("ACCOUNT", {}), site("QOS", {}), site("PARTITION", {"MIALAB_SLURM_PARTITION": "g"})) == \
        ("mialab", None, "g")   # the test SLURM's defaults, none, the environment's


def test_the_profile_puts_every_unsized_job_on_the_cpu_partition(monkeypatch):
    """profiles/slurm's default resources (every rule that is not sized: pools, splits, evaluation, reports) name
    the CPU partition and QOS; the GPU jobs name theirs themselves (above)."""
    import yte

    for name, value in {**PARTITIONS, "MIALAB_SLURM_CPU_QOS": "cpu-q", "MIALAB_SLURM_QOS": "gpu-q"}.items():
        monkeypatch.setenv(name, value)
    profile = yte.process_yaml((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    defaults = profile["default-resources"]
    assert (defaults["slurm_partition"], defaults["qos"]) == ("cpu-part", "cpu-q")
    assert profile["slurm-jobname-prefix"].startswith("mialab-") and profile["slurm-efficiency-report"] is True


def test_runtime_is_twice_the_estimated_work():
    """A job's runtime request from its work (mialab.lm.cost): twice the estimate, at least a few minutes; a
    rollout job of a 7B model on one H200 in minutes, not the 12 hours of the kind it used to be."""
    s = Sizing(paper("adra_aime"), WORK, environ={})
    job = s.job("adra_eval", "tulu2_aime")
    estimate = s.estimate("adra_eval", job, "tulu2_aime", "aime", {"policy": "adra-final"})
    assert job.gpus == 1 and 4 * 60 < estimate < 30 * 60   # 32 candidates x 32 rollouts x 2048 tokens, a merge
    assert s.resources(job, estimate, 1)["runtime"] == math.ceil(2 * estimate / 60)
    assert s.resources(job, estimate, 2)["runtime"] == 2 * math.ceil(2 * estimate / 60)
    assert s.resources(job, 30.0)["runtime"] == 4   # the shortest request
    init = s.estimate("adra_eval", job, "tulu2_aime", "aime", {"policy": "init"})
    assert init < estimate   # no policy to merge into the model first
    lara = Sizing(paper("lara_rl_models"), WORK, environ={})
    baselines = lara.estimate("lara_baselines", lara.job("lara_baselines", "limr"), "limr", "limr", {})
    assert 2 * 3600 < baselines < 24 * 3600   # generate of 13 answers of 4,096 tokens a question: hours


def test_every_sized_rule_has_a_cost_model_and_every_figure_its_source():
    assert set(WORK) == set(sized_rules())
    with pytest.raises(KeyError, match="no cost model for the sized rules"):
        Sizing(paper("adra_aime"), {k: v for k, v in WORK.items() if k != "adra_eval"}, environ={})
    table = load_throughputs()
    assert {k for k, row in table.rows.items() if row["measured"]} == {
        "forward_tokens_per_s", "score_tokens_per_s", "score_short_tokens_per_s", "hf_generate_tokens_per_s"}
    assert all(str(row["date"]) and row["gpu"] and row["source"] for row in table.rows.values())
    assert table.pool("swj0419/BookMIA").rows == 9870 and table.pool("not/listed") == table.pool(None)


def test_the_pricing():
    """One job's wall time: the fixed start, each model read, the work at the table's rates over its GPUs."""
    t = load_throughputs()
    start = t["job_start_s"]
    assert seconds(Work(), 1, t) == start
    assert seconds(Work(params_b=6.74, loads_b=(6.74,)), 1, t) == pytest.approx(start + 13.48)   # 1 GB/s
    vllm = Work(params_b=6.74, vllm_tokens=1e6, engines=1)
    assert seconds(vllm, 1, t) == pytest.approx(start + t["vllm_start_s"] + 1e6 / t["vllm_generate_tokens_per_s"])
    assert seconds(vllm, 2, t) < seconds(vllm, 1, t)   # tensor parallel over two GPUs
    short = Work(params_b=6.74, scored_texts=100, scored_tokens=100 * 64)
    assert seconds(short, 1, t) == pytest.approx(start + 100 * 64 / 1687)   # latency-bound: one pass a text
    hf = Work(params_b=6.74, hf_tokens=1897 * 8, hf_batch=8)
    assert seconds(hf, 1, t) == pytest.approx(start + 64)   # an eighth of the measured batch of 64: 8x longer
    fp32 = Work(params_b=6.74, dtype="float32", forward_tokens=33552)
    assert seconds(fp32, 1, t) == pytest.approx(start + t["train_flops_per_s"] / t["fp32_flops_per_s"])
    assert seconds(Work(params_b=6.74, forward_tokens=33552), 0, t) == pytest.approx(start + t["cpu_slowdown"])


def test_a_local_model_folder_is_sized_from_its_safetensors(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "float32"}))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4_000_000)   # one million float32 parameters
    cfg = validated(default_config())
    assert Sizing(cfg, environ={}).params_b(str(tmp_path)) == pytest.approx(1e-3)


def test_plan_time_checks_use_the_sized_world(tmp_path: Path):
    """Without a profile's gpu, the checks count the 8 training processes the sizing gives a 7B model:
    64 prompts per GRPO step exceed a seed's 32 AIME candidates."""
    cfg = paper("adra_aime")
    cfg["adra"]["train"].update(batch_size=32, grad_accum=8)
    with pytest.raises(ConfigError, match=r"× 8 GPUs \(rule adra_train\) / num_generations 32 = 64 prompts"):
        check_cluster_arithmetic(cfg, local_gpus=0, job_gpus=Sizing(cfg, environ={}).gpus)
    check_cluster_arithmetic(cfg, local_gpus=0)   # without the sizing: one process, 8 prompts per step
