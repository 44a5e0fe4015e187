"""The paraphrased setting at paper scale (issue #20, item 8d): ADRA's pretraining paper config
paraphrases with an open instruct model on vLLM, its job asks for the GPU it uses, and its rehearsal
runs the paraphraser's stand-in on the hf backend, the stand-in folder an input of the paraphrase rule."""

import copy

import yaml
from workflow_helpers import REPO, validated

from mialab.pipeline.plan import Plan
from mialab.pipeline.rehearsal import rehearse, stand_in_paths
from mialab.pipeline.sizing import Sizing

PARAPHRASED = ("bookmia_paraphrased", "wikimia_24_hard_paraphrased", "dolma3_arxiv_paraphrased")


def paper() -> dict:
    return validated(yaml.safe_load((REPO / "configs" / "paper" / "adra_pretraining.yaml").read_text()))


def test_the_pretraining_paper_config_paraphrases_every_dataset_with_qwen_on_vllm():
    cfg = paper()
    for name in PARAPHRASED:
        para, original = cfg["datasets"][name], cfg["datasets"][name.removesuffix("_paraphrased")]
        assert para["pool"] == original["pool"] and para["split"] == original["split"]
        assert para["paraphrase"]["backend"] == "vllm" and para["paraphrase"]["apply_to"] == "evaluation"
        assert para["paraphrase"]["options"]["model"] == "Qwen/Qwen2.5-7B-Instruct"
        assert cfg["n_sampling"]["tasks"][name] == cfg["n_sampling"]["tasks"][name.removesuffix("_paraphrased")]
        assert {"model": next(m for m, s in cfg["models"].items() if name in s["datasets"]), "dataset": name} in \
            cfg["adra"]["targets"]


def test_the_paraphrase_job_asks_for_the_gpus_of_its_engine():
    cfg = paper()
    job = Sizing(cfg, environ={}).job("paraphrase", dataset="bookmia_paraphrased")
    assert (job.kind, job.gpus, job.params_b > 7) == ("generate", 1, True)   # Qwen2.5-7B-Instruct, 7.6B
    assert Sizing(cfg, environ={}).resources(job, estimate_s=600.0)["gpu"] == 1
    cfg = copy.deepcopy(cfg)
    cfg["datasets"]["bookmia_paraphrased"]["paraphrase"] = {**cfg["datasets"]["bookmia_paraphrased"]["paraphrase"],
                                                            "options": {"model": "Qwen/Qwen2.5-7B-Instruct",
                                                                        "tensor_parallel_size": 2}}
    assert Sizing(cfg, environ={}).job("paraphrase", dataset="bookmia_paraphrased").gpus == 2


def test_the_rehearsal_paraphrases_with_the_stand_in_on_hf_with_hf_options_only():
    out = rehearse(paper(), vllm_available=False)
    plan = Plan(out)
    for name in PARAPHRASED:
        para = plan.paraphrase_spec(name)
        assert para["backend"] == "hf"
        assert para["options"] == {"model": para["options"]["model"], "temperature": 0.7, "top_p": 0.95,
                                   "max_new_tokens": 16, "seed": 0, "dtype": "auto", "device": "cpu"}
        assert stand_in_paths(para) == {para["options"]["model"]}
        assert "Qwen--Qwen2.5-7B-Instruct" in para["options"]["model"]
