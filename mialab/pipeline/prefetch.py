"""Staging: every hub model, hub dataset and file a config names, downloaded before the jobs run.

Rule ``prefetch`` (rules/prefetch.smk, a local rule: it runs where Snakemake runs, the login node) calls
:func:`prefetch` and :func:`fetch_files`; the compute jobs then read everything offline from the same ``HF_HOME``
and ``MIALAB_DATA_CACHE`` (they keep ``HF_HUB_OFFLINE=1`` unless the user exported ``HF_HUB_OFFLINE=0``). The hub
is ``HF_ENDPOINT`` (default huggingface.co); a gated model needs ``HF_TOKEN`` or ``hf auth login``.

- Models (``models.<name>.path`` of a hub id, and hub ids named as ``embedding_model``,
  ``reference_model``, ``key_token_model(s)``, ``mlm_model`` or a paraphraser's, a judge's or an LLM's
  ``model``): huggingface_hub's ``snapshot_download`` of the files a job loads (:data:`MODEL_FILES`: safetensors
  weights, configs, tokenizer files; no pickled weights), Python files too only for a model whose config sets
  ``trust_remote_code``; at its revision (a ``models:`` entry's, else the lock file's ``models:``, :func:`pin_models`),
  or without one at the commit the hub serves now, which the rule writes into the lock file. The jobs load each
  at that commit (:func:`hub_revisions`, :func:`mialab.lm.loading.pinned`).
- Datasets (every ``{hub: org/name, ...}`` source): huggingface_hub's ``snapshot_download`` of the repository at
  its revision, then read once as ``build_pool`` reads it (:func:`mialab.data.sources.load_hub`: its split must
  exist). A dataset without a revision is fetched at the commit the hub serves now, which the rule writes into
  the config's lock file (:mod:`mialab.pipeline.lock`).
- Files (every ``{url: ...}`` / ``{github: ...}`` source): streamed into the data cache under their ``sha256``
  (:func:`fetch_file`: written atomically, the digest checked before the file is kept).
- Hub kernels, when a model's config sets ``hub_kernels``: the CUDA builds (for this environment's torch)
  of every kernel repository transformers maps a layer to (:func:`kernel_items`), through the ``kernels``
  library's ``install_kernel`` into the hub cache, without importing them; repositories transformers marks
  as running their own code are never fetched.

A configured model name, the packaged default encoder, an existing local path and a string that is
not ``org/name`` are not hub models.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from mialab.core.io import atomic_path
from mialab.data.sources import cached_file, describe, file_url, hub_offline
from mialab.pipeline.config import ConfigError, walk_config
from mialab.pipeline.lock import hub_sources, prefetch_command

#: Keys outside ``models:`` whose string value may name a hub model.
MODEL_KEYS = ("embedding_model", "reference_model", "key_token_model", "key_token_models", "mlm_model", "model")
#: The files of a model repository a job loads (huggingface_hub ``allow_patterns``).
MODEL_FILES = ("*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja", "*.md")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
LIST_ITEM = re.compile(r"\[\d+\]$")  # a list's item (key_token_models[0]) is named by its list's key


@dataclass(frozen=True)
class HubItem:
    """One hub repository a config names, and the config key that names it (for messages)."""

    key: str
    repo_type: str  # model | dataset | kernel
    repo_id: str
    revision: str | None = None
    split: str | None = None
    subset: str | None = None
    trust_remote_code: bool = False
    version: int | None = None   # a kernel's major version (its v<N> branch), where no revision is pinned


def is_hub_model(value: str, config: dict) -> bool:
    """Whether ``value`` names a hub model (module doc)."""
    from mialab.lm.embeddings import resolve_model_path

    return (value not in config["models"] and resolve_model_path(value) == value and not Path(value).exists()
            and HUB_ID.match(value) is not None)


def hub_items(config: dict, models_lock: dict[str, str] | None = None) -> list[HubItem]:
    """Every hub model and dataset ``config`` names, each repository (and revision) once; a hub model named outside
    ``models:`` at its entry in ``models_lock`` (the lock file's ``models:``), if any."""
    items, lock = [], models_lock or {}
    for name, spec in config["models"].items():
        if spec.get("kind") == "hf" and is_hub_model(spec["path"], config):
            items.append(HubItem(f"models.{name}.path", "model", spec["path"], spec.get("revision"),
                                 trust_remote_code=bool(spec.get("trust_remote_code"))))
    for key, value in walk_config({k: v for k, v in config.items() if k != "models"}, ""):
        if (LIST_ITEM.sub("", key.rsplit(".", 1)[-1]) in MODEL_KEYS and isinstance(value, str)
                and is_hub_model(value, config)):
            items.append(HubItem(key, "model", value, lock.get(value)))
    for key, source in hub_sources(config):   # the datasets' sources, then the models' (an SFT filler)
        items.append(HubItem(key, "dataset", source["hub"], source.get("revision"), source.get("split"),
                             source.get("subset")))
    kernels = [name for name, spec in config["models"].items() if spec.get("hub_kernels")]
    if kernels:
        items += kernel_items(f"models.{kernels[0]}.hub_kernels")
    seen, unique = set(), []
    for item in items:
        ident = (item.repo_type, item.repo_id, item.revision, item.split, item.subset, item.version)
        if ident not in seen:
            seen.add(ident)
            unique.append(item)
    return unique


def pin_models(config: dict, models_lock: dict[str, str]) -> None:
    """Give every hub model of ``models:`` without a ``revision`` its lock entry's (in place): its key then holds
    the commit its jobs load."""
    for spec in config["models"].values():
        if spec.get("kind") == "hf" and "revision" not in spec and spec["path"] in models_lock \
                and is_hub_model(spec["path"], config):
            spec["revision"] = models_lock[spec["path"]]


def hub_revisions(items: list[HubItem]) -> dict[str, str]:
    """Hub id -> commit of every hub model among ``items`` with a revision: what the jobs load
    (:func:`mialab.lm.loading.pin_hub_revisions`)."""
    return {i.repo_id: i.revision for i in items if i.repo_type == "model" and i.revision}


def kernel_items(key: str) -> list[HubItem]:
    """The CUDA kernel repositories transformers maps layers to (its hub-kernel mapping), each once, for
    config key ``key``; those it marks as running their own code are left out. A transformers that does not take
    the installed ``kernels`` package (each release accepts a range of it) has no such mapping: an error naming
    ``key`` and both versions."""
    from importlib.metadata import PackageNotFoundError, version

    from transformers.utils.import_utils import is_kernels_available

    if not is_kernels_available():
        try:
            installed = f"kernels {version('kernels')}"
        except PackageNotFoundError:
            installed = "no kernels package"
        raise ConfigError(f"{key}: transformers {version('transformers')} uses no hub kernels with {installed} "
                          "installed (it takes the kernels versions its release names): install one it takes, or "
                          "turn hub kernels off for the model")
    from transformers.integrations.hub_kernels import _build_kernel_mapping

    found = set()
    for per_device in _build_kernel_mapping().values():
        for device, entry in per_device.items():
            if (device if isinstance(device, str) else device.type) != "cuda":
                continue
            for repo in (entry.values() if isinstance(entry, dict) else [entry]):
                if not repo._trust_remote_code:
                    found.add((repo._repo_id, repo._revision, repo._version))
    return [HubItem(key, "kernel", repo_id, revision, version=version) for repo_id, revision, version in sorted(
        found, key=lambda r: (r[0], r[1] or "", r[2] or 0))]


def fetch_kernel(item: HubItem) -> str:
    """Download ``item``'s CUDA build for this environment's torch into the hub cache (not imported)."""
    from kernels import install_kernel

    return str(install_kernel(item.repo_id, revision=item.revision, version=item.version, backend="cuda"))


def fetch_model(item: HubItem) -> str:
    """Download ``item``'s model files into the hub cache; return the snapshot folder."""
    from huggingface_hub import snapshot_download

    patterns = [*MODEL_FILES, *(["*.py"] if item.trust_remote_code else [])]
    return snapshot_download(item.repo_id, revision=item.revision, allow_patterns=patterns)


def fetch_dataset(item: HubItem) -> str:
    """Download ``item``'s repository at its revision into the hub cache and read it as build_pool does; return
    the snapshot folder (its name is the commit)."""
    from huggingface_hub import snapshot_download

    from mialab.data.sources import load_hub

    folder = snapshot_download(item.repo_id, repo_type="dataset", revision=item.revision)
    source = {"hub": item.repo_id, "revision": Path(folder).name, **({"split": item.split} if item.split else {})}
    load_hub(source, subset=item.subset)
    return folder


def fetch_file(source: dict, *, timeout: float = 120) -> Path:
    """Download file source ``source`` into the data cache (:func:`mialab.data.sources.cached_file`), streamed and
    hashed on the way, written atomically: a copy whose SHA-256 is not the config's is an error naming both, and
    is not kept. A file already cached (checked when it was fetched) is not fetched again."""
    final = cached_file(source)
    if final.is_file():
        return final
    url = file_url(source)
    if not url.startswith(("https://", "http://")):
        raise ValueError(f"{url}: only http(s) URLs are fetched")
    digest = hashlib.sha256()
    with atomic_path(final) as tmp:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "wb") as out:  # noqa: S310 (http(s))
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != source["sha256"]:
            raise ValueError(f"{url}: the downloaded file's sha256 is {digest.hexdigest()}, the config's "
                             f"{source['sha256']}; not kept (a changed file, or a wrong hash in the config)")
    return final


