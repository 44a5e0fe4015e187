"""No code runs that the user did not ask for: a model folder's own code only with
``models.<name>.trust_remote_code``, no backend option that loads code, every value that reaches
a shell quoted, no config string evaluated."""

from __future__ import annotations

import copy
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
import yaml
from workflow_helpers import REPO, foundation_config, make_workdir, merged_config, snakemake

AIME = REPO / "resources/data/aime/aime_1983_2023.json"
SCHEMA = yaml.safe_load((REPO / "schemas/config.schema.yaml").read_text())


def sub_schema(schema: dict) -> dict:
    """A part of the config schema, with the definitions it refers to."""
    return {"$defs": SCHEMA["$defs"], **schema}


TINY_MODEL = {"corpus": [f"line {i}: the cat walks over the hill today." for i in range(50)],  # conftest.tiny_model
              "vocab_size": 300, "hidden_size": 16, "num_layers": 1}


def planted(tiny_model: str, dest: Path, marker: Path, *, into: str = "config.json") -> str:
    """A copy of the tiny model whose ``into`` file maps its classes to a module that writes ``marker``."""
    shutil.copytree(tiny_model, dest)
    (dest / "evil.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast\n"
        "class EvilConfig(LlamaConfig):\n    pass\n"
        "class EvilModel(LlamaForCausalLM):\n    config_class = EvilConfig\n"
        "class EvilTokenizer(PreTrainedTokenizerFast):\n    pass\n")
    cfg = json.loads((dest / into).read_text())
    cfg["auto_map"] = ({"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
                       if into == "config.json" else {"AutoTokenizer": [None, "evil.EvilTokenizer"]})
    (dest / into).write_text(json.dumps(cfg))
    return str(dest)


# -- a model folder's own code -------------------------------------------------------------------
@pytest.mark.parametrize("into", ["config.json", "tokenizer_config.json"])
def test_planted_auto_map_module_does_not_run(tiny_model, tmp_path, into):
    from mialab.lm.loading import RemoteCodeRefused, load_causal_lm, load_tokenizer

    marker = tmp_path / "marker"
    path = planted(tiny_model, tmp_path / "evil model", marker, into=into)
    for load in (load_tokenizer, load_causal_lm):
        with pytest.raises(RemoteCodeRefused, match="models.<name>.trust_remote_code: true") as err:
            load(path)
        assert path in str(err.value) and into in str(err.value)
    assert not marker.exists()


def test_trust_remote_code_opt_in_reaches_transformers(tiny_model, tmp_path):
    """With the config's opt-in the loader passes trust_remote_code=True: transformers imports the
    folder's module (run in a subprocess with its own module cache, so nothing leaks into this one)."""
    marker = tmp_path / "marker"
    path = planted(tiny_model, tmp_path / "model", marker)
    code = ("import sys; from mialab.lm.loading import load_causal_lm; "
            "print(type(load_causal_lm(sys.argv[1], device='cpu', trust_remote_code=True)).__name__)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    done = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "EvilModel"
    assert marker.read_text() == "ran"


def test_trust_comes_from_the_config_by_model_name_and_not_from_the_stage_key():
    from mialab.lm.loading import trusts_remote_code
    from mialab.pipeline.plan import Plan

    cfg = foundation_config()
    for spec in cfg["models"].values():
        spec["trust_remote_code"] = False  # the schema's default
    keys = {name: Plan(cfg).model(name).key for name in cfg["models"]}
    cfg["models"]["sft"]["trust_remote_code"] = True
    assert trusts_remote_code(cfg, "sft") and not trusts_remote_code(cfg, "base")
    assert not trusts_remote_code(cfg, "/some/model/folder")  # a path not named under models never is
    assert {name: Plan(cfg).model(name).key for name in cfg["models"]} == keys


def test_schema_trust_remote_code_is_a_boolean_per_model():
    models = sub_schema({"type": "object", "additionalProperties": SCHEMA["properties"]["models"]["additionalProperties"]})
    jsonschema.validate({"m": {"kind": "hf", "path": "p", "trust_remote_code": True}}, models)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"m": {"kind": "hf", "path": "p", "trust_remote_code": "yes"}}, models)


