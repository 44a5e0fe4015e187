"""Load causal LMs and tokenizers safely: offline unless configured, safetensors only, and no
code from a model folder unless the user's config allows it for that model by name
(``models.<name>.trust_remote_code: true``). A local folder that declares custom code
(``auto_map`` in its config.json or tokenizer_config.json) without that setting fails before
anything is loaded: the folder cannot ask for its own code to run."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import warnings
from pathlib import Path

from mialab.core.jobs import HUB_KERNELS, go_offline

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}
#: the dtype / precision a config may leave to the device: bf16 where it computes bf16 natively, else fp32
AUTO = "auto"

# the files of a model folder whose ``auto_map`` makes transformers import the folder's own modules
CODE_DECLARING_FILES = ("config.json", "tokenizer_config.json")


class RemoteCodeRefused(ValueError):
    """A model folder ships its own code and the config does not allow running it."""


def remote_code_files(path: str) -> list[str]:
    """The files of local model folder ``path`` that declare custom code (``auto_map``)."""
    found = []
    for name in CODE_DECLARING_FILES:
        file = Path(path) / name
        if file.is_file() and "auto_map" in json.loads(file.read_text()):
            found.append(name)
    return found


def check_remote_code(path: str, trust_remote_code: bool) -> None:
    """Raise :class:`RemoteCodeRefused` when ``path`` declares custom code that is not allowed."""
    found = [] if trust_remote_code else remote_code_files(path)
    if found:
        raise RemoteCodeRefused(
            f"model folder {path}: {' and '.join(found)} declare(s) custom code (auto_map), which is not run "
            "unless the config allows it for this model: set `models.<name>.trust_remote_code: true` "
            "for the model at this path (only for a checkpoint whose code you trust)")


def trusts_remote_code(config: dict, model: str) -> bool:
    """Whether configured model ``model`` may run its folder's code; a path not named under
    ``models`` never may."""
    spec = config["models"].get(model)
    return bool(spec and spec["trust_remote_code"])


def resolve_device(device: str = "auto") -> str:
    """``auto`` picks CUDA when available, else CPU."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True when this CPU computes bf16 matrix products natively (AMX or AVX512-BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:  # not Linux: unknown, assume not
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def native_bf16(device: str) -> bool:
    """Whether ``device`` computes bf16 natively: a CUDA GPU that supports it, a CPU with AMX or AVX512-BF16
    (elsewhere bf16 is emulated: correct, but tens of times slower than fp32 on an AVX2 CPU)."""
    device = str(device)
    if device.startswith("cuda"):
        import torch

        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device.startswith("cpu") and cpu_has_native_bf16()


def resolve_dtype(dtype: str, device: str) -> str:
    """A config's ``dtype`` as a torch dtype name; ``auto``: bfloat16 where ``device`` computes it natively
    (:func:`native_bf16`), else float32."""
    if dtype == AUTO:
        return "bfloat16" if native_bf16(resolve_device(device)) else "float32"
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join([*DTYPES, AUTO])}") from None


def resolve_precision(precision: str, device: str) -> str:
    """A training ``precision`` (fp32, bf16, auto) as fp32 or bf16; ``auto``: as :func:`resolve_dtype`."""
    if precision not in ("fp32", "bf16", AUTO):
        raise ValueError(f"unknown precision {precision!r}; known: bf16, fp32, {AUTO}")
    return {"bfloat16": "bf16", "float32": "fp32"}[resolve_dtype(precision, device)] if precision == AUTO else precision


def check_bf16_speed(dtype: str, device: str) -> None:
    """Warn when bf16 is asked for on a CPU that only emulates it (correct, but tens of times slower).

    The tiny world says ``auto`` (bf16 where the CPU has AMX / AVX512-BF16, fp32 elsewhere: docs/tiny_world.md,
    "Precision"); an explicit bf16 on another CPU gets this warning.
    """
    if DTYPES.get(dtype, dtype) == "bfloat16" and str(device).startswith("cpu") and not cpu_has_native_bf16():
        warnings.warn("bf16 on a CPU without AMX or AVX512-BF16 is emulated and slow; "
                      "set dtype auto (or float32) / precision auto (or fp32) in the config for this machine",
                      stacklevel=2)


def no_cudnn_attention() -> None:
    """Keep torch's scaled-dot-product attention off cuDNN's kernels (flash, memory-efficient or math
    instead), for every model this process builds or loads. On Hopper GPUs torch >= 2.11 picks cuDNN
    attention by default, whose backward returns NaN gradients for masked (padded) batches
    (pytorch/pytorch#196678; GRPO's first step on an H200 here: grad_norm nan) and whose generation is
    corrupted on Blackwell (pytorch/pytorch#193893). A no-op where there is no CUDA."""
    import torch

    torch.backends.cuda.enable_cudnn_sdp(False)


#: Where a job finds the model folders its config lets use transformers' hub kernels
#: (``models.<name>.hub_kernels``): a JSON list of their real paths, set by the workflow (rules/common.smk,
#: :func:`allow_hub_kernels`), inherited by every job.
HUB_KERNEL_MODELS = "MIALAB_HUB_KERNEL_MODELS"


