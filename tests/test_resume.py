"""Training jobs resume a killed run to the same bytes; outputs are published whole and readable."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from conftest import DATA, SETTINGS, assert_same_weights, distinct_characters, stop_at, weights
from conftest import PROBLEMS_MODEL as TINY_MODEL  # noqa: F401 (conftest.tiny_model)
from workflow_helpers import grpo_settings

from mialab.core.io import atomic_directory, remove_stale_temporaries, write_json
from mialab.training.checkpoints import check_steps, latest_checkpoint
from mialab.training.grpo import checkpoint_state, last_checkpoint, run_grpo, steps_per_epoch


class Killed(Exception):
    """Stands in for a SIGKILL right after a checkpoint was written."""


def kill_after_first(monkeypatch, module, name: str) -> None:
    """Make ``module.name`` (a checkpoint writer) raise right after its first checkpoint."""
    real = getattr(module, name)

    def save_then_die(*args, **kwargs):
        real(*args, **kwargs)
        raise Killed

    monkeypatch.setattr(module, name, save_then_die)


def record_calls(monkeypatch, module, name: str) -> list[tuple]:
    """The positional arguments of every call of ``module.name`` from now on."""
    real, calls = getattr(module, name), []

    def recorded(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, recorded)
    return calls


class NamedList(list):
    """A Snakemake ``input``/``output``: a list whose items are also attributes."""

    def __init__(self, **items):
        super().__init__(items.values())
        self.__dict__.update(items)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# --- mialab.core.io ---------------------------------------------------------------------------------
@pytest.mark.parametrize("umask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_outputs_moved_into_place_get_the_modes_the_umask_allows(tmp_path, umask, file_mode, dir_mode):
    old = os.umask(umask)
    try:
        write_json({"a": 1}, tmp_path / "result.json")
        with atomic_directory(tmp_path / "model") as tmp:
            write_json({"b": 2}, tmp / "config.json")  # a temporary inside the temporary folder
            (tmp / "private").write_text("kept")
            os.chmod(tmp / "private", 0o400)
    finally:
        os.umask(old)
    assert mode(tmp_path / "result.json") == file_mode
    assert mode(tmp_path / "model") == dir_mode
    assert mode(tmp_path / "model" / "config.json") == file_mode
    assert mode(tmp_path / "model" / "private") == 0o400  # a mode set on purpose is kept


def test_stale_temporaries_of_an_output_are_removed_and_nothing_else(tmp_path):
    for name in (".model.k3j_x9ab.tmp", ".model.old", ".manifest.json.abcd1234.tmp"):
        (tmp_path / name).mkdir() if "manifest" not in name else (tmp_path / name).write_text("")
    (tmp_path / ".model.safetensors.abcd1234.tmp").write_text("")  # another output's temporary
    (tmp_path / "model").mkdir()
    removed = remove_stale_temporaries(tmp_path / "model", tmp_path / "manifest.json", tmp_path / "absent" / "x")
    assert sorted(p.name for p in removed) == [".manifest.json.abcd1234.tmp", ".model.k3j_x9ab.tmp", ".model.old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model.safetensors.abcd1234.tmp", "model"]


def test_a_model_is_published_only_after_every_configured_step():
    assert check_steps(12, 12, "x") == {"completed": 12, "expected": 12}
    with pytest.raises(RuntimeError, match="trained 8 steps but the config asks for 12"):
        check_steps(8, 12, "GRPO epoch 1")


# --- pretraining -------------------------------------------------------------------------------
def _pretrain(tmp_path, name: str, checkpoints=None, every: int = 0):
    from mialab.lm.tiny import init_model, llama_config
    from mialab.training.pretrain import PretrainSettings, pretrain

    model = init_model(llama_config(64, hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=16), 0)
    blocks = np.random.default_rng(1).integers(0, 64, size=(10, 16))
    settings = PretrainSettings(steps=8, batch_size=4, seq_len=16, lr=1e-2, min_lr=1e-3, warmup_steps=2,
                                weight_decay=0.1, grad_clip=1.0, precision="fp32", checkpoint_every=every, seed=3)
    losses = pretrain(model, blocks, settings, checkpoint_dir=checkpoints)
    model.save_pretrained(tmp_path / name, safe_serialization=True)
    return (tmp_path / name / "model.safetensors").read_bytes(), losses


def test_pretraining_killed_after_a_checkpoint_resumes_to_the_same_bytes(tmp_path, monkeypatch):
    from mialab.training import pretrain

    full, full_losses = _pretrain(tmp_path, "full")
    checkpoints = tmp_path / "checkpoints"
    with monkeypatch.context() as m:
        kill_after_first(m, pretrain, "save_checkpoint")
        with pytest.raises(Killed):
            _pretrain(tmp_path, "killed", checkpoints, every=3)  # a new data order every 2 steps: RNG restored
    assert latest_checkpoint(checkpoints).name == "step-00000003"
    saved = record_calls(monkeypatch, pretrain, "save_checkpoint")
    resumed, losses = _pretrain(tmp_path, "resumed", checkpoints, every=3)
    assert [args[1] for args in saved] == [6]  # resumed at step 3, not retrained from step 0
    assert resumed == full and losses == full_losses
    assert [p.name for p in checkpoints.iterdir()] == ["step-00000006"]  # only the last one is kept


def test_pretrain_job_removes_a_stale_temporary_and_its_checkpoints_and_records_its_steps(tiny_model, tmp_path,
                                                                                        monkeypatch):
    import json
    import runpy
    from types import SimpleNamespace

    from mialab.core.jobs import THREAD_VARIABLES
    from mialab.training import pretrain

    (tmp_path / "filler.txt").write_text("\n\n".join(f"paragraph {i} " + "word " * (i % 7 + 20) for i in range(40)))
    out = tmp_path / "base" / "model"
    out.parent.mkdir()
    (out.parent / ".model.k3j_x9ab.tmp").mkdir()  # what a SIGKILLed earlier attempt leaves
    train = {"steps": 5, "batch_size": 2, "seq_len": 16, "lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 1,
             "weight_decay": 0.1, "grad_clip": 1.0, "precision": "fp32", "checkpoint_every": 2, "seed": 0}
    arch = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 16}
    job = SimpleNamespace(
        input=SimpleNamespace(tokenizer=tiny_model, filler=str(tmp_path / "filler.txt"), member_pools=[]),
        output=NamedList(model=str(out), manifest=str(out.parent / "manifest.json")),
        params=SimpleNamespace(spec={"members": [], "filler_fraction": 1.0, "train": train, "architecture": arch},
                               manifest={"key": "k"}),
        wildcards=SimpleNamespace(model="base"), log=[None], threads=1)
    for var in THREAD_VARIABLES:
        monkeypatch.setenv(var, os.environ.get(var, "1"))
    saved = record_calls(monkeypatch, pretrain, "save_checkpoint")
    runpy.run_path("workflow_scripts/pretrain_model.py", init_globals={"snakemake": job})
    assert [args[1] for args in saved] == [2, 4]
    assert sorted(p.name for p in out.parent.iterdir()) == ["manifest.json", "model"]
    assert json.loads((out.parent / "manifest.json").read_text())["steps"] == {"completed": 5, "expected": 5}


# --- SFT (DeepSpeed ZeRO-2 on CPU) ------------------------------------------------------------
@pytest.fixture
def one_process_group(monkeypatch):
    """The environment torchrun gives a single training process, with DeepSpeed's CPU accelerator."""
    from mialab.core.launch import job_environment

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = job_environment(dict(os.environ), gpus=0)
    for var in ("TORCH_EXTENSIONS_DIR", "PATH", "DS_ACCELERATOR"):
        monkeypatch.setenv(var, env[var])
    for var, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(var, value)


