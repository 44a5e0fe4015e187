"""No job fetches transformers' hub kernels unasked: from transformers 5.25 on, ``from_pretrained`` turns them on
unless told not to, and a loaded model then swaps layers for code from the hub at load and again at
``model.train()`` (offline on a GPU: "... is not available in the local cache and Hugging Face Hub is in
offline mode"). On a CPU nothing is downloaded, but the state shows: ``model.use_kernels`` and the calls of
``set_use_kernels`` (tests/conftest.py's ``no_hub_kernels`` guard refuses one in every test). A model whose
config sets ``hub_kernels`` gets them, fetched beforehand by ``prefetch``."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def _model_loads_outside_the_loader() -> list[str]:
    """``<file>:<line>`` of every ``X.from_pretrained(...)`` of a model class under mialab/ (tokenizers,
    generation configs and peft adapters aside) outside mialab/lm/loading.py's :func:`load_pretrained`."""
    not_models = {"AutoTokenizer", "GenerationConfig", "PeftModel", "AutoConfig"}
    found = []
    for path in sorted((REPO / "mialab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "from_pretrained" and not (isinstance(node.func.value, ast.Name)
                                                                     and node.func.value.id in not_models)
                    and path != REPO / "mialab" / "lm" / "loading.py"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_every_model_load_under_mialab_goes_through_load_pretrained():
    """One place says how a model is loaded (safetensors, remote code, hub kernels, attention kernels): a new
    ``from_pretrained`` that bypasses it fails here."""
    assert _model_loads_outside_the_loader() == []


def test_only_a_model_whose_config_allows_them_loads_with_hub_kernels(tiny_model, make_tiny_model, monkeypatch):
    """``models.<name>.hub_kernels``: the loader asks transformers for hub kernels for that model's folder alone,
    with ``USE_HUB_KERNELS`` on for that one load and back off after it."""
    from transformers.modeling_utils import PreTrainedModel

    from mialab.lm.loading import allow_hub_kernels, load_causal_lm

    asked = []
    monkeypatch.setattr(PreTrainedModel, "set_use_kernels",   # record instead of kernelizing (no CPU kernels)
                        lambda self, use, *a, **k: asked.append((bool(use), os.environ.get(HUB_KERNELS))))
    other = make_tiny_model(PROBLEMS * 20)
    monkeypatch.setenv(HUB_KERNELS, "0")
    allow_hub_kernels([os.path.join(tiny_model, ".")])   # a path spelt otherwise is the same folder
    load_causal_lm(tiny_model, device="cpu")
    load_causal_lm(other, device="cpu")
    assert asked == [(True, "1"), (False, "0")] and os.environ[HUB_KERNELS] == "0"


def test_the_plan_names_the_models_allowed_hub_kernels_and_only_their_keys_change():
    from workflow_helpers import default_config, validated

    from mialab.pipeline.plan import Plan

    base = validated(default_config())
    assert Plan(base).hub_kernel_paths() == []
    on = validated(default_config())
    on["models"]["sft"]["hub_kernels"] = True
    plan, before = Plan(on), Plan(base)
    assert plan.hub_kernel_paths() == [plan.model_path("sft")]
    assert plan.model("sft").key != before.model("sft").key and plan.model("base").key == before.model("base").key
    assert plan.model("grpo_e1").key != before.model("grpo_e1").key   # trained from it


def test_prefetch_fetches_the_cuda_kernels_of_a_model_that_uses_them(monkeypatch):
    """With ``hub_kernels`` set, ``prefetch`` fetches every CUDA kernel repository transformers maps a layer to
    (kernels-community's rotary embedding, whose fetch at ``model.train()`` failed offline, among them), never one
    transformers marks as running its own code, and the run-start check names one missing from the cache."""
    from workflow_helpers import default_config, validated

    from mialab.pipeline import prefetch as pf
    from mialab.pipeline.config import ConfigError

    from transformers.utils.import_utils import is_kernels_available

    cfg = validated(default_config())
    assert [i for i in pf.hub_items(cfg) if i.repo_type == "kernel"] == []
    cfg["models"]["sft"]["hub_kernels"] = True
    if not is_kernels_available():   # pyproject's oldest transformers (5.24) takes kernels < 0.19, not the pinned one
        with pytest.raises(ConfigError, match=r"models\.sft\.hub_kernels: transformers [\d.]+ uses no hub kernels "
                                              r"with kernels [\d.]+ installed"):
            pf.hub_items(cfg)
        return
    kernels = [i for i in pf.hub_items(cfg) if i.repo_type == "kernel"]
    assert ("kernels-community/rotary", 2) in {(i.repo_id, i.version) for i in kernels}
    assert all(i.key == "models.sft.hub_kernels" and i.repo_id.startswith("kernels-community/") for i in kernels)
    rows = pf.prefetch(kernels, kernel=lambda item: f"/cache/{item.repo_id}")
    assert [r["fetched"] for r in rows] == [f"/cache/{i.repo_id}" for i in kernels]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(pf, "kernel_cached", lambda item: item.repo_id != "kernels-community/rotary")
    try:
        pf.check_hub_cache(cfg, {}, None, [])
    except ConfigError as e:
        assert "models.sft.hub_kernels: kernels-community/rotary (hub kernel) (revision v2)" in str(e)
    else:
        raise AssertionError("a missing kernel passed the run-start check")