def test_backend_options_cannot_turn_on_remote_code(tiny_model, tmp_path):
    from mialab.lm.engine import start_backend
    from mialab.lm.loading import RemoteCodeRefused
    from mialab.lm.vllm_backend import VLLMBackend

    with pytest.raises(ValueError, match="backend_options.trust_remote_code"):
        start_backend("hf", tiny_model, {"trust_remote_code": True})
    for key in ("trust_remote_code", "worker_cls", "logits_processors"):
        with pytest.raises(ValueError, match=f"vLLM engine argument\\(s\\) {key} not allowed"):
            VLLMBackend(tiny_model, engine_args={key: True}, venv=tmp_path)
    marker = tmp_path / "marker"
    with pytest.raises(RemoteCodeRefused):  # before any worker starts
        VLLMBackend(planted(tiny_model, tmp_path / "model", marker), venv=tmp_path)
    assert not marker.exists()


def test_vllm_worker_refuses_code_loading_engine_arguments():
    from mialab.lm.vllm_worker import check_engine_args

    check_engine_args({"tensor_parallel_size": 8, "dtype": "bfloat16", "max_model_len": 4096})
    with pytest.raises(ValueError, match="trust_remote_code not allowed"):
        check_engine_args({"trust_remote_code": True})



# -- every generation path refuses, before any job, what would load code ---------------------------
# (section, the key naming its backend, the key of its options) of every engine the config can start:
# N-Sampling's rollouts (ADRA's evaluation rollouts too), CalibDCD's generation, LaRA's instruction model,
# ADRA's judge, a dataset's paraphraser
GENERATION = [("n_sampling", "backend", "backend_options"), ("calibdcd.generation", "backend", "backend_options"),
              ("lara.llm", "engine", "backend_options"), ("adra.reward.judge", "engine", "backend_options"),
              ("datasets.wikimia.paraphrase", "backend", "options")]
INSTRUCT = "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id: only a local folder is opened at plan time
# what a config could try per backend (the key the refusal names, the options)
PLANTED = {"hf": [("trust_remote_code", {"trust_remote_code": True}),
                  ("worker_extension_cls", {"worker_extension_cls": "evil.Ext"}),
                  ("engine_args", {"engine_args": {"trust_remote_code": True}})],
           "vllm": [("trust_remote_code", {"trust_remote_code": True}),
                    ("worker_extension_cls", {"worker_extension_cls": "evil.Ext"}),
                    ("trust_remote_code", {"engine_args": {"trust_remote_code": True}}),
                    ("worker_extension_cls", {"engine_args": {"worker_extension_cls": "evil.Ext"}}),
                    ("venv", {"venv": "evil-venv"})]}


def generating_config() -> dict:
    """The tiny world with the ADRA overlay, LaRA's instruction model, ADRA's judge and a paraphrased
    dataset: every generation path of the workflow configured."""
    cfg = merged_config("config.yaml", "configs/tiny_adra.yaml")
    cfg["lara"]["llm"] = {"model": INSTRUCT}
    cfg["adra"]["reward"]["judge"] = {"model": INSTRUCT}
    cfg["datasets"]["wikimia"]["paraphrase"] = {"backend": "hf", "options": {"model": INSTRUCT}}
    return cfg


def section(cfg: dict, dotted: str) -> dict:
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def plan(cfg: dict) -> None:
    """The checks rules/common.smk runs on ``cfg`` before any job (the schema, the config's cross-references,
    the method plans), in process."""
    from snakemake.utils import validate

    from mialab.adra.plan import ADRAPlan
    from mialab.calibdcd.plan import CalibDCDPlan
    from mialab.lara.plan import LaRAPlan
    from mialab.n_sampling.plan import NSamplingPlan
    from mialab.pipeline.config import check_config
    from mialab.pipeline.plan import Plan

    validate(cfg, str(REPO / "schemas/config.schema.yaml"))
    check_config(cfg)
    pipeline = Plan(cfg)
    ADRAPlan(NSamplingPlan(pipeline, cfg), cfg)
    LaRAPlan(pipeline, cfg)
    CalibDCDPlan(pipeline, cfg)