def fetch_files(sources: list[tuple[str, dict]], fetch: Callable[[dict], Path] = fetch_file) -> list[dict]:
    """Fetch every (config key, file source); one manifest row each. A failure names the key and the file."""
    rows = []
    for key, source in sources:
        try:
            where = fetch(source)
        except Exception as err:
            raise RuntimeError(f"{key}: could not fetch {describe(source)}: {err}") from err
        rows.append({"key": key, "url": file_url(source), "sha256": source["sha256"], "fetched": str(where)})
    return rows


def prefetch(items: list[HubItem], *, model: Callable[[HubItem], str] = fetch_model,
             dataset: Callable[[HubItem], str] = fetch_dataset,
             kernel: Callable[[HubItem], str] = fetch_kernel) -> list[dict]:
    """Fetch every item; return one manifest row each (the item and where it went). A failure names
    the config key and the repository."""
    rows = []
    for item in items:
        fetch = {"model": model, "dataset": dataset, "kernel": kernel}[item.repo_type]
        try:
            where = fetch(item)
        except Exception as err:
            raise RuntimeError(f"{item.key}: could not fetch {item.repo_type} {item.repo_id}"
                               f"{f' (revision {item.revision})' if item.revision else ''}: {err}") from err
        rows.append({**asdict(item), "fetched": str(where)})
    return rows


