"""CPU rehearsal of the paper configs (mialab.pipeline.rehearsal, `--config rehearsal=true`): tiny stand-in models
of the same families and chat templates, local data samples with the same columns, CPU sizes; every
other setting the paper config's."""

from __future__ import annotations

import copy
import json
import re
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_helpers import (REPO, job_stats, make_workdir, planned_jobs, planned_outputs, planned_wildcards,
                              snakemake, validated)

from mialab.data.registry import get_family
from mialab.data.sources import is_file, is_hub
from mialab.pipeline.config import data_paths
from mialab.pipeline.plan import Plan
from mialab.pipeline.rehearsal import (
    DATA_KEYS,
    PRECISION_KEYS,
    RehearsalError,
    RehearsalPlan,
    build_stand_in,
    changes,
    devices,
    matches,
    model_keys,
    rehearsal_settings,
    rehearse,
    shrink_caps,
    stand_in_paths,
    stand_in_spec,
    table,
    with_samples,
)

CONFIGS = sorted((REPO / "configs" / "paper").glob("*.yaml"))
IDS = [p.stem for p in CONFIGS]

# hub model -> (transformers class, a piece of its published chat template's rendering; None: no template)
FAMILIES = {
    "meta-llama/Llama-2-7b-hf": ("LlamaForCausalLM", None),
    "meta-llama/Llama-2-13b-hf": ("LlamaForCausalLM", None),
    "allenai/tulu-2-7b": ("LlamaForCausalLM", "<|user|>\nHi\n<|assistant|>\n"),
    "allenai/tulu-2-13b": ("LlamaForCausalLM", "<|user|>\nHi\n<|assistant|>\n"),
    "meta-llama/Llama-3.1-8B": ("LlamaForCausalLM", None),
    "meta-llama/Llama-3.1-8B-Instruct": ("LlamaForCausalLM", "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"),
    "allenai/Llama-3.1-Tulu-3-8B": ("LlamaForCausalLM", "<|user|>\nHi\n<|assistant|>\n"),
    "Qwen/Qwen2-7B": ("Qwen2ForCausalLM", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi"),
    "Qwen/Qwen2.5-7B-Instruct": ("Qwen2ForCausalLM", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": ("Qwen2ForCausalLM", "<｜User｜>Hi<｜Assistant｜><think>\n"),
    "PRIME-RL/Eurus-2-7B-PRIME": ("Qwen2ForCausalLM", "Please reason step by step"),
    "GAIR/LIMR": ("Qwen2ForCausalLM", "Please reason step by step"),
    "allenai/Olmo-3-1025-7B": ("Olmo3ForCausalLM", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    "allenai/Olmo-3.1-7B-RL-Zero-Math": ("Olmo3ForCausalLM", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    "allenai/Olmo-3-7B-Instruct": ("Olmo3ForCausalLM", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    "openai-community/gpt2": ("GPT2LMHeadModel", None),
    "openai-community/gpt2-medium": ("GPT2LMHeadModel", None),
    "openai-community/gpt2-large": ("GPT2LMHeadModel", None),
    "google-bert/bert-base-cased": ("BertForMaskedLM", None),
    "Qwen/Qwen3-Embedding-8B": ("Qwen3Model", None),
}


def paper(path: Path) -> dict:
    return validated(yaml.safe_load(path.read_text()))


def hub_models(cfg: dict) -> dict[str, str]:
    """config key -> hub model id, of a paper config."""
    out = {f"models.{n}.path": s["path"] for n, s in cfg["models"].items() if s["kind"] == "hf"}
    for pattern in model_keys():
        out.update({k: p[last] for k, p, last in matches(cfg, pattern) if p[last] in FAMILIES})
    return out


def fetched(source) -> bool:
    """Whether a source (a table, ``{source, ...}``, a list) names a hub dataset or a file to fetch."""
    if isinstance(source, list):
        return any(map(fetched, source))
    if isinstance(source, dict):
        return is_hub(source) or is_file(source) or fetched(source.get("source"))
    return False


def at(cfg: dict, key: str):
    (hit,) = [p[last] for k, p, last in matches(cfg, key)]
    return hit


def key_pattern(pattern: str) -> re.Pattern:
    return re.compile(re.escape(pattern).replace(r"\*", r"[^.]+") + r"(\..*)?$")


@pytest.mark.parametrize("path", CONFIGS, ids=IDS)
def test_every_hub_model_becomes_a_stand_in_of_its_family(path: Path):
    cfg = paper(path)
    out = rehearse(cfg, vllm_available=False)
    named = hub_models(cfg)
    assert named, "the paper config names no hub model"
    for key, hub in named.items():
        folder = at(out, key)
        assert folder.startswith("results/rehearsal/models/") and folder.endswith("/model"), (key, folder)
        spec = stand_in_spec(hub, key)
        cls, rendered = FAMILIES[hub]
        assert spec["class"] == cls, (hub, spec["class"])
        assert (spec["chat_template"] is None) == (rendered is None), hub
    assert stand_in_paths(out) == {at(out, k) for k in named}
    plan = RehearsalPlan(out)  # every folder is the current stand-in of its hub model
    assert {s.manifest["spec"]["hub"] for s in plan.stand_ins.values()} == set(named.values())


@pytest.mark.parametrize("path", CONFIGS, ids=IDS)
def test_every_dataset_source_becomes_an_existing_local_sample(path: Path, tmp_path):
    cfg = paper(path)
    out = rehearse(cfg, vllm_available=False)
    assert fetched([p[last] for pattern in DATA_KEYS for _, p, last in matches(cfg, pattern)])   # the papers' data
    assert not fetched([p[last] for pattern in DATA_KEYS for _, p, last in matches(out, pattern)])   # then none
    named = data_paths(out)
    assert named and all((REPO / p).is_file() for _, p in named), [p for _, p in named if not (REPO / p).is_file()]
    n_per_class = {n: ds["split"]["n_per_class"] for n, ds in out["datasets"].items()}
    for name, ds in out["datasets"].items():  # each sample builds its family's pool, with a split's worth per class
        spec = {k: (str(REPO / v) if isinstance(v, str) and (REPO / v).is_file() else v) for k, v in ds["pool"].items()}
        if isinstance(spec["source"], list):
            spec["source"] = [{**s, "source": str(REPO / s["source"])} if isinstance(s, dict)
                              else str(REPO / s) for s in spec["source"]]
        if "tokenizer" in spec:  # a pool counting tokens reads its stand-in's tokenizer (built here)
            folder = tmp_path / name
            build_stand_in(stand_in_spec(cfg["datasets"][name]["pool"]["tokenizer"], name), folder,
                           [(REPO / "resources/data/tinyshakespeare/input.txt").read_text()[:100_000]])
            spec["tokenizer"] = str(folder)
        pool = get_family(spec["family"])(spec)
        counts = pool["label"].value_counts()
        assert counts.get(0, 0) >= n_per_class[name] and counts.get(1, 0) >= n_per_class[name], (name, counts.to_dict())


@pytest.mark.parametrize("path", CONFIGS, ids=IDS)
def test_counts_shrink_and_jobs_run_on_the_cpu(path: Path):
    cfg = paper(path)
    out = rehearse(cfg, vllm_available=False)
    for pattern, cap in shrink_caps().items():
        for key, parent, last in matches(out, pattern):
            assert parent[last] <= cap, (key, parent[last])
    assert all(ds["split"]["n_per_class"] == 8 for ds in out["datasets"].values())
    assert out["seeds"] == cfg["seeds"][:1]  # one seed, the first (a paper's tables over one seed)
    for pattern in devices():
        assert all(p[last] == "cpu" for _, p, last in matches(out, pattern))
    for section in ("n_sampling", "calibdcd.generation"):
        for _, parent, last in matches(out, f"{section}.backend"):
            assert parent[last] == "hf" and parent["backend_options"]["device"] == "cpu"
            assert "tensor_parallel_size" not in parent["backend_options"]
    assert out["launch"]["nproc"] == 1 and out["rehearsal"] is True
    if "adra" in cfg:
        steps, new = out["adra"]["eval"]["steps"], out["adra"]["train"]["max_steps"]
        assert steps and len(steps) <= 2 and all(0 <= s < new for s in steps), steps
        lora_in, lora_out = cfg["adra"]["train"]["lora"], out["adra"]["train"]["lora"]
        assert lora_out["lora_alpha"] / lora_out["r"] == lora_in["lora_alpha"] / lora_in["r"]
    with_vllm = rehearse(cfg, vllm_available=True)  # vLLM importable: the paper's backend stays
    for section in ("n_sampling", "calibdcd.generation"):
        for (_, a, la), (_, b, lb) in zip(matches(cfg, f"{section}.backend"), matches(with_vllm, f"{section}.backend")):
            assert a[la] == b[lb]


@pytest.mark.parametrize("path", CONFIGS, ids=IDS)
def test_nothing_but_sizes_models_data_and_devices_changes(path: Path):
    cfg = paper(path)
    out = rehearse(cfg, vllm_available=False)
    allowed = [*shrink_caps(), *devices(), *model_keys(), *DATA_KEYS, "models.*.path", "rehearsal", "seeds", "adra.eval.steps",
               "adra.train.lora.lora_alpha", "n_sampling.backend", "n_sampling.backend_options",
               "calibdcd.generation.backend", "calibdcd.generation.backend_options", "lara.llm.engine",
               "lara.llm.backend_options", "datasets.*.paraphrase.backend", "datasets.*.paraphrase.options",
               *rehearsal_settings()]
    patterns = [key_pattern(a) for a in allowed]
    changed = [line.split(": ", 1)[0] for line in changes(cfg, out)]
    assert changed
    # a compute precision changes only from bf16 or fp16 to auto (PRECISION_KEYS)
    precision = [k for k in changed if k.rsplit(".", 1)[-1] in PRECISION_KEYS]
    assert all(at(cfg, k) in ("bf16", "bfloat16", "float16") and at(out, k) == "auto" for k in precision), precision
    stray = [k for k in changed if k not in precision and not any(p.match(k) for p in patterns)]
    assert not stray, stray
    # and the paper's own settings survive: rules' options, prompts, rewards, metrics
    for key in ("evaluation", "scoring.methods", "scoring.k"):
        assert at(out, key) == at(cfg, key), key
    for section in ("adra", "lara", "calibdcd", "n_sampling"):
        if section in cfg:
            kept = {k: v for k, v in cfg[section].items() if not isinstance(v, dict)}
            assert {k: out[section][k] for k in kept if k not in ("n", "backend")} == \
                   {k: v for k, v in kept.items() if k not in ("n", "backend")}, section


def test_rehearse_is_pure_and_idempotent_on_data():
    cfg = paper(REPO / "configs" / "paper" / "adra_pretraining.yaml")
    before = copy.deepcopy(cfg)
    out = rehearse(cfg, vllm_available=False)
    assert cfg == before
    assert with_samples(out)["datasets"] == out["datasets"]


def test_unknown_hub_model_or_dataset_fails_naming_its_key():
    cfg = paper(REPO / "configs" / "paper" / "adra_pretraining.yaml")
    bad = copy.deepcopy(cfg)
    bad["models"]["llama2_7b"]["path"] = "someorg/unheard-of-7b"
    with pytest.raises(RehearsalError, match=r"models\.llama2_7b\.path: hub model 'someorg/unheard-of-7b'"):
        rehearse(bad, vllm_available=False)
    bad = copy.deepcopy(cfg)
    bad["datasets"]["bookmia"]["pool"]["source"] = {"hub": "someorg/unheard-of", "split": "train"}
    with pytest.raises(RehearsalError, match=r"datasets\.bookmia\.pool\.source: hub dataset 'someorg/unheard-of'"):
        rehearse(bad, vllm_available=False)
    bad = copy.deepcopy(cfg)
    bad["datasets"]["dolma3_arxiv"]["pool"]["nonmember_source"] = "data/adra/nowhere.jsonl"
    with pytest.raises(RehearsalError, match=r"nonmember_source: missing local file 'data/adra/nowhere.jsonl'"):
        rehearse(bad, vllm_available=False)
    bad = copy.deepcopy(cfg)
    bad["datasets"]["bookmia_paraphrased"]["paraphrase"]["options"]["model"] = "someorg/unheard-of-instruct"
    with pytest.raises(RehearsalError, match=r"datasets\.bookmia_paraphrased\.paraphrase\.options\.model: "
                                             r"hub model 'someorg/unheard-of-instruct' has no rehearsal stand-in"):
        rehearse(bad, vllm_available=False)


def test_stand_in_keys_do_not_depend_on_whether_the_folder_exists(tmp_path, monkeypatch):
    """A stage reading a stand-in is built after it (the folder is the stage's input) and keeps its key
    once the folder exists: the next run recomputes nothing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "resources").symlink_to(REPO / "resources")
    out = rehearse(paper(REPO / "configs" / "paper" / "adra_pretraining.yaml"), vllm_available=False)
    plan = RehearsalPlan(out)
    folder = plan.model_path("llama2_7b")
    assert plan.is_built("llama2_7b") and folder in stand_in_paths(out)
    key = plan.score_run("llama2_7b", "bookmia").key
    Path(folder).mkdir(parents=True)
    (Path(folder) / "config.json").write_text("{}")
    assert RehearsalPlan(out).score_run("llama2_7b", "bookmia").key == key
    assert Plan(out).score_run("llama2_7b", "bookmia").key != key  # what the plain plan would do


@pytest.mark.parametrize("hub", sorted(FAMILIES))
def test_stand_in_is_a_tiny_hf_folder_of_its_family(hub, tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    spec = stand_in_spec(hub, "test")
    texts = [(REPO / "resources/data/tinyshakespeare/input.txt").read_text()[:200_000]]
    n_params = build_stand_in(spec, tmp_path, texts)
    assert n_params < 2_000_000
    assert list(tmp_path.glob("*.safetensors")) and not list(tmp_path.glob("*.bin"))
    cls, rendered = FAMILIES[hub]
    assert AutoConfig.from_pretrained(tmp_path).architectures == [cls]
    tok = AutoTokenizer.from_pretrained(tmp_path)
    if rendered is None:
        assert not tok.chat_template
    else:
        text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
        assert rendered in text, text
        special = [t for t in spec["tokens"].get("extra", []) if t in text]
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert all(tok.convert_tokens_to_ids(t) in ids for t in special), special  # one token each, never split
    if spec.get("encoder"):
        from mialab.lm.embeddings import encode

        # an empty text (a rollout of only eos) still pools a token: the eos the family's tokenizer appends
        assert encode(["a text", ""], model=str(tmp_path)).shape == (2, spec["size"]["hidden_size"])
        assert tok("a text")["input_ids"][-1] == tok.eos_token_id


def test_tables_name_existing_samples_and_known_templates():
    samples = table("datasets")
    assert all((REPO / f).is_file() for part in samples.values() for f in part.values())
    models = table("models")
    assert all(models["families"][f].get("template", "chatml") in models["templates"] for f in models["models"].values())


@pytest.mark.parametrize("path", CONFIGS, ids=IDS)
def test_rehearsal_dry_run_plans_only_local_jobs_of_its_experiment(path: Path, tmp_path):
    cfg = yaml.safe_load(path.read_text())
    workdir = make_workdir(tmp_path / "w", cfg)
    proc = snakemake(workdir, "-n", "--profile", str(REPO / "profiles" / "local"), "--config", "rehearsal=true")
    out = proc.stdout + proc.stderr
    jobs = job_stats(out)
    assert jobs.get("rehearsal_model") == len(set(hub_models(paper(path)).values())), jobs
    assert jobs["build_split"] == len(cfg["datasets"]), jobs  # one seed
    assert not {"train_tokenizer", "pretrain_model"} & set(jobs), jobs
    for name, configured in (("model", cfg["models"]), ("dataset", cfg["datasets"])):
        assert planned_wildcards(out, name) <= set(configured), name
    assert "mialab: rehearsal: models." in out  # the log says what was swapped
    for name, ds in cfg["datasets"].items():  # a pool that counts tokens waits for its tokenizer's stand-in
        if "tokenizer" in ds["pool"]:
            stand_in = f"results/rehearsal/models/{ds['pool']['tokenizer'].replace('/', '--')}/"
            assert re.search(rf"rule build_pool:\n(    .*\n)*?    input: [^\n]*{re.escape(stand_in)}", out), name
    if "n_sampling" in cfg:  # the encoder stand-in is built before the models that every reader of it reads
        assert re.search(r"Input files updated by another job: [^\n]*results/rehearsal/models/Qwen--Qwen3-Embedding-8B/", out)
    assert not list((workdir / "results").glob("**/*.parquet"))
    assert not re.search(r"hub (model|dataset) '", out), "a hub id is left in the rehearsal"


def test_cluster_checks_see_the_paper_config(tmp_path):
    """A paper config whose arithmetic cannot work on its GPUs fails even in rehearsal (the shrunk
    numbers would pass): the checks run before the rehearsal shrinks them."""
    cfg = yaml.safe_load((REPO / "configs" / "paper" / "adra_aime.yaml").read_text())
    cfg["models"]["tulu2_aime"]["train"]["effective_batch_size"] = 63   # not a multiple of micro_batch_size 2
    workdir = make_workdir(tmp_path / "w", cfg)
    proc = snakemake(workdir, "-n", "--config", "rehearsal=true", check=False)
    assert proc.returncode != 0
    assert "models.tulu2_aime.train.effective_batch_size: 63" in proc.stdout + proc.stderr


def test_the_tiny_world_is_no_rehearsal():
    cfg = validated(yaml.safe_load((REPO / "config.yaml").read_text()))
    assert cfg["rehearsal"] is False


# The suite rehearses ADRA's AIME config end to end through the test SLURM (tests/test_slurm_workflow.py), LaRA's
# on one of its datasets end to end (ONE_DATASET: the stand-ins, the dataset's RL contamination of each checkpoint
# and its detection, up to the dataset's report: what `snakemake results/lara/report/<dataset>/lara.csv` reruns),
# and CalibDCD's through its own stages (PARTIAL): stand-ins of its models, its pools, splits and partitions, and on
# one of its datasets (PARTIAL_DATASET: the rehearsal's pools are texts of one length, the two stages the same code
# on each) its DPDLLM reference and VeilProbe perturbation; the rules after those (CalibDCD's features and
# calibration, the tables) are the tiny world's with other settings, checked at plan time. The other eight
# (PLANNED) are planned here (the dry runs above) and rehearsed end to end by benchmarks/rehearse_paper_configs.sh,
# with all eleven: the suite rehearsed them until it outgrew CI's 90 minutes on a 2-core AVX2 machine.
THROUGH_SLURM = ("adra_aime",)
#: paper config -> the dataset of it rehearsed end to end
ONE_DATASET = {"lara_rl_models": "eurus_prime"}
#: the rules a partial rehearsal leaves out with all that follows them (snakemake --omit-from), per config
PARTIAL = {"calibdcd_instruct_models": ("score_baselines", "calibdcd_features", "leakage_check")}
PLANNED = tuple(name for name in IDS if name not in (*THROUGH_SLURM, *ONE_DATASET, *PARTIAL))
#: the rules a partial rehearsal runs: what a config of its own data and models needs before any method's features
OWN_RULES = {"rehearsal_model", "build_pool", "build_split", "calibdcd_partition", "calibdcd_reference",
             "calibdcd_perturbation"}
#: of OWN_RULES, those a partial rehearsal runs on one dataset only (PARTIAL_DATASET): model passes over a pool
PER_POOL_RULES = {"calibdcd_reference", "calibdcd_perturbation"}
#: paper config -> the dataset its partial rehearsal runs PER_POOL_RULES on (the others stop at their partitions)
PARTIAL_DATASET = {"calibdcd_instruct_models": "wikimia"}


def stand_ins_written(name: str, results: Path) -> None:
    """A stand-in of each hub model paper config ``name`` names."""
    manifests = [json.loads(p.read_text()) for p in results.glob("rehearsal/models/*/*/manifest.json")]
    hub = hub_models(paper(REPO / "configs" / "paper" / f"{name}.yaml"))
    assert {m["spec"]["hub"] for m in manifests} == set(hub.values())


def reproduced(markdown: str, targets: list[dict]) -> None:
    """A Reproduction table with a row of each paper target: the paper's figure (or that the text lost it) beside the
    run's with its interval (the run's figures are the stand-ins', far from the paper's)."""
    table = markdown.split("## Reproduction", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and line.split(" | ")[1].startswith("`")]
    assert len(rows) == len(targets), (len(rows), len(targets), table[:3000])
    for row, t in zip(rows, targets):
        cells = row.split(" | ")
        assert cells[:3] == [f"| {t['dataset']} / {t['model']}", f"`{t['method']}`", f"`{t['metric']}`"], row
        paper = cells[3] if t["value"] == "not in the extracted text" else float(cells[3])
        assert paper == (t["value"] if isinstance(paper, str) else pytest.approx(t["value"])), row
        assert re.fullmatch(r"-?[0-9.]+ \[-?[0-9.]+, -?[0-9.]+\]", cells[4]), row
        assert t["source"]["table"] in cells[-1] and t["source"]["row"] in cells[-1], row


def rehearsal_written(name: str, workdir: Path) -> tuple[dict, Path]:
    """What every end-to-end rehearsal of paper config ``name`` writes: the summary of each dataset with the paper's
    figures beside the run's, a stand-in of each hub model (the paper config, its results folder)."""
    cfg = yaml.safe_load((REPO / "configs" / "paper" / f"{name}.yaml").read_text())
    results = workdir / "results"
    summary = (results / "evaluation" / "summary.md").read_text()
    assert all(ds in summary for ds in cfg["datasets"]), summary[:2000]
    reproduced(summary, sorted(cfg["paper_targets"], key=lambda t: list(cfg["datasets"]).index(t["dataset"])))
    stand_ins_written(name, results)
    return cfg, results


def adra_reports_written(cfg: dict, results: Path) -> None:
    """ADRA's report of each target dataset (the paper's Tables 12-15): a row of the passive baselines,
    N-Sampling and every variant's final policy for each target model, one of each evaluated step
    (``adra_init``: step 0; ``<variant>@step<k>``), and the figure of AUROC against the step."""
    steps = rehearse(validated(copy.deepcopy(cfg)), vllm_available=False)["adra"]["eval"]["steps"]
    variants = cfg["adra"]["variants"]
    expected = {"passive", "n_sampling", *variants, *(["adra_init"] if 0 in steps else []),
                *(f"{v}@step{s}" for v in variants for s in steps if s)}
    for dataset in {t["dataset"] for t in cfg["adra"]["targets"]}:
        report = results / "adra" / "report" / dataset
        table = pd.read_csv(report / "adra.csv")
        models = {t["model"] for t in cfg["adra"]["targets"] if t["dataset"] == dataset}
        assert set(table["model"]) == models, (dataset, set(table["model"]))
        for model in models:
            attacks = set(table.loc[table["model"] == model, "attack"])
            assert expected <= attacks, (dataset, model, expected - attacks)
        markdown = (report / "adra.md").read_text()
        assert all(m in markdown for m in models), markdown[:2000]
        reproduced(markdown, [t for t in cfg["paper_targets"] if t["dataset"] == dataset])
        assert table["top5_mean"].between(0, 1).any(), table
        assert (report / "steps.png").stat().st_size > 0


def test_every_paper_config_is_rehearsed_or_planned():
    assert sorted([*THROUGH_SLURM, *ONE_DATASET, *PARTIAL, *PLANNED]) == IDS
    rehearsed = {n: paper(REPO / "configs" / "paper" / f"{n}.yaml") for n in (*THROUGH_SLURM, *ONE_DATASET, *PARTIAL)}
    assert {m for m in ("adra", "lara", "calibdcd") if any(m in cfg for cfg in rehearsed.values())} == \
        {"adra", "lara", "calibdcd"}
    for name, dataset in ONE_DATASET.items():
        assert dataset in rehearsed[name]["datasets"], name
    for name, left_out in PARTIAL.items():
        assert ("calibdcd" in rehearsed[name]) == ("calibdcd_features" in left_out), name
        assert PARTIAL_DATASET[name] in rehearsed[name]["calibdcd"]["datasets"], name


@pytest.mark.slow
@pytest.mark.parametrize("name", PARTIAL)
def test_paper_config_rehearses_its_own_stages(name: str, tmp_path):
    """Paper config ``name`` rehearsed locally up to its methods' features (OWN_RULES; PER_POOL_RULES on
    PARTIAL_DATASET's pool only): every job of OWN_RULES that the first dry run planned runs but the other datasets'
    PER_POOL_RULES jobs, no other job runs, and a dry run then plans every job of its PARTIAL rules that the first
    dry run planned."""
    workdir = make_workdir(tmp_path / "w", yaml.safe_load((REPO / "configs" / "paper" / f"{name}.yaml").read_text()))
    proc = snakemake(workdir, "-n", "--config", "rehearsal=true")
    planned = job_stats(proc.stdout)
    jobs = planned_outputs(proc.stdout)
    assert {rule for rule, _, _ in jobs} == set(planned), planned
    dataset = PARTIAL_DATASET[name]
    skipped = [(rule, wildcards) for rule, wildcards, _ in jobs
               if rule in PER_POOL_RULES and wildcards.get("dataset") != dataset]
    targets = [out for rule, wildcards, outputs in jobs if rule in OWN_RULES and (rule, wildcards) not in skipped
               for out in outputs]
    start = time.monotonic()
    snakemake(workdir, "--profile", str(REPO / "profiles" / "local"), "--config", "rehearsal=true",
              "--omit-from", *PARTIAL[name], "--", *targets, timeout=1800)
    print(f"{name} rehearsal of its own stages: {time.monotonic() - start:.0f} s")
    left = planned_jobs(workdir, "--config", "rehearsal=true")
    ran = {rule: planned[rule] - left.get(rule, 0) for rule in planned if left.get(rule, 0) < planned[rule]}
    assert set(ran) == OWN_RULES, ran
    assert {r: left.get(r, 0) for r in OWN_RULES} == {r: sum(s == r for s, _ in skipped) for r in OWN_RULES}
    assert {r: n for r, n in ran.items() if r in PER_POOL_RULES} == {r: 1 for r in PER_POOL_RULES}   # one pool
    later = [r for r in PARTIAL[name] if r in planned]
    assert {r: left.get(r) for r in later} == {r: planned[r] for r in later}
    stand_ins_written(name, workdir / "results")


@pytest.mark.slow
@pytest.mark.parametrize("name", ONE_DATASET)
def test_paper_config_rehearses_one_dataset_end_to_end(name: str, tmp_path):
    """Paper config ``name`` rehearsed locally on one dataset, from an empty results/ to the dataset's LaRA report:
    each checkpoint's RL contamination (the split's members plus filler problems, the config's reward, every step
    of every epoch) and LaRA with its baselines on every target model of the dataset; a dry run of that target then
    has nothing to do."""
    cfg = yaml.safe_load((REPO / "configs" / "paper" / f"{name}.yaml").read_text())
    dataset = ONE_DATASET[name]
    workdir = make_workdir(tmp_path / "w", cfg)
    target = f"results/lara/report/{dataset}/lara.csv"
    start = time.monotonic()
    snakemake(workdir, "--profile", str(REPO / "profiles" / "local"), target, "--config", "rehearsal=true",
              timeout=1800)
    print(f"{name} rehearsal of {dataset}: {time.monotonic() - start:.0f} s")
    assert "Nothing to be done" in snakemake(workdir, "-n", target, "--config", "rehearsal=true").stdout
    results = workdir / "results"
    rl_models = {m: spec for m, spec in cfg["models"].items()
                 if spec["kind"] == "rl" and dataset in spec["datasets"]}
    assert rl_models, name
    manifests = {p.parent: json.loads(p.read_text()) for p in results.glob("rl/*/epoch-*/manifest.json")}
    assert sorted(m["epoch"] for m in manifests.values()) == sorted(spec["epoch"] for spec in rl_models.values())
    members = pd.read_parquet(next(results.glob(f"splits/{dataset}/**/split.parquet")))
    for folder, manifest in manifests.items():
        assert manifest["config"]["reward"] == next(iter(rl_models.values()))["reward"]
        assert manifest["config"]["members"]["dataset"] == dataset
        assert manifest["steps"]["completed"] == manifest["steps"]["expected"] > 0
        corpus = pd.read_parquet(folder / "corpus.parquet")
        assert set(members.loc[members["label"] == 1, "text"]) <= set(corpus["question"])
        assert (corpus["source"] == "filler").sum() == len(corpus) - manifest["corpus"]["members"] > 0
    table = pd.read_csv(results / "lara" / "report" / dataset / "lara.csv")
    models = {t["model"] for t in cfg["lara"]["targets"] if t["dataset"] == dataset}
    assert set(table["model"]) == models, set(table["model"])
    for model in models:
        methods = set(table.loc[table["model"] == model, "method"])
        assert {"lara", "lara/cdd", "lara/self_critique", "lara/recall_lara_code", "lara/dime"} <= methods, methods
    assert table["auroc_mean"].between(0, 1).all()
    assert (results / "lara" / "report" / dataset / "layers.png").stat().st_size > 0
    reproduced((results / "lara" / "report" / dataset / "lara.md").read_text(),
               [t for t in cfg["paper_targets"] if t["dataset"] == dataset])