def plan_refusal(cfg: dict) -> str:
    """The message with which :func:`plan` refuses ``cfg``."""
    from snakemake.exceptions import WorkflowError

    from mialab.pipeline.config import ConfigError

    try:
        plan(cfg)
    except (WorkflowError, ConfigError) as e:
        return str(e)
    pytest.fail("the plan accepted it")


def code_declaring_folder(dest: Path, marker: Path) -> str:
    """A complete tiny model folder whose config.json maps its model class to its own module (which writes
    ``marker``)."""
    from conftest import PROBLEMS, tiny_llama

    tiny_llama(dest, PROBLEMS * 20, hidden_size=16, num_layers=1)
    (dest / "evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    config = json.loads((dest / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModelForCausalLM": "evil.EvilModel"}}))
    return str(dest)


@pytest.mark.parametrize("where, backend_key, options_key", GENERATION, ids=[g[0] for g in GENERATION])
def test_the_plan_refuses_options_that_load_code_on_every_engine(where, backend_key, options_key, monkeypatch):
    """Each backend of each generation path, with an option that would load code planted in its options (a
    top-level one, or a vLLM engine argument, or the worker's interpreter): the plan fails, naming it."""
    monkeypatch.chdir(REPO)
    for backend, cases in PLANTED.items():
        for named, planted_options in cases:
            cfg = generating_config()
            entry = section(cfg, where)
            entry[backend_key] = backend
            entry[options_key] = {k: v for k, v in entry.get(options_key, {}).items() if k == "model"} | planted_options
            message = plan_refusal(cfg)
            faults = (f"'{named}' was unexpected", f"{where}.{options_key}.{named}: ",
                      f"{where}.{options_key}.engine_args: vLLM engine argument(s) {named} not allowed")
            assert any(fault in message for fault in faults), (backend, planted_options, message[-2000:])
    plan(generating_config())  # the same sections, nothing planted


@pytest.mark.parametrize("key", ["lara.llm.model", "adra.reward.judge.model",
                                 "datasets.wikimia.paraphrase.options.model", "models.planted.path"])
def test_the_plan_refuses_a_model_folder_that_declares_its_own_code(key, tmp_path, monkeypatch):
    """auto_map in a model folder's config.json: a model named by path (an instruction model, a judge, a
    paraphraser) never runs its code, a configured model only with models.<name>.trust_remote_code;
    the plan fails naming the key and the file, and nothing of the folder runs."""
    monkeypatch.chdir(REPO)
    marker = tmp_path / "marker"
    folder = code_declaring_folder(tmp_path / "model", marker)
    cfg = generating_config()
    if key == "models.planted.path":
        cfg["models"]["planted"] = {"kind": "hf", "path": folder}
    else:
        parent, last = key.rsplit(".", 1)
        section(cfg, parent)[last] = folder
    message = plan_refusal(copy.deepcopy(cfg))
    assert f"{key}: {folder}/config.json declares custom code (auto_map)" in message, message[-2000:]
    if key == "models.planted.path":  # the config's own opt-in, for that model by name
        cfg["models"]["planted"]["trust_remote_code"] = True
        plan(cfg)
    assert not marker.exists()


# -- shell commands --------------------------------------------------------------------------------
def test_model_path_with_command_substitution_and_space_is_quoted(tiny_model, tmp_path):
    """The sft_contaminate command of an hf init whose path holds ``$(touch marker)`` and a space:
    the path reaches the script as one literal argument, and running the command through bash
    (the interpreter swapped for ``true``) runs nothing."""
    marker = tmp_path / "marker"
    weird = f"{tmp_path}/my models/$(touch {marker}) x"
    shutil.copytree(tiny_model, weird)
    cfg = foundation_config()
    sft = {k: v for k, v in cfg["models"]["sft"].items() if k != "reference"}
    cfg["models"] = {"ext": {"kind": "hf", "path": weird}, "sft": {**sft, "init": "ext"}}
    wd = make_workdir(tmp_path / "wd", cfg)
    out = snakemake(wd, "-n", "-p", "--forceall", "models").stdout
    (cmd,) = [line.strip() for line in out.splitlines() if "-m mialab.core.launch" in line and "sft_contaminate" in line]
    args = shlex.split(cmd)
    assert args[args.index("--init") + 1] == weird
    (wd / "results/logs/sft_contaminate/sft").mkdir(parents=True)
    subprocess.run(["bash", "-c", "true " + cmd.split(" ", 1)[1]], cwd=wd, check=True)
    assert not marker.exists()


