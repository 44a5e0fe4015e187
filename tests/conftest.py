"""Shared fixtures: the real single-node SLURM booted by tests/slurm/boot.sh, the suite's world (config.yaml at
smaller sizes) run once per session, a copy of it with shuffled evaluation labels, and the tiny random Llamas of the
unit tests."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from workflow_helpers import grpo_settings, make_workdir, snakemake, suite_world_config

from mialab.core.io import write_manifest
from mialab.core.jobs import THREAD_VARIABLES

REPO = Path(__file__).resolve().parents[1]
BOOT = REPO / "tests" / "slurm" / "boot.sh"
STOP = REPO / "tests" / "slurm" / "stop.sh"
VENV_BIN = Path(sys.executable).parent


#: Fixtures of one shared world each; the tests that use one run on one pytest-xdist worker.
WORLDS = {"suite_world": {"suite_world", "shuffled_world"}, "slurm": {"slurm_env"}}


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook, which turns the marks into node-id groups
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``-n 2 --dist loadgroup``, scripts/test.sh) each world is built once:
    every test that uses it (directly or through another fixture) joins its worker's group, while
    the other tests spread over the workers."""
    rank = {}
    for item in items:
        for order, (group, fixtures) in enumerate(WORLDS.items()):
            if fixtures & set(item.fixturenames):
                item.add_marker(pytest.mark.xdist_group(group))
                rank[item] = order
                break
        else:
            rank[item] = len(WORLDS) + (item.get_closest_marker("slow") is None)
    # Longest first, so that no core waits at either end (pytest_configure keeps this order under xdist): the
    # worlds' groups (the suite's world, then SLURM), the other slow tests, then the quick ones that fill the gaps.
    items.sort(key=rank.__getitem__)


def pytest_configure(config):
    """Under pytest-xdist the workers share the cores with each other and with the workflow jobs they start, so
    (in the environment the workers inherit) each worker's own torch runs one thread and a waiting OpenMP thread
    sleeps instead of spinning on a core another process needs (docs/status.md, "What the test suite runs"); a job sets its own
    thread count (mialab.core.jobs.setup_job).

    pytest 9.2 with pytest-xdist <= 3.8 does not group under ``--dist loadgroup`` (pytest-xdist#1386):
    every worker would build the suite's world itself. Say so before any test starts.

    Under ``--dist loadgroup`` the workers take the tests in the order pytest_collection_modifyitems gives them
    (pytest-xdist's ``--no-loadscope-reorder``). Its default hands out the group with the most tests first (the
    87 dry runs of ``paper_plans``, one core for two minutes) and leaves whatever test comes last to run alone."""
    if not (config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None)):
        return
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    for var in THREAD_VARIABLES:
        os.environ.setdefault(var, "1")
    if config.getoption("dist", None) == "loadgroup":
        config.option.loadscopereorder = False
        import importlib.metadata

        xdist = tuple(int(x) for x in importlib.metadata.version("pytest-xdist").split(".")[:2])
        if pytest.version_tuple[:2] >= (9, 2) and xdist <= (3, 8):
            raise pytest.UsageError(f"pytest {pytest.__version__} with pytest-xdist {'.'.join(map(str, xdist))} "
                                    "does not group tests (pytest-xdist#1386): pip install 'pytest<9.2', or run "
                                    "the suite in one process (MIALAB_TEST_WORKERS=0)")


#: A hundred numbered lines of verse: the CalibDCD tests' tokenizer corpus.
VERSE = [f"line {i}: the {['cat', 'dog', 'king', 'queen', 'bird'][i % 5]} walks over the hill and sings of "
         f"{['rain', 'sun', 'war', 'love'][i % 4]} today." for i in range(100)]
#: The CalibDCD tests' ``TINY_MODEL`` (tests/test_calibdcd.py, tests/test_calibdcd_workflow.py).
VERSE_MODEL = {"corpus": VERSE, "model_vocab": 512}


