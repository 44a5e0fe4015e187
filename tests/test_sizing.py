"""Cluster resources from the plan (mialab.pipeline.sizing): every job asks for the GPUs its code uses, CPUs,
memory and runtime from the model size, the GPUs and earlier runs, and a single node; a dry run of
every paper config under profiles/slurm shows it."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate
from workflow_helpers import REPO, default_config, dry_run_as_documented

from mialab.pipeline.cluster_checks import check_cluster_arithmetic
from mialab.pipeline.config import ConfigError
from mialab.pipeline.sizing import Sizing

SCHEMA = str(REPO / "schemas" / "config.schema.yaml")
CONFIGS = sorted((REPO / "configs" / "paper").glob("*.yaml"))
JOB_RE = re.compile(r"^(?:local)?rule (?P<rule>\w+):$")


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


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_paper_config_jobs_ask_for_what_their_code_uses(path: Path):
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
        if want:
            gpu_rules.add(rule)
            assert res["gpu_model"] == "h200"
            assert int(res["cpus_per_task"]) >= 4 * want
            small = rule in ("calibdcd_reference", "calibdcd_veilprobe", "calibdcd_perturbation")   # GPT-2(-large), mapping: < 1B
            assert (8000 if small else 30000) < int(res["mem_mb"]) <= 256000, (rule, res)   # a 7B model's weights
            assert 0 < int(res["runtime"]) <= 1440
    assert gpu_rules, "no GPU job planned"


def test_gpus_are_the_tensor_parallel_size_the_world_size_or_one():
    cfg = paper("calibdcd_instruct_models")
    s = Sizing(cfg, benchmarks=Path("/nonexistent"), environ={})
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
    s = Sizing(cfg, benchmarks=Path("/nonexistent"), environ={})
    reference, mapping = s.job("calibdcd_reference"), s.job("calibdcd_veilprobe")
    assert (reference.kind, reference.gpus, reference.params_b) == ("train", 1, pytest.approx(0.124))  # GPT-2
    assert (mapping.kind, mapping.gpus) == ("train", 1) and 0.05 < mapping.params_b < 0.1   # 6 + 6 BERT layers
    r = s.resources(reference, "calibdcd_reference")
    assert (r["gpu"], r["cpus_per_task"], r["runtime"]) == (1, 4, 1440)   # a GPU's share of the node, a day
    assert r["mem_mb"] == int(4000 + 0.124 * 2000 * 2 + 4000)
    assert s.gpus("calibdcd_veilprobe") == 1
    perturbation = s.job("calibdcd_perturbation")   # VeilProbe's attribution: GPT-2 / -medium / -large, once per pool
    assert (perturbation.kind, perturbation.gpus, perturbation.params_b) == ("generate", 1, pytest.approx(0.774, abs=0.01))
    cfg["calibdcd"]["lm"]["device"] = "cpu"
    cpu = Sizing(cfg, environ={})
    assert cpu.job("calibdcd_reference").gpus == cpu.job("calibdcd_veilprobe").gpus == 0
    assert cpu.job("calibdcd_perturbation").gpus == 0
    assert cpu.resources(cpu.job("calibdcd_veilprobe"), "calibdcd_veilprobe")["gpu_model"] == ""   # a CPU job


def test_site_settings_and_attempts_change_the_request():
    cfg = paper("adra_aime")
    env = {"MIALAB_SLURM_GPU_MODEL": "", "MIALAB_SLURM_CONSTRAINT": "h200&ib", "MIALAB_SLURM_RUNTIME_CAP": "600",
           "MIALAB_SLURM_GPUS_PER_NODE": "4", "MIALAB_SLURM_GPU_CPUS": "64", "MIALAB_SLURM_GPU_MEM_MB": "100000"}
    s = Sizing(cfg, benchmarks=Path("/nonexistent"), environ=env)
    job = s.job("sft_contaminate", "tulu2_aime")
    assert job.gpus == 4                                 # a full node of this site
    r1, r2 = s.resources(job, "sft_contaminate", 1), s.resources(job, "sft_contaminate", 2)
    assert (r1["gpu"], r1["gpu_model"], r1["constraint"], r1["cpus_per_task"]) == (4, "", "h200&ib", 64)
    assert r1["runtime"] == r2["runtime"] == 600         # 24 h default, capped
    assert r1["mem_mb"] == 4000 + 6.74 * 2000 * 5 + 4000 and r2["mem_mb"] == 100000   # x attempt, capped at a node
    assert set(s.rule_resources("adra_eval")) == {"gpu", "gpu_model", "cpus_per_task", "mem_mb", "runtime", "constraint"}
    scores = s.resources(s.job("adra_scores"), "adra_scores")
    assert scores["cpus_per_task"] == 16 and scores["gpu"] == 1  # metrics.workers; the 8B encoder on a GPU
    cpu = Sizing(validated(default_config()), environ=env)
    assert "constraint" not in cpu.resources(cpu.job("n_sampling_scores"), "n_sampling_scores")


def test_runtime_comes_from_earlier_runs_benchmarks(tmp_path: Path):
    bench = tmp_path / "adra_eval" / "tulu2_aime" / "aime"
    bench.mkdir(parents=True)
    (bench / "a.tsv").write_text("s\th:m:s\tmax_rss\n1800.5\t0:30:00\t1\n")
    (bench / "b.tsv").write_text("s\th:m:s\tmax_rss\n3000.0\t0:50:00\t1\n")
    s = Sizing(paper("adra_aime"), benchmarks=tmp_path, environ={})
    job = s.job("adra_eval", "tulu2_aime")
    assert s.resources(job, "adra_eval", 1)["runtime"] == 100     # twice the longest earlier run
    assert s.resources(job, "adra_eval", 2)["runtime"] == 200
    train = s.job("adra_train", "tulu2_aime")
    assert s.resources(train, "adra_train", 1)["runtime"] == 1440   # no benchmark: the kind's default


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