def test_optional_flags_quote_their_value(tmp_path):
    """rl_contaminate's --previous and adra_train's --baseline-scores are built with shlex; no rule
    passes the interpreter or a script's absolute path as a parameter (a rerun trigger)."""
    for smk in set((REPO / "rules").glob("*.smk")) - {REPO / "rules/common.smk"}:  # common: the globals
        text = smk.read_text()
        assert "python=sys.executable" not in text and 'workflow.basedir, "workflow_scripts"' not in text, smk
    rules = {f: (REPO / "rules" / f).read_text() for f in ("models.smk", "adra.smk")}
    assert 'shlex.join(["--previous", *input.previous])' in rules["models.smk"]
    assert 'shlex.join(["--baseline-scores", input.baseline])' in rules["adra.smk"]
    for text in rules.values():
        shell = text.split("shell:", 1)[1].split("\n\n", 1)[0]
        for field in ("{params.init}", "{params.model_path}", "{input.split}", "{output.model}", "{log}"):
            assert field not in shell


# -- config strings are data -----------------------------------------------------------------------
def test_where_filter_equals_the_old_query_on_aime():
    from mialab.data.corpus import read_corpus, row_filter
    from mialab.data.sources import read_table

    df = read_table(str(AIME))
    for year in (2005, 2014):
        mask = row_filter(df, [{"column": "year", "op": "<", "value": year}], source=str(AIME))
        pd.testing.assert_frame_equal(df[mask], df.query(f"year < {year}"))
    spec = {"source": str(AIME), "columns": ["problem", "solution"], "max_words": 64}
    old = df.query("year < 2014")
    texts = read_corpus({**spec, "where": [{"column": "year", "op": "<", "value": 2014}]})
    assert len(texts) == len(old) and texts[0].startswith(str(old["problem"].iloc[0]).strip())
    both = row_filter(df, [{"column": "year", "op": "in", "value": [1990, 2000]},
                           {"column": "year", "op": "not_in", "value": [2000]}], source="t")
    assert set(df[both]["year"]) == {1990}


def test_where_value_is_never_evaluated(tmp_path):
    from mialab.data.corpus import row_filter

    marker = tmp_path / "marker"
    df = pd.DataFrame({"year": [2000, 2020], "text": ["a", "b"]})
    payload = f"@__import__('pathlib').Path({str(marker)!r}).write_text('x')"
    assert not row_filter(df, [{"column": "text", "op": "==", "value": payload}], source="t").any()
    assert not marker.exists()


def test_where_errors_name_the_column_and_the_file():
    from mialab.data.corpus import row_filter

    df = pd.DataFrame({"year": [2000], "text": ["a"]})
    with pytest.raises(ValueError, match=r"aime\.json: where\[0\] names column 'yaer'; the columns are \['year', 'text'\]"):
        row_filter(df, [{"column": "yaer", "op": "<", "value": 1}], source="aime.json")
    with pytest.raises(ValueError, match="op '~'"):
        row_filter(df, [{"column": "year", "op": "~", "value": 1}], source="aime.json")
    with pytest.raises(ValueError, match="takes a list"):
        row_filter(df, [{"column": "year", "op": "in", "value": 1}], source="aime.json")


def test_schema_rejects_query_and_unknown_ops():
    corpus = sub_schema(SCHEMA["$defs"]["corpus"]["oneOf"][1])
    jsonschema.validate({"source": "f", "where": [{"column": "year", "op": "<", "value": 2014}]}, corpus)
    for bad in ({"source": "f", "query": "year < 2014"},
                {"source": "f", "where": [{"column": "year", "op": "~", "value": 1}]},
                {"source": "f", "where": [{"column": "year", "op": "<", "value": 1, "extra": 2}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, corpus)