def tiny_mapping(**settings):
    """A small :class:`MappingConfig`: the schema's defaults (the workflow's validated section) at test sizes."""
    from mialab.calibdcd.mapping import MappingConfig
    from mialab.data.registry import config_schema

    props = config_schema()["properties"]["calibdcd"]["properties"]["detectors"]["properties"]["veilprobe"]
    defaults = {k: v["default"] for k, v in props["properties"]["mapping"]["properties"].items()
                if k not in ("tokenizer", "vocab_size")}
    return MappingConfig(**{**defaults, "hidden_size": 16, "num_layers": 1, "num_heads": 2, "intermediate_size": 32,
                            "max_length": 16, "batch_size": 2, **settings})


#: The GRPO tests' problems, their ``TINY_MODEL``, data and settings (tests/test_rl.py, tests/test_resume.py).
PROBLEMS = [
    "Find the number of positive integers less than 1000 that are divisible by 7.",
    "Alice and Bob play a game with 12 coins; what is the probability that Bob wins?",
    "Let $x$ be a real number such that $x^2 + 3x = 10$. Find the largest value of $x$.",
    "How many ways can Carol arrange 5 distinct books on a shelf?",
    "Compute the sum of the first 20 odd numbers.",
    "A circle of radius 6 is inscribed in a square. Find the area of the square.",
]
PROBLEMS_MODEL = {"corpus": PROBLEMS * 20, "num_heads": 4}
DATA = pd.DataFrame({"prompt": [p + "\n\n" for p in PROBLEMS], "reference": PROBLEMS[::-1]})
SETTINGS = grpo_settings(lr=1e-3, epochs=2, num_generations=4, batch_size=8, max_completion_length=8,
                         max_prompt_length=12, save_steps=2, save_total_limit=None)


def distinct_characters(completions, **kwargs) -> list[float]:
    """A reward every random policy earns with variance: the number of distinct characters / 20."""
    return [len(set(c)) / 20.0 for c in completions]


def weights(checkpoint: str) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(checkpoint, "model.safetensors"))


def assert_same_weights(a: dict, b: dict) -> None:
    import torch

    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "weights differ"


def stop_at(step: int):
    """A callback that ends training after optimizer step ``step`` (a job killed right after a save)."""
    from transformers import TrainerCallback

    class Stop(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step == step
            return control

    return Stop()


def tiny_llama(path: Path, corpus: list[str], *, vocab_size: int = 512, min_frequency: int = 2,
               model_vocab: int | None = None, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 2) -> str:
    """A random Llama (seed 0) with a BPE tokenizer trained on ``corpus``, saved as an HF folder at ``path``;
    ``model_vocab``: its embedding rows (default the tokenizer's size). Returns the folder."""
    from mialab.lm.tiny import init_model, llama_config, save_model, train_tokenizer

    tok = train_tokenizer(corpus, vocab_size=vocab_size, min_frequency=min_frequency)
    config = llama_config(model_vocab or len(tok), hidden_size=hidden_size, num_layers=num_layers,
                          num_heads=num_heads, tokenizer=tok)
    save_model(init_model(config, seed=0), tok, path)
    return str(path)


@pytest.fixture(scope="session")
def make_tiny_model(tmp_path_factory):
    """``make_tiny_model(corpus, **sizes)``: :func:`tiny_llama` in a fresh folder."""
    return lambda corpus, **sizes: tiny_llama(tmp_path_factory.mktemp("tiny") / "model", corpus, **sizes)


@pytest.fixture(scope="session", autouse=True)
def no_hub_kernels():
    """Every test: a model whose hub kernels are turned on (transformers' ``set_use_kernels(True)``, which on a
    GPU fetches code from the hub at load and at ``model.train()``) fails the test where it happens
    (tests/test_hub_kernels.py)."""
    from transformers.modeling_utils import PreTrainedModel

    original = PreTrainedModel.set_use_kernels

    def refuse(self, use_kernels, *args, **kwargs):
        if use_kernels:
            raise AssertionError(f"{type(self).__name__}: hub kernels turned on (set_use_kernels(True)); "
                                 "every model load goes through mialab.lm.loading.load_pretrained")
        return original(self, use_kernels, *args, **kwargs)

    PreTrainedModel.set_use_kernels = refuse
    yield
    PreTrainedModel.set_use_kernels = original


@pytest.fixture(scope="module")
def tiny_model(request, make_tiny_model) -> str:
    """The test module's tiny Llama: :func:`tiny_llama` of its ``TINY_MODEL`` dict (``corpus`` and sizes)."""
    return make_tiny_model(**request.module.TINY_MODEL)


def boot_slurm() -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run(["bash", str(BOOT)], capture_output=True, text=True, timeout=900)
    return proc, time.monotonic() - start


@pytest.fixture(scope="session")
def slurm_env() -> dict[str, str]:
    """Boot (or reuse) the test SLURM; stop it afterwards only if this fixture booted it."""
    assert importlib.util.find_spec("snakemake_executor_plugin_slurm"), (
        "snakemake-executor-plugin-slurm is not installed: pip install snakemake-executor-plugin-slurm==2.8.0"
    )
    proc, seconds = boot_slurm()
    if proc.returncode == 3 and os.environ.get("CI") != "true":
        pytest.skip(f"SLURM packages cannot be installed here: {proc.stderr.strip()[-1500:]}")
    assert proc.returncode == 0, f"SLURM did not boot (rc {proc.returncode}):\n{proc.stderr[-5000:]}"
    print(f"boot.sh: {seconds:.1f}s, {proc.stdout.splitlines()[0]}")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PATH=f"{VENV_BIN}:{os.environ['PATH']}")
    for line in proc.stdout.splitlines():
        if line.startswith("export "):
            env.update(pair.split("=", 1) for pair in line.removeprefix("export ").split())
    yield env
    if "booted" in proc.stdout.splitlines()[0]:
        subprocess.run(["bash", str(STOP)], check=True, timeout=120)


