"""Resumable training: periodic checkpoints in a work folder beside a model output, exact resume.

A training job writes ``<output folder>/checkpoints/step-<n>/`` every ``checkpoint_every``
optimizer steps (each written to a temporary folder and renamed into place, so a kill mid-write
leaves the previous one valid) and resumes from the last one: weights, optimizer state, RNG
states, data order and step counter, so that a killed and restarted run ends with the same
bytes as an uninterrupted one. The folder is not a workflow output; it is deleted once the model
is published. Everything is stored as safetensors and JSON (no pickles), except DeepSpeed's own
checkpoint files (:mod:`mialab.training.sft`).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import re
import shutil
from pathlib import Path

import numpy as np

STEP_DIR = re.compile(r"step-(\d+)")


def checkpoint_root(output: str | os.PathLike) -> Path:
    """The checkpoint folder of a model output: ``checkpoints/`` beside it."""
    return Path(output).parent / "checkpoints"


def checkpoint_path(root: str | os.PathLike, step: int) -> Path:
    return Path(root) / f"step-{int(step):08d}"


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The checkpoint with the highest step under ``root`` (renamed into place, so complete)."""
    root = Path(root)
    if not root.is_dir():
        return None
    steps = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.fullmatch(p.name)) and p.is_dir()]
    return max(steps)[1] if steps else None


def prune_checkpoints(root: str | os.PathLike, keep: Path) -> None:
    """Delete every checkpoint under ``root`` but ``keep`` (the one just written)."""
    for p in Path(root).iterdir():
        if STEP_DIR.fullmatch(p.name) and p.is_dir() and p != keep:
            shutil.rmtree(p)


class CheckpointRefused(RuntimeError):
    """A checkpoint to resume from holds pickled objects that are not plain data; it was not loaded."""


REFUSED = ".refused"  # the suffix of a refused checkpoint moved aside (no checkpoint pattern matches it)


@contextlib.contextmanager
def refusing_pickled_code(checkpoint: str | os.PathLike, *, move_aside: bool = True):
    """Resume from ``checkpoint`` inside this block. A file the block loads that torch's ``weights_only``
    unpickler refuses (an object other than tensors and plain data: loading it could run code) raises
    :class:`CheckpointRefused` naming the checkpoint, and never the advice to load it with
    ``weights_only=False``. With ``move_aside`` (a checkpoint of the job's own work folder) rank 0 first
    renames it ``<name>.refused``, so that the job's retry starts without it instead of failing the same way."""
    try:
        yield
    except pickle.UnpicklingError:
        checkpoint = Path(checkpoint)
        aside = checkpoint.with_name(checkpoint.name + REFUSED)
        if move_aside and int(os.environ.get("RANK", "0")) == 0:
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(checkpoint, aside)
        then = (f"it was moved to {aside} (deleted with the work folder once the model is published), so a retry "
                "of the job starts without it" if move_aside else
                "it is the output of an earlier job: delete that job's output folder to rebuild it")
        raise CheckpointRefused(f"{checkpoint}: refused to resume from this checkpoint: a file in it holds pickled "
                                "objects other than tensors and plain data, which mialab never loads (they could "
                                f"run code; the checkpoint was changed after training wrote it); {then}") from None


def check_steps(completed: int, expected: int, what: str) -> dict:
    """``{"completed", "expected"}`` for a manifest; an error unless training ran every step."""
    if int(completed) != int(expected):
        raise RuntimeError(f"{what}: trained {completed} steps but the config asks for {expected}; "
                           "not publishing an under- or over-trained model")
    return {"completed": int(completed), "expected": int(expected)}


def is_due(step: int, every: int, total: int) -> bool:
    """Whether a checkpoint is written after optimizer step ``step`` (1-based); not after the last."""
    return every > 0 and step % every == 0 and step < total


# -- RNG states and optimizer state as safetensors + JSON -----------------------------------------
def rng_state(np_rng: np.random.Generator) -> tuple[dict, dict]:
    """(JSON, tensors) of the python, numpy (``np_rng``) and torch RNG states."""
    import torch

    version, internal, gauss = random.getstate()
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors.update({f"torch_cuda_{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
    return {"python": [version, list(internal), gauss], "numpy": np_rng.bit_generator.state}, tensors


def restore_rng_state(np_rng: np.random.Generator, doc: dict, tensors: dict) -> None:
    """Undo :func:`rng_state`."""
    import torch

    version, internal, gauss = doc["python"]
    random.setstate((version, tuple(internal), gauss))
    np_rng.bit_generator.state = doc["numpy"]
    torch.set_rng_state(tensors["torch_cpu"])
    if torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[f"torch_cuda_{i}"] for i in range(torch.cuda.device_count())])


def optimizer_state(opt) -> tuple[dict, dict]:
    """(JSON, tensors) of a torch optimizer's ``state_dict``."""
    import torch

    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for idx, entries in sd["state"].items():
        for name, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{idx}.{name}"] = value.contiguous()
            else:
                scalars[f"{idx}.{name}"] = value
    return {"param_groups": sd["param_groups"], "scalars": scalars}, tensors


def restore_optimizer_state(opt, doc: dict, tensors: dict) -> None:
    """Undo :func:`optimizer_state`."""
    state: dict[int, dict] = {}
    for key, value in [*tensors.items(), *doc["scalars"].items()]:
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    opt.load_state_dict({"state": state, "param_groups": doc["param_groups"]})


def save_state(folder: str | os.PathLike, name: str, doc: dict, tensors: dict) -> None:
    """Write ``<name>.json`` and ``<name>.safetensors`` into ``folder``."""
    from safetensors.torch import save_file

    save_file(tensors, os.path.join(folder, f"{name}.safetensors"))
    Path(folder, f"{name}.json").write_text(json.dumps(doc))


def load_state(folder: str | os.PathLike, name: str) -> tuple[dict, dict]:
    """Undo :func:`save_state`."""
    from safetensors.torch import load_file

    return (json.loads(Path(folder, f"{name}.json").read_text()),
            load_file(os.path.join(folder, f"{name}.safetensors")))
