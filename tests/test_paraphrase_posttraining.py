"""The paraphrased post-training setting at paper scale (issue #20, item 8d; ADRA Table 18): AIME and Olympiad
Math on Tulu2-7B whose contaminating SFT trains on paraphrased members, every attack evaluated on the original
candidates (``apply_to: training``), with the settings of the released code's ``*paraphrased*`` scripts."""

import pytest
import yaml
from workflow_helpers import REPO, validated

from mialab.pipeline.plan import Plan
from mialab.pipeline.rehearsal import rehearse, stand_in_paths
from mialab.pipeline.sizing import Sizing

# paraphrased config -> (original config, dataset, SFT model, the code's ADRA lr, steps, prompts per step):
# scripts/post-training/{aime,olympia-math}/submit_run_*_paraphrased_lora_h200_8.sh (optim.lr, total_epochs
# over one batch of every candidate, data.train_batch_size)
SETTINGS = {
    "adra_aime_paraphrased": ("adra_aime", "aime", "tulu2_aime", 3.0e-5, 100, 32),
    "adra_olympiad_paraphrased": ("adra_olympiad", "olympiad_math", "tulu2_olympiad", 5.0e-5, 100, 64),
}
GPUS = 8  # the code's node: batch_size x grad_accum x 8 GPUs completions per step, n of them per prompt


def paper(name: str) -> dict:
    return validated(yaml.safe_load((REPO / "configs" / "paper" / f"{name}.yaml").read_text()))


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_the_paraphrased_post_training_configs_train_the_sft_on_paraphrases_as_the_code(name):
    original_name, dataset, model, lr, steps, prompts = SETTINGS[name]
    cfg, original = paper(name), paper(original_name)
    para, base = cfg["datasets"][f"{dataset}_paraphrased"], original["datasets"][dataset]
    assert para["pool"] == base["pool"] and para["split"] == base["split"]
    assert (para["paraphrase"]["backend"], para["paraphrase"]["apply_to"]) == ("vllm", "training")
    assert para["paraphrase"]["options"]["model"] == "Qwen/Qwen2.5-7B-Instruct"
    sft, base_sft = cfg["models"][f"{model}_paraphrased"], original["models"][model]
    assert sft["members"] == {"dataset": f"{dataset}_paraphrased", "repeats": 1}
    assert {k: v for k, v in sft.items() if k != "members"} == {k: v for k, v in base_sft.items() if k != "members"}
    assert cfg["n_sampling"]["tasks"][f"{dataset}_paraphrased"] == original["n_sampling"]["tasks"][dataset]
    target = {"model": f"{model}_paraphrased", "dataset": f"{dataset}_paraphrased"}
    assert cfg["adra"]["targets"] == cfg["n_sampling"]["targets"] == [target]
    train, n = cfg["adra"]["train"], cfg["n_sampling"]["n"]
    assert (train["lr"], train["max_steps"], train["batch_size"] * train["grad_accum"] * GPUS // n) == \
        (lr, steps, prompts)
    assert {k: v for k, v in train.items() if k not in ("lr", "max_steps")} == \
        {k: v for k, v in original["adra"]["train"].items() if k not in ("lr", "max_steps")}
    assert max(cfg["adra"]["eval"]["steps"]) < steps


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_the_sft_trains_on_the_paraphrased_pool_and_attacks_read_the_original_split(name):
    _, dataset, model, *_ = SETTINGS[name]
    dataset, model = f"{dataset}_paraphrased", f"{model}_paraphrased"
    plan = Plan(paper(name))
    assert plan.member_pool(dataset).key == plan.paraphrased_pool(dataset).key != plan.pool(dataset).key
    assert plan.model(model).manifest["upstream"]["member_pools"] == {dataset: plan.paraphrased_pool(dataset).key}
    assert plan.evaluated_split(dataset, 0).key == plan.split(dataset, 0).key
    assert plan.split(dataset, 0).manifest["paraphrase"]["setting"] == {"train": "paraphrased", "evaluate": "original"}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_the_paraphrase_pool_job_asks_for_its_engines_gpu_and_rehearses_with_the_stand_in_on_hf(name):
    dataset = f"{SETTINGS[name][1]}_paraphrased"
    cfg = paper(name)
    job = Sizing(cfg, environ={}).job("paraphrase_pool", dataset=dataset)
    assert (job.kind, job.gpus, job.params_b > 7) == ("generate", 1, True)   # Qwen2.5-7B-Instruct, 7.6B
    para = Plan(rehearse(cfg, vllm_available=False)).paraphrase_spec(dataset)
    assert para["backend"] == "hf" and para["apply_to"] == "training"
    assert stand_in_paths(para) == {para["options"]["model"]}
    assert "Qwen--Qwen2.5-7B-Instruct" in para["options"]["model"]