@pytest.fixture(scope="session")
def suite_world(tmp_path_factory) -> Path:
    """The suite's world (workflow_helpers.suite_world_config: config.yaml with one seed and smaller method sizes)
    run end to end (every stage and method) from an empty results/.

    One run per test session, shared by every slow test that inspects a world's outputs; the README's own world is
    planned, and run to its splits, by tests/test_tiny_world.py.
    """
    reuse = os.environ.get("MIALAB_SUITE_WORLD")   # development: a world an earlier session built (tests change it)
    if reuse:
        return Path(reuse)
    wd = make_workdir(tmp_path_factory.mktemp("suite_world"), suite_world_config())
    start = time.monotonic()
    snakemake(wd, "--profile", str(REPO / "profiles" / "local"), timeout=5400)
    print(f"the suite's world end to end: {time.monotonic() - start:.0f}s")
    return wd


@pytest.fixture(scope="session")
def shuffled_world(suite_world, tmp_path_factory) -> dict:
    """A copy of the suite's world whose seed-0 splits carry permuted labels (same ids, other labels),
    with the label-free methods' seed-0 score tables rebuilt from there: CalibDCD on ``chat`` and
    LaRA on ``grpo_e2``, every stage from the split on. Tests compare them with ``before``."""
    import numpy as np
    import pandas as pd

    wd = tmp_path_factory.mktemp("shuffled_world")
    shutil.copytree(suite_world, wd, symlinks=True, dirs_exist_ok=True)   # keeps mtimes: nothing is stale
    targets = [str(p.relative_to(wd)) for pattern in ("results/calibdcd/scores/chat/wikimia/*/*/seed-0/scores.parquet",
                                                       "results/lara/scores/grpo_e2/aime/*/seed-0/scores.parquet")
               for p in wd.glob(pattern)]
    assert len(targets) == 3, targets
    before = {t: pd.read_parquet(wd / t) for t in targets}
    splits = {}
    for dataset in ("wikimia", "aime"):
        (path,) = wd.glob(f"results/splits/{dataset}/seed-0/*/split.parquet")
        split = pd.read_parquet(path)
        shuffled = split.assign(label=np.random.default_rng(0).permutation(split["label"].to_numpy()))
        assert (shuffled["label"] != split["label"]).any()
        shuffled.to_parquet(path, index=False)                       # a newer file: its consumers rerun
        manifest = json.loads((path.parent / "manifest.json").read_text())
        write_manifest(manifest, path.parent / "manifest.json", [path])  # as if build_split had written it
        splits[dataset] = shuffled
    snakemake(wd, "--cores", "2", *targets, timeout=1800)   # the newer splits make every stage after them stale
    return {"workdir": wd, "before": before, "splits": splits}
