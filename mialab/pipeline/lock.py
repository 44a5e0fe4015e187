"""The lock file of a config: the hub revisions rule ``prefetch`` resolved, like a package lock.

A hub dataset the config pins (``{hub: org/name, revision: <commit>}``) is read at that revision, a hub model a
``models:`` entry pins (``revision: <commit>``) loaded at it. One without a revision (a dataset, a model of
``models:``, or a hub model named elsewhere: an encoder, a judge, a paraphraser, a fill model) is resolved by rule
``prefetch`` when it first fetches it: the commit the hub serves then is written to the config's lock file
(``datasets:`` and ``models:`` sections), ``<config>.lock`` beside the first config file the command names (the
complete config; its overlays share it), and every later run reads it at that commit (a model:
:func:`mialab.pipeline.prefetch.hub_revisions`). Commit the lock file with the config: two users of the same
config then read the same data and weights. To move to a newer revision, delete the entry (or the file) and run
``prefetch`` again.

:func:`check_sources_fetched` is the plan-time gate (rules/common.smk): a hub dataset with neither a revision nor
a lock entry, a pinned one not in the hub cache, or a file source not in the data cache stops the run before any
job, naming each and the one command that fetches them.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import yaml

from mialab.core.io import write_text
from mialab.data.sources import cached_file, describe, is_file, is_hub
from mialab.pipeline.config import ConfigError, load_yaml, walk_config

LOCK_SUFFIX = ".lock"
HEADER = ("# Hub revisions resolved by rule prefetch for the hub datasets and models {config} names without a\n"
          "# revision (mialab/pipeline/lock.py). Commit this file with the config: every run reads these commits.\n")
#: The lock file's sections: hub datasets, hub models.
SECTIONS = ("datasets", "models")


def lock_path(config_files) -> Path | None:
    """The lock file of a run's config files: ``<first>.lock`` beside the first (None without one)."""
    files = [Path(os.path.relpath(f)) for f in config_files]   # as the user wrote it (Snakemake makes it absolute)
    if not files:
        return None
    first = files[0]
    return first.with_name(first.name.removesuffix(first.suffix) + LOCK_SUFFIX)


def read_lock(path: Path | None, section: str = "datasets") -> dict[str, str]:
    """``org/name -> commit`` of a lock file's ``section`` (:data:`SECTIONS`); no file: empty. A malformed one is a
    :class:`ConfigError` naming the file."""
    if path is None or not Path(path).is_file():
        return {}
    doc = load_yaml(path) or {}
    if not isinstance(doc, dict) or set(doc) - set(SECTIONS) or not all(
            isinstance(entries, dict) and all(isinstance(k, str) and isinstance(v, str) and v
                                              for k, v in entries.items()) for entries in doc.values()):
        raise ConfigError(f"{path}: not a lock file ('datasets' and 'models' mappings of org/name: <commit>); rule "
                          "prefetch writes it: delete it and run prefetch again")
    return doc.get(section, {})


def hub_sources(config: dict) -> list[tuple[str, dict]]:
    """(config key, source) of every hub dataset the config names, in config order."""
    return [(key, value) for key, value in walk_config(config) if is_hub(value)]


def file_sources(config: dict) -> list[tuple[str, dict]]:
    """(config key, source) of every file source (``{url}``, ``{github}``) the config names, in config order."""
    return [(key, value) for key, value in walk_config(config) if is_file(value)]


def apply_lock(config: dict, lock: dict[str, str]) -> None:
    """Give every hub dataset of ``config`` without a ``revision`` its lock entry's (in place)."""
    for _, source in hub_sources(config):
        if "revision" not in source and source["hub"] in lock:
            source["revision"] = lock[source["hub"]]


def write_lock(path: Path, resolved: dict[str, str], config: str, section: str = "datasets") -> None:
    """Add ``resolved`` (``org/name -> commit``) to lock file ``path``'s ``section`` (the entries already there, and
    the other section's, are kept)."""
    doc = {name: read_lock(path, name) for name in SECTIONS}
    doc[section] = {**doc[section], **resolved}
    body = yaml.safe_dump({name: dict(sorted(entries.items())) for name, entries in doc.items() if entries},
                          sort_keys=False)
    write_text(HEADER.format(config=os.path.relpath(config)) + body, path)


def command_line(argv: list[str]):
    """A Snakemake command line ``argv`` (less the program) as Snakemake's own parser reads it."""
    from snakemake.cli import get_argument_parser

    return get_argument_parser().parse_known_args(argv)[0]


def fetches(argv: list[str]) -> bool:
    """Whether Snakemake command line ``argv`` runs rule ``prefetch`` (names it as a target)."""
    return "prefetch" in command_line(argv).targets


def prefetch_command(argv: list[str]) -> str:
    """The ``snakemake prefetch ...`` command of a run's command line ``argv`` (less the program): the target
    first (a word after ``--configfile`` would be read as one more config file), then the run's Snakefile,
    working directory, profile and config files."""
    args = command_line(argv)
    words = ["snakemake", "prefetch"]
    for flag, value in (("-s", args.snakefile), ("-d", args.directory), ("--profile", args.profile)):
        words += [flag, str(value)] if value else []
    words += ["--configfile", *map(str, args.configfile)] if args.configfile else []
    return shlex.join(words)


def missing_sources(config: dict, lock: Path | None) -> list[str]:
    """One line for each source of ``config`` a job could not read offline: a hub dataset with neither a
    revision nor an entry in ``lock``, a pinned one not in the hub cache (``HF_HOME``), a file not in the data
    cache (``MIALAB_DATA_CACHE``)."""
    problems: dict[str, list[str]] = {}   # what is missing -> the config keys that name it
    for key, source in hub_sources(config):
        from huggingface_hub import snapshot_download   # only where a hub dataset is named: most runs name none

        if "revision" not in source:
            problems.setdefault(f"hub dataset {source['hub']}: no revision, and no entry in {lock or 'a lock file'}",
                                []).append(key)
            continue
        try:
            snapshot_download(source["hub"], repo_type="dataset", revision=source["revision"], local_files_only=True)
        except Exception:   # noqa: BLE001  (any way of not finding it offline: not cached)
            problems.setdefault(f"hub dataset {source['hub']} at {source['revision']}: not in the hub cache (HF_HOME)",
                                []).append(key)
    for key, source in file_sources(config):
        if not cached_file(source).is_file():
            problems.setdefault(f"{describe(source)}: not in the data cache ({cached_file(source).parent})",
                                []).append(key)
    return [f"{what} ({', '.join(keys)})" for what, keys in problems.items()]


def check_sources_fetched(config: dict, lock: Path | None, argv: list[str]) -> None:
    """Stop a run (dry runs included) whose sources are not all fetched and pinned (:func:`missing_sources`),
    naming them and the one command that fetches them (:func:`prefetch_command`)."""
    missing = missing_sources(config, lock)
    if missing:
        raise ConfigError("data sources not fetched yet (the jobs read them offline):\n  " + "\n  ".join(missing)
                          + f"\nfetch them, where the hub and GitHub are reachable (the login node), with: "
                            f"{prefetch_command(argv)}\n(it resolves the revisions a config leaves open into "
                            f"{lock or 'its lock file'}: commit that file; docs/slurm.md, \"Staging\")")