def _sft_job(tiny_model, tmp_path, monkeypatch, name: str) -> Path:
    """Run the ``sft_contaminate`` entry point as its rule would (one process), into ``<name>/model``."""
    import json
    import runpy
    import sys

    import pandas as pd
    import torch

    from mialab.core.jobs import THREAD_VARIABLES

    pool, filler = tmp_path / "pool.parquet", tmp_path / "filler.parquet"
    pd.DataFrame({"text": [f"member {i}: " + "word " * (i + 2) for i in range(6)], "label": [1, 0] * 3}).to_parquet(pool)
    pd.DataFrame({"text": [f"filler text {i} " + "other " * i for i in range(9)]}).to_parquet(filler)
    train = {"epochs": 2, "lr": 1e-3, "effective_batch_size": 4, "micro_batch_size": 2, "max_length": 16,
             "warmup": 1, "schedule": "linear", "precision": "fp32", "zero_stage": 2, "grad_clip": 1.0,
             "weight_decay": 0.01, "seed": 5, "checkpoint_every": 2}
    spec = {"kind": "sft", "init": "base", "members": {"dataset": "d", "repeats": 2}, "contamination_rate": 0.5,
            "filler": {"source": str(filler)}, "train": train}
    out = tmp_path / name / "model"
    for var in THREAD_VARIABLES:
        monkeypatch.setenv(var, os.environ.get(var, "1"))
    monkeypatch.setattr(sys, "argv", ["sft_contaminate.py", "--init", tiny_model, "--member-pool", str(pool),
                                      "--spec", json.dumps(spec), "--manifest", json.dumps({"key": name}),
                                      "--out", str(out), "--threads", str(torch.get_num_threads())])
    runpy.run_path("workflow_scripts/sft_contaminate.py", run_name="sft_contaminate")["main"]()
    return out


