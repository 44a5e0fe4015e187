"""No job fetches transformers' hub kernels: from transformers 5.25 on, ``from_pretrained`` turns them on
unless told not to, and a loaded model then swaps layers for code from the hub at load and again at
``model.train()`` (offline on a GPU: "... is not available in the local cache and Hugging Face Hub is in
offline mode"). On a CPU nothing is downloaded, but the state shows: ``model.use_kernels`` and the calls of
``set_use_kernels`` (tests/conftest.py's ``no_hub_kernels`` guard refuses one in every test)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from conftest import PROBLEMS

from mialab.core.jobs import HUB_KERNELS, offline_environment, setup_job

REPO = Path(__file__).resolve().parents[1]
TINY_MODEL = {"corpus": PROBLEMS * 20}


def test_a_loaded_model_trains_without_hub_kernels_whatever_the_environment(tiny_model, monkeypatch):
    """The loader says ``use_kernels=False`` itself: neither an unset ``USE_HUB_KERNELS`` (transformers 5.25: on)
    nor a user's exported ``1`` turns them on, at load or at ``train()`` (conftest's guard would raise)."""
    from mialab.lm.embeddings import load_encoder
    from mialab.lm.loading import load_causal_lm

    for value in (None, "1"):
        if value is None:
            monkeypatch.delenv(HUB_KERNELS, raising=False)
        else:
            monkeypatch.setenv(HUB_KERNELS, value)
        model = load_causal_lm(tiny_model, device="cpu")
        model.train()
        assert model.use_kernels is False
    monkeypatch.delenv(HUB_KERNELS, raising=False)
    load_encoder.cache_clear()
    assert load_encoder("all-MiniLM-L6-v2", "cpu", "float32")[0].auto_model.use_kernels is False


def test_jobs_and_every_process_they_start_run_with_hub_kernels_off(tiny_model, monkeypatch, tmp_path):
    """A job's environment says ``USE_HUB_KERNELS=0`` even where the user exported ``1``, so a library's own
    ``from_pretrained`` (a trainer's reference model, vLLM's worker) inside it loads without them."""
    monkeypatch.setenv(HUB_KERNELS, "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")     # the user's choice for the hub itself is kept
    env = offline_environment()
    assert env[HUB_KERNELS] == "0" and env["HF_HUB_OFFLINE"] == "0"
    code = ("import sys; from transformers import AutoModelForCausalLM; "
            "m = AutoModelForCausalLM.from_pretrained(sys.argv[1]); m.train(); print(m.use_kernels)")
    out = subprocess.run([sys.executable, "-c", code, tiny_model], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[-1] == "False"
    setup_job(None)
    assert os.environ[HUB_KERNELS] == "0"


def _model_classes_loaded_outside_the_loader() -> list[str]:
    """``<file>:<line>`` of every ``X.from_pretrained(...)`` of a model class under mialab/ (tokenizers,
    generation configs and peft adapters aside) that is not given ``**pretrained_kwargs(...)``."""
    not_models = {"AutoTokenizer", "GenerationConfig", "PeftModel", "AutoConfig"}
    found = []
    for path in sorted((REPO / "mialab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "from_pretrained" and isinstance(node.func.value, ast.Name)
                    and node.func.value.id not in not_models):
                continue
            given = [k.value for k in node.keywords if k.arg is None]
            if not any(isinstance(v, ast.Call) and getattr(v.func, "id", None) == "pretrained_kwargs" for v in given):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} ({node.func.value.id})")
    return found


def test_every_model_load_under_mialab_goes_through_pretrained_kwargs():
    """One place says how a model is loaded (safetensors, remote code, hub kernels): a new ``from_pretrained``
    that bypasses it fails here."""
    assert _model_classes_loaded_outside_the_loader() == []
