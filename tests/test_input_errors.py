"""Every bad input is named: closed pool keys per family, duplicate YAML keys, explicit local vs
hub sources, and data errors that name the dataset, file, row or column."""

import copy
import json
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
import yaml
from snakemake.utils import validate
from workflow_helpers import REPO, default_config, foundation_config, job_stats, make_workdir, snakemake

from mialab.data.mixing import check_filler
from mialab.data.registry import config_schema, get_family, known_families
from mialab.data.sampling import sample_split
from mialab.data.sources import read_table
from mialab.pipeline.config import ConfigError, check_config, load_yaml, typed_overrides

SCHEMA = str(REPO / "schemas" / "config.schema.yaml")


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    """Config paths are relative to the working directory, as under Snakemake."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def validated(cfg: dict) -> dict:
    cfg = copy.deepcopy(cfg)
    validate(cfg, SCHEMA)
    return cfg


# -- closed pool sections -----------------------------------------------------------------------
@pytest.mark.parametrize("key", ["prefix_ration", "max_word", "membrship"])
def test_unknown_pool_key_names_key_family_and_accepted_keys(key):
    cfg = default_config()
    cfg["datasets"]["wikimia"]["pool"][key] = 1
    with pytest.raises(ConfigError, match=rf"datasets\.wikimia\.pool\.{key}: not a key of family 'wikimia'; "
                                          r"it accepts: .*prefix_ratio.*membership"):
        check_config(validated(cfg))


@pytest.mark.parametrize("family", ["mimir", "wikimia_24_hard", "dolma3_arxiv", "s1", "s1_1", "tulu3", "lara_rl"])
def test_membership_is_rejected_where_the_family_does_not_implement_it(family):
    cfg = default_config()
    cfg["datasets"]["wikimia"]["pool"] = {"family": family, "source": "resources/data/wikimia",
                                          "membership": {"rule": "label"}}
    with pytest.raises(ConfigError, match=rf"datasets\.wikimia\.pool\.membership: not a key of family '{family}'"):
        check_config(cfg)


def test_every_family_declares_its_keys_and_the_schema_dispatches_on_it():
    schema = config_schema()
    branches = schema["properties"]["datasets"]["additionalProperties"]["properties"]["pool"]["allOf"]
    dispatched = {b["if"]["properties"]["family"]["const"]: b["then"]["$ref"] for b in branches}
    assert set(schema["$defs"]["pools"]) - {"description"} == set(known_families()) == set(dispatched)
    assert all(ref == f"#/$defs/pools/{f}" for f, ref in dispatched.items())


def test_defaults_come_from_the_schema():
    """A family reads its defaults from its declaration (s1_1's members are DeepSeek's traces)."""
    fix = REPO / "tests" / "fixtures"
    pool = get_family("s1_1")({"source": str(next(fix.glob("s1*")))})
    assert set(pool.loc[pool["label"] == 1, "group"]) == {"deepseek"}


@pytest.mark.parametrize("path", [REPO / "config.yaml", *sorted((REPO / "configs" / "paper").glob("*.yaml"))],
                         ids=lambda p: p.stem)
def test_existing_configs_pass_the_closed_pool_schema(path):
    from mialab.pipeline.config import check_pool_keys

    check_pool_keys(validated(yaml.safe_load(path.read_text()))["datasets"])


# -- YAML files ---------------------------------------------------------------------------------
def test_duplicate_yaml_key_names_file_line_and_key(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("seeds: [0]\ndatasets:\n  a:\n    split: {n_per_class: 4}\n    split: {n_per_class: 8}\n")
    with pytest.raises(ConfigError, match=rf"{f}:5: key 'split' given twice .*first at line 4"):
        load_yaml(f)


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("seeds: [0]\ndatasets:\n  a: {pool: [\n")
    with pytest.raises(ConfigError, match=rf"{f}:\d+:\d+: YAML syntax error"):
        load_yaml(f)


def test_duplicate_key_fails_the_dry_run_before_any_job(tmp_path):
    wd = make_workdir(tmp_path)
    text = (wd / "config.yaml").read_text()
    (wd / "config.yaml").write_text(text.replace("seeds:", "seeds: [7]\nseeds:", 1))
    proc = snakemake(wd, "-n", check=False)
    assert proc.returncode != 0
    assert "config.yaml:2: key 'seeds' given twice in one mapping (first at line 1)" in proc.stdout + proc.stderr
    assert not (wd / "results").exists()


def test_a_yte_template_config_is_refused_before_snakemake_evaluates_it(tmp_path):
    """Snakemake evaluates a config file's YTE expressions as Python when it loads it; the workflow profile
    (profiles/default) checks the --configfile files first, so the run stops, naming the file, and its
    expression never runs."""
    wd = make_workdir(tmp_path)
    marker = tmp_path / "marker"
    text = (wd / "config.yaml").read_text()
    (wd / "config.yaml").write_text(f"__use_yte__: true\nmarker: ?__import__('pathlib').Path({str(marker)!r}).touch()\n"
                                    + text)
    proc = snakemake(wd, "-n", check=False)
    assert proc.returncode != 0
    assert "config.yaml: __use_yte__ makes Snakemake evaluate the file's expressions as Python" in proc.stdout + proc.stderr
    assert not marker.exists() and not (wd / "results").exists()


@pytest.mark.parametrize("given, broken, line", [("--configfile", "seeds: [0, 1\ndatasets: {}\n", 2),
                                                 ("default", "seeds:\n\t- 0\n", 2)], ids=["syntax", "tab"])
def test_a_yaml_error_in_a_config_file_names_the_file_and_line_before_snakemake_reads_it(tmp_path, given, broken, line):
    """A config file given with --configfile (checked by the workflow profile) or the default config.yaml
    (checked by the Snakefile) that is not YAML: the message names the file and the line (Snakemake's
    loader says "not valid JSON or YAML")."""
    wd = make_workdir(tmp_path)
    (wd / "config.yaml").write_text(broken)
    if given == "--configfile":
        proc = snakemake(wd, "-n", check=False)
        where = f"{wd / 'config.yaml'}:{line}:"
    else:
        proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "-d", str(wd)],
                              capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        where = f"config.yaml:{line}:"
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"{where}" in out and "YAML syntax error" in out, out[-3000:]


def test_nested_config_overrides_keep_their_yaml_types(tmp_path):
    """--config values are read as YAML, nested ones too (Snakemake passes the scalars of a nested value, and
    the items of a list, as strings): the dry run plans with one seed and scoring.batch_size 32."""
    wd = make_workdir(tmp_path, foundation_config())
    proc = snakemake(wd, "-n", "splits", "--config", "scoring={batch_size: 32, max_length: 128}", "seeds=[0]",
                     check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert job_stats(proc.stdout)["build_split"] == len(foundation_config()["datasets"])
    with pytest.raises(ConfigError, match=r"--config scoring=\{batch_size: 32: not valid YAML"):
        typed_overrides(["scoring={batch_size: 32"])
    assert typed_overrides(["rehearsal=true", "scoring={k: [0.2], device: cpu}", "x="]) == [
        ("rehearsal", True), ("scoring", {"k": [0.2], "device": "cpu"}), ("x", None)]


# -- local paths and hub ids ----------------------------------------------------------------------
def test_missing_local_path_without_extension_fails_naming_the_key():
    cfg = default_config()
    cfg["datasets"]["wikimia"]["pool"]["source"] = "resources/data/wikimia_typo"
    with pytest.raises(ConfigError, match=r"datasets\.wikimia\.pool\.source: 'resources/data/wikimia_typo' does "
                                          r"not exist .*\{hub: org/name\}"):
        check_config(validated(cfg))


def test_a_hub_dataset_is_written_explicitly():
    cfg = default_config()
    cfg["datasets"]["wikimia"]["pool"]["source"] = {"hub": "swj0419/WikiMIA", "split": "WikiMIA_length64",
                                                    "revision": "abc"}
    check_config(validated(cfg))  # a hub dataset is not a path: nothing to find locally
    cfg["datasets"]["wikimia"]["pool"]["source"] = {"hub": "not a hub id"}
    with pytest.raises(Exception, match=r"\{'hub': 'not a hub id'\} is not valid"):
        validated(cfg)


def test_missing_filler_and_corpus_fail_naming_their_key():
    cfg = default_config()
    cfg["models"]["base"]["filler"] = "resources/data/tinyshakespeare/nope.txt"
    with pytest.raises(ConfigError, match=r"models\.base\.filler: .*nope\.txt' does not exist"):
        check_config(validated(cfg))


@pytest.mark.parametrize("path", ["checkpoints/run1/final", "./my_model", "gpt-2"])
def test_hf_model_path_that_is_neither_a_folder_nor_a_hub_id(path):
    cfg = default_config()
    cfg["models"]["ext"] = {"kind": "hf", "path": path, "datasets": []}
    with pytest.raises(ConfigError, match=rf"models\.ext\.path: '{path}' is not an existing model folder, nor a hub "
                                          r"model id \(org/name\)"):
        check_config(validated(cfg))
    cfg["models"]["ext"]["path"] = "openai-community/gpt2"
    check_config(validated(cfg))


def _model_folder(root: Path) -> Path:
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (root / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(16))
    return root


@pytest.mark.parametrize("damage", ["safetensors", "config"])
def test_truncated_model_files_fail_naming_the_model_and_file(tmp_path, damage):
    folder = _model_folder(tmp_path / "m")
    cfg = default_config()
    cfg["models"]["ext"] = {"kind": "hf", "path": str(folder), "datasets": []}
    check_config(validated(cfg))
    name = "model.safetensors" if damage == "safetensors" else "config.json"
    data = (folder / name).read_bytes()
    (folder / name).write_bytes(data[: len(data) - 6])
    with pytest.raises(ConfigError, match=rf"models\.ext\.path: .*{name}.*truncated"):
        check_config(validated(cfg))


def test_misspelt_lm_reference_names_key_and_configured_models():
    cfg = default_config()
    cfg["calibdcd"]["detectors"]["dpdllm"]["reference_model"] = "bsae"
    with pytest.raises(ConfigError, match=r"calibdcd\.detectors\.dpdllm\.reference_model: 'bsae' is not a "
                                          r"configured model \(.*base.*\)"):
        check_config(validated(cfg))


def test_uncached_hub_dataset_offline_names_it_and_says_how_to_prefetch(monkeypatch):
    def load_dataset(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.raises(RuntimeError, match=r"hub dataset org/data \(split train\).*HF_HUB_OFFLINE.*hf download "
                                           r"org/data --repo-type dataset"):
        read_table({"hub": "org/data", "split": "train"})


# -- data errors --------------------------------------------------------------------------------
def test_null_text_names_row_and_column(tmp_path):
    f = tmp_path / "w.jsonl"
    f.write_text('{"input": "a b c d", "label": 1}\n{"input": null, "label": 0}\n')
    with pytest.raises(ValueError, match=rf"{f}: column 'input', row 1: missing instead of text"):
        get_family("wikimia")({"source": str(f)})


def test_non_utf8_bytes_name_file_and_offset(tmp_path):
    f = tmp_path / "w.json"
    f.write_bytes(b'[{"input": "caf\xe9 au lait", "label": 1}]')
    with pytest.raises(ValueError, match=rf"{f}: not UTF-8 text: byte offset 15 \(line 1\)"):
        get_family("wikimia")({"source": str(f)})


def test_pretty_printed_json_object_names_file_and_formats(tmp_path):
    f = tmp_path / "w.json"
    f.write_text(json.dumps({"input": ["a b"], "label": [1]}, indent=2))
    with pytest.raises(ValueError, match=rf"{f}: line 1 .*a JSON object spread over several lines; accepted "
                                         r"formats: parquet, csv"):
        get_family("wikimia")({"source": str(f)})


def test_non_integer_year_names_file_row_and_value(tmp_path):
    f = tmp_path / "a.jsonl"
    rows = [{"problem": "p1", "solution": "s one two", "year": 2024}, {"problem": "p2", "solution": "s", "year": "twenty"}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=rf"{f}: column 'year', row 1: 'twenty' is not a year"):
        get_family("aime")({"source": str(f)})


# -- dropped rows and member-only training ----------------------------------------------------------
def test_wikimia_rows_with_both_labels_are_dropped_with_a_warning(tmp_path, caplog):
    f = tmp_path / "w.parquet"
    pd.DataFrame({"input": ["one two three", "one two three", "four five six", "seven eight"],
                  "label": [1, 0, 1, 0]}).to_parquet(f)
    with caplog.at_level(logging.WARNING):
        pool = get_family("wikimia")({"source": str(f)})
    assert len(pool) == 2 and "one two three" not in set(pool["text"])
    assert "dropped 1 paragraph(s) that appear with both labels (2 rows), e.g. ids ['wikimia-" in caplog.text


def test_member_only_training_is_named(caplog):
    with pytest.raises(ValueError, match=r"models\.base\.filler: the filler holds no text"):
        check_filler("base", [], ["a member text"])
    with caplog.at_level(logging.WARNING):
        check_filler("base", ["one two"], ["a much longer member text"] * 3)
    assert "models.base: the filler has 2 words, fewer than the 15 words" in caplog.text


def test_split_error_advises_a_config_key_of_the_dataset():
    pool = pd.DataFrame({"id": [f"i{i}" for i in range(6)], "text": ["t"] * 6, "prefix": ["t"] * 6,
                         "suffix": ["t"] * 6, "label": [1, 0] * 3, "source": ["s"] * 6})
    with pytest.raises(ValueError, match=r"dataset 'wiki': asked for 5 per class .*; lower "
                                         r"datasets\.wiki\.split\.n_per_class to at most 3$") as err:
        sample_split(pool, 5, 0, name="dataset 'wiki'", n_key="datasets.wiki.split.n_per_class")
    assert "cap_to_min_class" not in str(err.value)


def test_wordnet_cache_folder_is_configurable(monkeypatch, tmp_path):
    from mialab.text.wordnet import cache_dir

    monkeypatch.setenv("MIALAB_WORDNET_CACHE", str(tmp_path / "wn"))
    assert cache_dir() == tmp_path / "wn"