def test_sft_job_killed_after_a_deepspeed_checkpoint_resumes_to_the_same_bytes(tiny_model, tmp_path, monkeypatch,
                                                                               one_process_group):
    import json

    from mialab.training import sft

    full = _sft_job(tiny_model, tmp_path, monkeypatch, "full")
    manifest = json.loads((full.parent / "manifest.json").read_text())
    assert manifest["steps"] == {"completed": 6, "expected": 6}  # 12 examples / 4 per step x 2 epochs
    with monkeypatch.context() as m:
        kill_after_first(m, sft, "save_sft_checkpoint")
        with pytest.raises(Killed):
            _sft_job(tiny_model, tmp_path, m, "killed")  # after step 2 of epoch 1's 3, ZeRO state saved
    killed = tmp_path / "killed"
    assert latest_checkpoint(killed / "checkpoints").name == "step-00000002"
    (killed / ".model.k3j_x9ab.tmp").mkdir()  # what a SIGKILL leaves of atomic_directory's temporary
    (killed / ".model.k3j_x9ab.tmp" / "model.safetensors").write_bytes(b"partial")
    saved = record_calls(monkeypatch, sft, "save_sft_checkpoint")
    resumed = _sft_job(tiny_model, tmp_path, monkeypatch, "killed")
    assert [args[2] for args in saved] == [4]  # resumed at step 2, not retrained from step 0
    assert (resumed / "model.safetensors").read_bytes() == (full / "model.safetensors").read_bytes()
    again = json.loads((resumed.parent / "manifest.json").read_text())
    assert again["final_loss"] == manifest["final_loss"] and again["n_micro_steps"] == 12
    assert sorted(p.name for p in killed.iterdir()) == ["manifest.json", "model"]  # no checkpoints, no temporary


# --- GRPO --------------------------------------------------------------------------------------
def test_steps_per_epoch_counts_whole_generation_batches():
    assert steps_per_epoch(6, SETTINGS) == 3  # 2 prompts per step
    settings = grpo_settings(num_generations=4, batch_size=8, grad_accum=2, num_iterations=2)
    assert steps_per_epoch(13, settings) == 6  # 4 prompts per generation batch, 3 batches, 2 steps each
    assert steps_per_epoch(13, settings, world_size=2) == 2
    with pytest.raises(ValueError, match="3 prompts are fewer than one rollout batch of 4"):
        steps_per_epoch(3, settings)


def test_a_checkpoint_cut_short_is_not_resumed(tmp_path):
    for step, complete in ((2, True), (4, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if complete:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    assert last_checkpoint(tmp_path).endswith("checkpoint-2")


def test_a_mid_epoch_checkpoint_is_trained_on_not_published_as_the_epoch(tiny_model, tmp_path):
    epoch1 = run_grpo(tiny_model, DATA, distinct_characters, SETTINGS, tmp_path / "e1", until_epoch=1)
    assert epoch1.steps == epoch1.expected_steps == 3
    # killed after checkpoint-2 of the 3 steps of epoch 1 (epoch 0.67, which rounds to 1)
    work = tmp_path / "killed"
    run_grpo(tiny_model, DATA, distinct_characters, SETTINGS, work, until_epoch=1, callbacks=[stop_at(2)])
    assert checkpoint_state(last_checkpoint(work)).global_step == 2
    retry = run_grpo(tiny_model, DATA, distinct_characters, SETTINGS, work, until_epoch=1)
    assert retry.steps == retry.expected_steps == 3
    assert_same_weights(weights(epoch1.checkpoint), weights(retry.checkpoint))
    with pytest.raises(ValueError, match="not at the end of epoch 1"):  # epoch 2 from a mid-epoch checkpoint
        run_grpo(tiny_model, DATA, distinct_characters, SETTINGS, tmp_path / "e2",
                 resume_from=str(work / "checkpoint-2"), until_epoch=2)


def test_how_often_a_model_checkpoints_does_not_change_its_key():
    from workflow_helpers import default_config

    from mialab.pipeline.plan import Plan

    config = default_config()
    before = {name: Plan(config).model(name).key for name in ("base", "sft")}
    for name in before:
        config["models"][name]["train"]["checkpoint_every"] = 3
    assert {name: Plan(config).model(name).key for name in before} == before
