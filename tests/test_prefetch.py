"""Staging (mialab.pipeline.prefetch, rule prefetch): every hub model and dataset a config names is fetched into
HF_HOME from a hub (here a local one, tests/fake_hub.py: no outside network), and the jobs then read
them offline; an exported HF_HUB_OFFLINE=0 is kept."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from fake_hub import serve
from workflow_helpers import REPO, foundation_config, make_workdir, snakemake

from mialab.lm.vllm_backend import VLLMBackend
from mialab.pipeline.prefetch import HubItem, hub_items, prefetch


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
    adra = {i.repo_id: i.key for i in hub_items(paper("adra_aime"))}
    assert adra["Qwen/Qwen3-Embedding-8B"] == "n_sampling.metrics.embedding_model"
    assert not any(i.repo_type == "dataset" for i in hub_items(paper("adra_aime")))   # local files only
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


@pytest.mark.slow
def test_prefetch_from_a_local_hub_then_the_jobs_run_offline(tmp_path: Path, monkeypatch):
    """rule prefetch against a hub served from a folder; then, the hub gone, build_pool reads the hub
    dataset offline from the same HF_HOME, and the model's files are in the hub cache (no pickles)."""
    root = tmp_path / "hub"
    ds = root / "datasets" / "swj0419" / "WikiMIA" / "data"
    ds.mkdir(parents=True)
    shutil.copy(REPO / "resources/data/wikimia/WikiMIA_length64.parquet", ds / "WikiMIA_length64-00000-of-00001.parquet")
    lm = root / "models" / "org" / "tiny-lm"
    lm.mkdir(parents=True)
    (lm / "config.json").write_text('{"model_type": "llama"}')
    (lm / "model.safetensors").write_bytes(b"\0" * 64)
    (lm / "pytorch_model.bin").write_bytes(b"pickled weights")
    (lm / "modeling_tiny.py").write_text("raise SystemExit")
    cfg = foundation_config()
    cfg["seeds"] = [0]
    cfg["datasets"] = {"wikimia": cfg["datasets"]["wikimia"]}
    cfg["models"]["sft"]["members"]["dataset"] = "wikimia"
    cfg["datasets"]["wikimia"]["pool"]["source"] = {"hub": "swj0419/WikiMIA", "split": "WikiMIA_length64"}
    cfg["models"]["released"] = {"kind": "hf", "path": "org/tiny-lm", "datasets": []}
    workdir = make_workdir(tmp_path / "work", cfg)
    hf_home = tmp_path / "hf_home"
    server, requests = serve(root)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
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
    served = len(requests)
    snakemake(workdir, "--cores", "1", "splits", timeout=300)   # offline: the hub is down
    assert len(requests) == served
    (pool,) = workdir.glob("results/pools/wikimia/*/pool.parquet")
    assert len(pd.read_parquet(pool)) == len(pd.read_parquet(REPO / "resources/data/wikimia/WikiMIA_length64.parquet"))
    assert os.environ.get("HF_HUB_OFFLINE") != "0"