def uncached_models(items: list[HubItem]) -> list[HubItem]:
    """The hub models among ``items`` whose revision is not in the local hub cache (``HF_HOME``), judged by their
    ``config.json`` as transformers resolves it offline, and the hub kernels that are not (:func:`kernel_cached`)."""
    from huggingface_hub import try_to_load_from_cache

    return [i for i in items if (i.repo_type == "model" and not isinstance(
        try_to_load_from_cache(i.repo_id, "config.json", revision=i.revision), str))
        or (i.repo_type == "kernel" and not kernel_cached(i))]


def kernel_cached(item: HubItem) -> bool:
    """Whether ``item``'s CUDA build is in the local hub cache (the kernels library, offline; nothing imported)."""
    from kernels import install_kernel

    try:
        install_kernel(item.repo_id, revision=item.revision, version=item.version, backend="cuda",
                       local_files_only=True)
    except Exception:   # noqa: BLE001  (any way of not finding it offline: not cached)
        return False
    return True


def check_hub_cache(config: dict, models_lock: dict[str, str], lock: Path | None, argv: list[str]) -> None:
    """When the jobs read the hub offline (``HF_HUB_OFFLINE`` unset, which they default to, or set), every hub model
    the config names must have a revision (its ``models:`` entry's, else the lock file's) and be in the local hub
    cache at it, and every hub kernel it turns on be there: rules/common.smk calls it when a run starts, before any
    job is submitted (not for a run of the ``prefetch`` target), so a model that was never fetched stops the run,
    named with its key, and the one command that fetches them (:func:`mialab.pipeline.lock.prefetch_command`)."""
    if "HF_HUB_OFFLINE" in os.environ and not hub_offline():
        return  # the jobs may download
    items = hub_items(config, models_lock)
    models = [i for i in items if i.repo_type in ("model", "kernel")]
    problems = [f"{i.key}: {i.repo_id} (revision unpinned: none in the config, no entry in {lock or 'a lock file'})"
                for i in models if i.repo_type == "model" and not i.revision]
    problems += [f"{i.key}: {i.repo_id}{' (hub kernel)' if i.repo_type == 'kernel' else ''} (revision "
                 f"{i.revision or f'v{i.version}'}): not in the hub cache (HF_HOME)"
                 for i in uncached_models([i for i in models if i.revision or i.repo_type == "kernel"])]
    if problems:
        raise ConfigError("hub models not fetched yet (the jobs read them offline, at their revision):\n  "
                          + "\n  ".join(problems)
                          + f"\nfetch them where the hub is reachable (the login node), with the same HF_HOME: "
                            f"{prefetch_command(argv)}"
                            f"\n(it pins the revisions a config leaves open in {lock or 'its lock file'}: commit that "
                            "file; docs/slurm.md, \"Staging\"), or export HF_HUB_OFFLINE=0 to let the jobs download")
