"""Stage keys from content (not paths, names or mtimes), damaged built outputs caught by the dry run,
and a moved or copied results tree that reruns nothing."""

import json
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import save_file
from workflow_helpers import REPO, foundation_config, make_workdir, planned_jobs, snakemake

from mialab.core.integrity import DamagedOutputError, check_stages
from mialab.core.io import write_manifest
from mialab.lara.features import shard_fingerprint
from mialab.pipeline.plan import Plan, source_fingerprint


def hf_folder(path, seed):
    """A model folder as from_pretrained reads it: config, tokenizer file, safetensors weights."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4}))
    (path / "tokenizer.json").write_text("{}")
    rng = np.random.default_rng(seed)
    save_file({"w": rng.standard_normal((4, 4)).astype(np.float32)}, str(path / "model.safetensors"))
    return path


def hf_config(path, **extra):
    cfg = foundation_config()
    cfg["models"] = {"target": {"kind": "hf", "path": str(path), **extra}}
    return cfg


def test_swapped_weights_change_the_model_key_and_its_scores_key(tmp_path):
    folder = hf_folder(tmp_path / "model", seed=0)
    before = Plan(hf_config(folder))
    model_key, scores_key = before.model("target").key, before.score_run("target", "aime").key
    hf_folder(tmp_path / "other", seed=1)
    os.replace(tmp_path / "other" / "model.safetensors", folder / "model.safetensors")  # same shapes, other values
    after = Plan(hf_config(folder))
    assert after.model("target").key != model_key
    assert after.score_run("target", "aime").key != scores_key
    assert Plan(hf_config(folder)).model("target").key == after.model("target").key  # stable while unchanged


def test_fingerprints_hold_no_absolute_path_and_no_mtime(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("some text")
    fp = source_fingerprint(["data/a.txt", "data"])
    assert str(tmp_path) not in json.dumps(fp)
    os.utime("data/a.txt", ns=(10**18, 10**18))
    assert source_fingerprint(["data/a.txt", "data"]) == fp

    hf_folder(tmp_path / "model", seed=0)
    texts = ["a text", "another"]
    fp = shard_fingerprint(str(tmp_path / "model"), "float32", 64, texts)
    shutil.copytree(tmp_path / "model", tmp_path / "moved" / "model")  # new path, new mtimes
    assert shard_fingerprint(str(tmp_path / "moved" / "model"), "float32", 64, texts) == fp
    hf_folder(tmp_path / "moved" / "model", seed=1)  # other weights
    assert shard_fingerprint(str(tmp_path / "moved" / "model"), "float32", 64, texts) != fp


def test_unpinned_hub_models_warn_and_a_pinned_revision_changes_the_key():
    """(A hub dataset without a revision stops the run instead: tests/test_prefetch.py.)"""
    cfg = hf_config("org/some-model")
    cfg["datasets"]["aime"]["pool"]["source"] = {"hub": "org/some-dataset"}
    plan = Plan(cfg)
    (warning,) = plan.unpinned()
    assert warning.startswith("models.target.path: hub model 'org/some-model'") and "models.target.revision" in warning
    assert plan.model("target").manifest["revision"] == "unpinned" and plan.pool("aime").key

    cfg["models"]["target"]["revision"] = "0123abc"
    cfg["datasets"]["aime"]["pool"]["source"]["revision"] = "4567def"
    pinned = Plan(cfg)
    assert pinned.unpinned() == []
    assert pinned.model("target").key != plan.model("target").key
    assert pinned.pool("aime").key != plan.pool("aime").key
    assert pinned.score_run("target", "aime").key != plan.score_run("target", "aime").key


def test_a_recorded_output_that_changed_or_vanished_is_named(tmp_path):
    stage = tmp_path / "stage"
    hf_folder(stage / "model", seed=0)
    (stage / "table.csv").write_text("a,b\n1,2\n")
    write_manifest({"key": "k"}, stage / "manifest.json", outputs=[stage / "model", stage / "table.csv",
                                                                  stage / "manifest.json"])
    check_stages([str(stage)])  # as recorded
    (stage / "table.csv").write_text("a,b\n1,3\n")
    (stage / "model" / "model.safetensors").unlink()
    with pytest.raises(DamagedOutputError) as err:
        check_stages([str(stage)])
    assert "model/model.safetensors is missing" in str(err.value)
    assert "table.csv has changed content" in str(err.value) and f"rm -r {stage}" in str(err.value)


# -- a small finished workflow: one dataset, one seed, a two-step pretrained model ----------------
def small_config():
    cfg = foundation_config()
    cfg["seeds"] = [0]
    cfg["datasets"] = {"wikimia": cfg["datasets"]["wikimia"]}
    cfg["datasets"]["wikimia"]["split"]["n_per_class"] = 8
    cfg["tokenizer"] = {"vocab_size": 300, "corpora": ["resources/data/wikimia/WikiMIA_length64.parquet"]}
    base = {k: v for k, v in cfg["models"]["base"].items() if k != "reference"}
    base["filler_fraction"] = 0.01
    base["architecture"] = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 64}
    base["train"].update(steps=2, batch_size=2, seq_len=64, warmup_steps=1)
    cfg["models"] = {"base": base}
    cfg["scoring"].update(methods=["loss", "zlib"], max_length=64)
    cfg["evaluation"]["baseline"] = "loss"  # the headline's baseline is a column the config scores
    return cfg


PROFILE = ("--profile", str(REPO / "profiles" / "local"))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    wd = make_workdir(tmp_path_factory.mktemp("finished"), small_config())
    snakemake(wd, *PROFILE, "--cores", "2")
    assert planned_jobs(wd) == {}
    return wd


def test_a_removed_weight_file_of_a_built_model_fails_the_dry_run(finished, tmp_path):
    wd = tmp_path / "wd"
    shutil.copytree(finished, wd, symlinks=True)
    (model,) = (wd / "results" / "models" / "base").glob("*/model")
    (model / "model.safetensors").unlink()
    proc = snakemake(wd, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "model/model.safetensors is missing" in out
    assert f"rm -r {model.parent.relative_to(wd)}" in out
    shutil.rmtree(model.parent)  # what the message says to do: the model and what depends on it are rebuilt
    assert planned_jobs(wd) == {"pretrain_model": 1, "score_baselines": 1, "evaluate_dataset": 1,
                                "summarize": 1, "all": 1}


def test_a_copied_results_tree_in_a_fresh_clone_reruns_nothing(finished, tmp_path):
    clone = tmp_path / "clone"  # a fresh checkout: every file of the workflow has a new mtime
    clone.mkdir()
    for name in ("Snakefile", "rules", "workflow_scripts", "mialab", "schemas", "profiles", "environment.yml"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copyfile)(REPO / name, clone / name)
    shutil.copytree(REPO / "resources", clone / "resources", copy_function=shutil.copyfile)
    wd = tmp_path / "wd"  # the results and Snakemake's records copied beside it (cp -a)
    wd.mkdir()
    for name in ("results", ".snakemake", "config.yaml"):
        (shutil.copytree if (finished / name).is_dir() else shutil.copy2)(finished / name, wd / name)
    (wd / "resources").symlink_to(clone / "resources")
    for profile in (("--profile", str(clone / "profiles" / "local")), ()):  # the triggers apply without one too
        proc = snakemake(wd, "-n", "-s", str(clone / "Snakefile"), *profile)
        assert "Nothing to be done" in proc.stdout + proc.stderr, (profile, proc.stdout[-3000:])


@pytest.mark.parametrize("profile", [None, "profiles/local", "profiles/slurm"])
def test_content_rerun_triggers_apply_with_or_without_a_profile(profile, monkeypatch):
    """Snakemake reads the workflow profile (profiles/default) on every invocation, beside a --profile or
    without one: the rerun triggers leave out mtime and code (content-addressed keys) and inputs are
    compared by checksum up to 512 MB; a profile's own settings still apply."""
    from snakemake.cli import parse_args
    from snakemake.settings.enums import RerunTrigger

    monkeypatch.chdir(REPO)
    _, args = parse_args(["-n", *(["--profile", profile] if profile else [])])
    assert args.rerun_triggers == {RerunTrigger.INPUT, RerunTrigger.PARAMS, RerunTrigger.SOFTWARE_ENV}
    assert args.max_checksum_file_size == 512 * 2**20
    assert (args.cores, args.executor) == {None: (None, None), "profiles/local": (2, None),
                                           "profiles/slurm": (None, "slurm")}[profile]