#: The hub models a run pins, JSON ``{hub id: commit}`` (rules/common.smk: the config's revisions and its lock file,
#: :func:`pin_hub_revisions`), inherited by every job: each loads that commit from the hub cache (:func:`pinned`),
#: whatever the cache's branches point to.
HUB_REVISIONS = "MIALAB_HUB_REVISIONS"


def pin_hub_revisions(revisions) -> None:
    """Let this process and those it starts load each hub model of ``revisions`` (hub id -> commit) at its commit."""
    os.environ[HUB_REVISIONS] = json.dumps(dict(sorted(dict(revisions).items())))


def pinned(path: str) -> str:
    """``path``, or for a hub id the run pins (:data:`HUB_REVISIONS`) its snapshot folder at that commit in the hub
    cache; one not there is an error naming it (rule ``prefetch`` fetches it)."""
    commit = json.loads(os.environ.get(HUB_REVISIONS) or "{}").get(str(path))
    if commit is None:
        return path
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(str(path), revision=commit, local_files_only=True)
    except Exception as err:   # noqa: BLE001  (any way of not finding it offline)
        raise FileNotFoundError(f"hub model {path} at {commit} is not in the hub cache (HF_HOME): fetch it with "
                                "snakemake prefetch <your --profile and --configfile arguments>") from err


def allow_hub_kernels(paths) -> None:
    """Let the model folders ``paths`` (and no other) load with hub kernels, in this process and those it starts."""
    os.environ[HUB_KERNEL_MODELS] = json.dumps(sorted(os.path.realpath(p) for p in paths))


def hub_kernels_allowed(path: str) -> bool:
    """Whether the config lets the model at ``path`` use hub kernels (:data:`HUB_KERNEL_MODELS`)."""
    return os.path.realpath(path) in json.loads(os.environ.get(HUB_KERNEL_MODELS) or "[]")


@contextlib.contextmanager
def _hub_kernels_switch(on: bool):
    """transformers reads ``USE_HUB_KERNELS`` (off in every job: :func:`mialab.core.jobs.offline_environment`)
    inside ``from_pretrained``: on for this one load of a model allowed them, restored after."""
    before = os.environ.get(HUB_KERNELS)
    if on:
        os.environ[HUB_KERNELS] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(HUB_KERNELS, None)
        else:
            os.environ[HUB_KERNELS] = before


def load_pretrained(model_class, path: str, *, trust_remote_code: bool = False, **kwargs):
    """``model_class.from_pretrained(path, **kwargs)`` as every model of a job is loaded (causal, masked,
    encoder-decoder): after :func:`check_remote_code` and :func:`no_cudnn_attention`, safetensors only, the
    folder's own code only where the config allows it, and transformers' hub kernels only for a model whose
    config sets ``models.<name>.hub_kernels`` (fetched beforehand by ``prefetch``; from transformers 5.25 on they
    are otherwise on by default, and a model that has them fetches code from the hub when loaded and again at
    ``model.train()``)."""
    check_remote_code(path, trust_remote_code)
    no_cudnn_attention()
    kernels = hub_kernels_allowed(path)
    with _hub_kernels_switch(kernels):
        return model_class.from_pretrained(pinned(path), use_safetensors=True, trust_remote_code=trust_remote_code,
                                           use_kernels=kernels, **kwargs)


def load_tokenizer(path: str, *, padding_side: str = "right", trust_remote_code: bool = False):
    """Load a tokenizer; a missing pad token falls back to EOS. ``trust_remote_code``: the
    config's ``models.<name>.trust_remote_code`` of the model at ``path``."""
    from transformers import AutoTokenizer

    check_remote_code(path, trust_remote_code)
    tok = AutoTokenizer.from_pretrained(pinned(path), trust_remote_code=trust_remote_code)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = padding_side
    return tok


def load_causal_lm(path: str, *, dtype: str = "float32", device: str = "auto", trust_remote_code: bool = False):
    """Load a causal LM for inference (eval mode) from safetensors weights (``trust_remote_code``:
    as for :func:`load_tokenizer`)."""
    import torch
    from transformers import AutoModelForCausalLM

    go_offline()   # library-internal loads too (a trainer's reference model, a sentence encoder's modules)
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    check_bf16_speed(dtype, device)
    model = load_pretrained(AutoModelForCausalLM, path, trust_remote_code=trust_remote_code, dtype=getattr(torch, dtype))
    return model.to(device).eval()


def context_length(model) -> int:
    """The model's context in tokens, as vLLM's ``max_model_len`` defaults to it: ``max_position_embeddings``
    of its config (GPT-2's ``n_positions``); a config with neither is an error naming the model."""
    config = model.config
    found = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if not found:
        raise ValueError(f"model {getattr(config, '_name_or_path', '?')!r}: its config names no context length "
                         "(max_position_embeddings or n_positions)")
    return int(found)


def load_lm(path: str, *, device: str = "auto", dtype: str = "float32", padding_side: str = "right",
            trust_remote_code: bool = False):
    """``(model, tokenizer)`` for inference; right padding for log-probabilities, left for generation."""
    return (load_causal_lm(path, dtype=dtype, device=device, trust_remote_code=trust_remote_code),
            load_tokenizer(path, padding_side=padding_side, trust_remote_code=trust_remote_code))
