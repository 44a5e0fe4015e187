"""Staging (mialab.pipeline.prefetch, rule prefetch): every hub model, hub dataset and file a config names is
fetched into HF_HOME and the data cache from a hub and a file server (here local ones, tests/fake_hub.py: no
outside network), the revisions it resolved into the config's lock file (mialab.pipeline.lock), and the jobs then
read them offline; a run whose sources are not pinned and fetched stops at plan time naming them and the one
command to run; an exported HF_HUB_OFFLINE=0 is kept."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from fake_hub import serve
from workflow_helpers import (
    PAPER_CONFIGS,
    PAPER_PLANS,
    REPO,
    checkout_copy,
    dry_run_as_documented,
    foundation_config,
    make_workdir,
    repo_copy,
    run_documented,
    run_line,
    snakemake,
    validated,
)

from mialab.data.sources import cached_file, column_values, read_table
from mialab.lm.vllm_backend import VLLMBackend
from mialab.pipeline.config import ConfigError, data_paths
from mialab.pipeline.lock import (
    apply_lock,
    file_sources,
    hub_sources,
    lock_path,
    prefetch_command,
    read_lock,
    write_lock,
)
from mialab.pipeline.prefetch import (
    HubItem,
    check_hub_cache,
    fetch_file,
    fetch_files,
    hub_items,
    hub_revisions,
    pin_models,
    prefetch,
)


def paper(name: str) -> dict:
    return yaml.safe_load((REPO / "configs" / "paper" / f"{name}.yaml").read_text())


def test_hub_items_of_paper_configs():
    items = hub_items(paper("calibdcd_instruct_models"))
    models = {i.repo_id: i.key for i in items if i.repo_type == "model"}
    assert models == {"Qwen/Qwen2.5-7B-Instruct": "models.qwen25_7b_instruct.path",
                      "meta-llama/Llama-3.1-8B-Instruct": "models.llama31_8b_instruct.path",
                      "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": "models.r1_distill_qwen_7b.path",
                      "openai-community/gpt2": "models.gpt2_reference.path",   # detectors name it: a model name
                      "openai-community/gpt2-medium": "models.gpt2_medium.path",
                      "openai-community/gpt2-large": "models.gpt2_large.path",
                      "google-bert/bert-base-cased": "calibdcd.detectors.veilprobe.mlm_model"}
    hub_named = paper("calibdcd_instruct_models")   # attribution models named by hub id: each list item
    hub_named["calibdcd"]["detectors"]["veilprobe"]["key_token_models"] = ["gpt2_reference", "openai-community/gpt2-xl"]
    assert {i.repo_id: i.key for i in hub_items(hub_named)}["openai-community/gpt2-xl"] == \
        "calibdcd.detectors.veilprobe.key_token_models[1]"
    datasets = {(i.repo_id, i.split): i.key for i in items if i.repo_type == "dataset"}
    expected = {(ds["pool"]["source"]["hub"], ds["pool"]["source"].get("split")): f"datasets.{d}.pool.source"
                for d, ds in paper("calibdcd_instruct_models")["datasets"].items()}
    assert datasets == expected and datasets[("swj0419/WikiMIA", "WikiMIA_length64")] == "datasets.wikimia.pool.source"
    adra = {(i.repo_type, i.repo_id): i.key for i in hub_items(paper("adra_aime"))}
    assert adra[("model", "Qwen/Qwen3-Embedding-8B")] == "n_sampling.metrics.embedding_model"
    assert adra[("dataset", "ADRA-RL/AIME-2021-2025-Cleaned")] == "datasets.aime.pool.source"
    assert adra[("dataset", "allenai/tulu-3-sft-mixture")] == "models.tulu2_aime.filler.source"   # an SFT filler too
    tiny = foundation_config()
    tiny["n_sampling"] = {"metrics": {"embedding_model": "all-MiniLM-L6-v2"}}   # the packaged encoder
    assert hub_items(tiny) == []


def test_a_failed_fetch_names_the_key():
    def down(item):
        raise OSError("connection refused")

    with pytest.raises(RuntimeError, match=r"models.m.path: could not fetch model org/m \(revision v1\): connection"):
        prefetch([HubItem("models.m.path", "model", "org/m", "v1")], model=down)


def test_exported_hub_online_is_kept_by_the_vllm_worker(monkeypatch):
    backend = object.__new__(VLLMBackend)
    backend.kv_cache_space_gib = 1
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert backend.worker_env()["HF_HUB_OFFLINE"] == "0"
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert backend.worker_env()["HF_HUB_OFFLINE"] == "1"


COMMIT = "7e79e2d33899010b0f2f5d9aa55168c07f55a6c9"


@pytest.mark.slow
def test_prefetch_from_a_local_hub_then_the_jobs_run_offline(tmp_path: Path, monkeypatch):
    """Before prefetch a dry run stops naming the unpinned hub dataset, the file not yet fetched and the command;
    rule prefetch against a hub and a file server served from a folder fetches them, writes the hub dataset's
    revision into the config's lock file; then, the servers gone, build_pool reads both offline (the hub dataset
    from its snapshot at the locked revision, the file from the data cache), and the model's files are in the hub
    cache (no pickles)."""
    root = tmp_path / "hub"
    ds = root / "datasets" / "swj0419" / "WikiMIA" / "data"
    ds.mkdir(parents=True)
    shutil.copy(REPO / "resources/data/wikimia/WikiMIA_length64.parquet", ds / "WikiMIA_length64-00000-of-00001.parquet")
    raw = root / "raw" / "org" / "aime" / COMMIT / "data" / "aime_1983_2023.json"
    raw.parent.mkdir(parents=True)
    shutil.copy(REPO / "resources/data/aime/aime_1983_2023.json", raw)
    lm = root / "models" / "org" / "tiny-lm"
    lm.mkdir(parents=True)
    (lm / "config.json").write_text('{"model_type": "llama"}')
    (lm / "model.safetensors").write_bytes(b"\0" * 64)
    (lm / "pytorch_model.bin").write_bytes(b"pickled weights")
    (lm / "modeling_tiny.py").write_text("raise SystemExit")
    cfg = foundation_config()
    cfg["seeds"] = [0]
    cfg["datasets"]["wikimia"]["pool"]["source"] = {"hub": "swj0419/WikiMIA", "split": "WikiMIA_length64"}
    aime_file = {"github": "org/aime", "commit": COMMIT, "path": "data/aime_1983_2023.json",
                 "sha256": hashlib.sha256(raw.read_bytes()).hexdigest()}
    cfg["datasets"]["aime"]["pool"]["source"][0] = aime_file
    cfg["models"]["released"] = {"kind": "hf", "path": "org/tiny-lm", "datasets": []}
    workdir = make_workdir(tmp_path / "work", cfg)
    hf_home, data_cache = tmp_path / "hf_home", tmp_path / "data"
    server, requests = serve(root)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("MIALAB_DATA_CACHE", str(data_cache))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("MIALAB_GITHUB_RAW", f"http://127.0.0.1:{server.server_port}/raw")
    before = snakemake(workdir, "-n", "splits", check=False)
    out = before.stdout + before.stderr
    assert before.returncode != 0 and "data sources not fetched yet" in out, out[-3000:]
    assert "hub dataset swj0419/WikiMIA: no revision, and no entry in config.lock (datasets.wikimia.pool.source)" in out
    assert f"/org/aime/{COMMIT}/data/aime_1983_2023.json: not in the data cache" in out
    assert f"snakemake prefetch -s {REPO / 'Snakefile'} -d {workdir} --configfile {workdir / 'config.yaml'}" in out
    try:
        snakemake(workdir, "--cores", "1", "prefetch", timeout=300)   # HF_HUB_OFFLINE=1 is exported: the rule goes online itself
    finally:
        server.shutdown()
    manifest = json.loads((workdir / "results/prefetch/manifest.json").read_text())
    assert [(i["key"], i["repo_id"]) for i in manifest["items"]] == [
        ("models.released.path", "org/tiny-lm"), ("datasets.wikimia.pool.source", "swj0419/WikiMIA")]
    snapshot = Path(manifest["items"][0]["fetched"])
    assert snapshot.is_relative_to(hf_home) and sorted(p.name for p in snapshot.iterdir()) == ["config.json",
                                                                                              "model.safetensors"]
    assert [(f["key"], Path(f["fetched"])) for f in manifest["files"]] == [
        ("datasets.aime.pool.source[0]", cached_file(aime_file))]
    assert read_lock(workdir / "config.lock") == {"swj0419/WikiMIA": "0123456789abcdef0123456789abcdef01234567"}
    served = len(requests)
    snakemake(workdir, "--cores", "1", "splits", timeout=300)   # offline: the hub is down
    assert len(requests) == served
    (pool,) = workdir.glob("results/pools/wikimia/*/pool.parquet")
    assert len(pd.read_parquet(pool)) == len(pd.read_parquet(REPO / "resources/data/wikimia/WikiMIA_length64.parquet"))
    (manifest,) = workdir.glob("results/pools/wikimia/*/manifest.json")
    assert json.loads(manifest.read_text())["config"]["source"]["revision"] == "0123456789abcdef0123456789abcdef01234567"
    assert list(workdir.glob("results/pools/aime/*/pool.parquet"))
    assert os.environ.get("HF_HUB_OFFLINE") != "0"


# --- file sources, the lock file ----------------------------------------------------------------------------------

def test_a_file_is_fetched_streamed_and_checked_and_a_wrong_hash_keeps_nothing(tmp_path: Path, monkeypatch):
    root = tmp_path / "srv"
    raw = root / "raw" / "org" / "data" / COMMIT / "sets" / "table.parquet"
    raw.parent.mkdir(parents=True)
    pd.DataFrame({"prompt": [[{"role": "user", "content": "q"}]], "member": [1]}).to_parquet(raw)
    digest = hashlib.sha256(raw.read_bytes()).hexdigest()
    server, requests = serve(root)
    monkeypatch.setenv("MIALAB_DATA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MIALAB_GITHUB_RAW", f"http://127.0.0.1:{server.server_port}/raw")
    source = {"github": "org/data", "commit": COMMIT, "path": "sets/table.parquet", "sha256": digest}
    wrong = {**source, "sha256": "0" * 64}
    try:
        with pytest.raises(FileNotFoundError, match="not in the data cache .*snakemake prefetch <your --profile and "
                                                    "--configfile arguments>"):
            read_table(source)   # a job never downloads
        with pytest.raises(RuntimeError, match=f"datasets.x.pool.source: could not fetch file https://raw.githubuser"
                                               f"content.com/org/data/{COMMIT}/sets/table.parquet: .*sha256 is {digest}, "
                                               f"the config's {'0' * 64}; not kept"):
            fetch_files([("datasets.x.pool.source", wrong)])
        assert not (tmp_path / "cache").exists() or not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))
        (row,) = fetch_files([("datasets.x.pool.source", source)])
        assert Path(row["fetched"]) == tmp_path / "cache" / digest / "table.parquet" == cached_file(source)
        served = len(requests)
        assert fetch_file(source) == cached_file(source) and len(requests) == served   # fetched once
    finally:
        server.shutdown()
    assert column_values(read_table(source), "prompt[-1].content", source=source).tolist() == ["q"]
    with pytest.raises(ValueError, match=r"only http\(s\) URLs"):
        fetch_file({"url": "file:///etc/passwd.json", "sha256": digest})


def test_the_lock_file_pins_what_the_config_leaves_open(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    config = {"datasets": {"a": {"pool": {"source": {"hub": "org/a"}, "nonmember_source": {"hub": "org/b",
                                                                                            "revision": "v1"}}}},
              "models": {"m": {"filler": {"source": {"hub": "org/a", "split": "train"}}}}}
    lock = lock_path([str(tmp_path / "configs" / "exp.yaml"), "configs/overlay.yaml"])
    assert lock == Path("configs/exp.lock") and read_lock(lock) == {}
    write_lock(lock, {"org/a": "c" * 40}, str(tmp_path / "configs" / "exp.yaml"))
    write_lock(lock, {"org/c": "d" * 40}, "configs/exp.yaml")   # added, the earlier entries kept
    assert read_lock(lock) == {"org/a": "c" * 40, "org/c": "d" * 40}
    assert lock.read_text().startswith("# Hub revisions resolved by rule prefetch for the hub datasets and models "
                                       "configs/exp.yaml")
    apply_lock(config, read_lock(lock))
    assert [(k, s.get("revision")) for k, s in hub_sources(config)] == [
        ("datasets.a.pool.source", "c" * 40), ("datasets.a.pool.nonmember_source", "v1"),   # a pin in the config wins
        ("models.m.filler.source", "c" * 40)]
    write_lock(lock, {"org/model": "e" * 40}, "configs/exp.yaml", "models")   # the models' section beside it
    assert read_lock(lock, "models") == {"org/model": "e" * 40} and read_lock(lock) == {"org/a": "c" * 40,
                                                                                        "org/c": "d" * 40}
    lock.write_text("datasets: [org/a]\n")
    with pytest.raises(ConfigError, match="configs/exp.lock: not a lock file"):
        read_lock(lock)
    assert prefetch_command(["-n", "all", "--profile", "profiles/slurm", "--configfile", "configs/exp.yaml"]) == \
        "snakemake prefetch --profile profiles/slurm --configfile configs/exp.yaml"


def test_every_hub_model_is_pinned_by_the_lock_file_and_loaded_at_its_commit(tmp_path: Path, monkeypatch):
    """A hub model the config does not pin (of models:, or named elsewhere: the encoder) takes its lock file's commit:
    the models' keys hold it, the jobs load that snapshot (mialab.lm.loading.pinned) whatever the cache's main says,
    and a run stops before any job while one has no commit or is not in the cache at it, naming each and the
    prefetch command."""
    from huggingface_hub import constants

    from mialab.lm.loading import HUB_REVISIONS, pin_hub_revisions, pinned

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    config = validated(paper("adra_aime"))
    lock = {"allenai/tulu-2-7b": "1" * 40, "Qwen/Qwen3-Embedding-8B": "3" * 40}
    argv = ["--profile", "profiles/slurm", "--configfile", "configs/paper/adra_aime.yaml"]
    with pytest.raises(ConfigError) as err:
        check_hub_cache(config, {}, Path("configs/paper/adra_aime.lock"), argv)
    assert ("n_sampling.metrics.embedding_model: Qwen/Qwen3-Embedding-8B (revision unpinned: none in the config, no "
            "entry in configs/paper/adra_aime.lock)") in str(err.value)
    assert "with the same HF_HOME: snakemake prefetch --profile profiles/slurm --configfile configs/paper/" \
           "adra_aime.yaml" in str(err.value)
    pin_models(config, lock)
    assert config["models"]["tulu2_7b"]["revision"] == "1" * 40 and "revision" not in config["models"]["tulu2_aime"]
    items = hub_items(config, lock)
    assert hub_revisions(items) == lock
    with pytest.raises(ConfigError, match=r"models\.tulu2_7b\.path: allenai/tulu-2-7b \(revision 1{40}\): not in the "
                                          r"hub cache"):
        check_hub_cache(config, lock, None, argv)
    for repo, commit in lock.items():   # each at its commit; the cache's main names another
        snapshot = tmp_path / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / commit
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text("{}")
        (snapshot.parents[1] / "refs").mkdir()
        (snapshot.parents[1] / "refs" / "main").write_text("f" * 40)
    check_hub_cache(config, lock, None, argv)
    pin_hub_revisions(hub_revisions(items))
    try:
        assert pinned("Qwen/Qwen3-Embedding-8B") == str(tmp_path / "hub" / "models--Qwen--Qwen3-Embedding-8B" /
                                                        "snapshots" / ("3" * 40))
        assert pinned("org/not-pinned") == "org/not-pinned"
    finally:
        os.environ.pop(HUB_REVISIONS)


# --- the paper configs, as a new user runs them -------------------------------------------------------------------

@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory) -> Path:
    return repo_copy(tmp_path_factory.mktemp("clone"))


@pytest.mark.parametrize("path", PAPER_CONFIGS, ids=[p.stem for p in PAPER_CONFIGS])
def test_before_prefetch_a_paper_config_stops_naming_its_sources_and_the_command(path: Path, fresh_clone: Path):
    """A fresh clone: the documented command's dry run fails at plan time, naming every source a job could not read
    and the one command that fetches them (run as written, with the stand-in hub, it plans: test_paper_configs)."""
    proc = run_documented(fresh_clone, run_line(path))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "data sources not fetched yet" in out, out[-3000:]
    assert f"with: snakemake prefetch --profile profiles/slurm --configfile configs/paper/{path.name}\n" in out
    config = yaml.safe_load(path.read_text())
    for key, source in hub_sources(config):   # (a pinned one is named too where the hub cache lacks it)
        if "revision" not in source:
            assert f"hub dataset {source['hub']}: no revision" in out and key in out, (key, out[-3000:])
    for key, source in file_sources(config):
        assert source['sha256'] in out and key in out, (key, out[-3000:])
    assert "Job stats" not in out


@PAPER_PLANS
@pytest.mark.parametrize("path", PAPER_CONFIGS, ids=[p.stem for p in PAPER_CONFIGS])
def test_a_paper_config_reads_only_pinned_sources_and_the_repository(path: Path):
    """After prefetch (the stand-in hub, in the shared clone; the dry run passing means every source is pinned and
    in the caches) every hub dataset has a revision, in the config or in the lock file prefetch wrote beside it,
    every file source a sha256, and every local data path is a file of the repository: nothing made by hand."""
    proc = dry_run_as_documented(run_line(path))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    config = validated(yaml.safe_load((checkout_copy() / "configs" / "paper" / path.name).read_text()))
    lock = read_lock(checkout_copy() / "configs" / "paper" / f"{path.stem}.lock")
    open_ = [s["hub"] for _, s in hub_sources(config) if "revision" not in s]
    assert set(open_) == set(lock), (open_, lock)
    assert all(len(s["sha256"]) == 64 for _, s in file_sources(config))
    tracked = set(subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split())
    assert all(p in tracked and p.startswith("resources/") for _, p in data_paths(config)), data_paths(config)
