"""Semantic checks of a workflow config that a JSON schema cannot express.

Run after the schema validation (``rules/common.smk``) so a broken cross-reference fails before
any job starts, with a message that names the key.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

from mialab.data.registry import config_schema, defaults_validator, known_families, pool_keys
from mialab.data.sources import local_paths
from mialab.lm.loading import CODE_DECLARING_FILES, trusts_remote_code
from mialab.pipeline.methods import methods


class ConfigError(ValueError):
    """The configuration is inconsistent; the message names the offending key."""


def walk_config(node, key: str = "") -> Iterator[tuple[str, object]]:
    """(key path, value) of every entry below ``node``, named as messages name them (``a.b[0].c``)."""
    if isinstance(node, dict):
        for k, v in node.items():
            path = f"{key}.{k}" if key else str(k)
            yield path, v
            yield from walk_config(v, path)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield f"{key}[{i}]", v
            yield from walk_config(v, f"{key}[{i}]")


def key_path(parts) -> str:
    """A JSON-schema error's path (keys and list indices) as :func:`walk_config` names it."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def schema_message(error) -> str:
    """One line for a schema violation (a ``jsonschema`` error): the key path, the value and what the
    key accepts, instead of a dump of the schema."""
    where = key_path(error.absolute_path)
    if error.validator == "additionalProperties":
        known = list(error.schema.get("properties", {}))
        unknown = [k for k in error.instance if k not in known]
        head = f"{where}.{unknown[0]}" if where else str(unknown[0])
        return f"{head}: unknown key; {where or 'the config'} accepts: {', '.join(known) or 'no key'}"
    if error.validator in ("oneOf", "anyOf"):
        value = repr(error.instance)
        value = value if len(value) <= 80 else value[:77] + "..."
        what = error.schema.get("description")
        return f"{where or 'the config'}: {value} is none of the forms it accepts" + (f" ({what})" if what else "")
    message = error.message if len(error.message) <= 300 else error.message[:297] + "..."
    return f"{where or 'the config'}: {message}"


def validate_config(config: dict) -> None:
    """Validate ``config`` in place against ``schemas/config.schema.yaml``, filling in the defaults
    (rules/common.smk); a violation, and a number that is NaN or infinite (JSON schema's bounds let
    NaN through, and an unbounded key inf), is a :class:`ConfigError` naming the key path."""
    from jsonschema.exceptions import best_match

    error = best_match(defaults_validator(config_schema()).iter_errors(config))
    if error is not None:
        raise ConfigError(schema_message(error))
    for key, value in walk_config(config):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}: {value} is not a finite number; give a finite value")


def check_names(key: str, names, configured, what: str) -> None:
    """Every name under config key ``key`` must be one of ``configured`` (``what``: "model", "dataset")."""
    for name in names:
        if name not in configured:
            raise ConfigError(f"{key}: unknown {what} {name!r}; configured: {', '.join(configured)}")


def check_config_files(paths, argv: list[str] | None = None, *, suggest: bool = True) -> None:
    """The config files given on the command line: one complete config, then overlays of it.

    A file with a top-level ``overlay_of`` (a path relative to the working directory) is an
    overlay and must come after the file it names; any other file is complete and must come
    first, so two experiments are never deep-merged into one. An overlay given without its base
    fails with the command to run where adding the base makes the files right (``suggest``): ``argv``
    (the command's arguments, less the program) with the base inserted before the overlay, so
    targets, profile and options stay.
    """
    paths = [Path(os.path.relpath(p)) for p in paths]  # as the user typed them, for the messages
    for i, path in enumerate(paths):
        base = (load_yaml(path) or {}).get("overlay_of")
        if base is None:
            if i:
                raise ConfigError(f"{path}: a complete config (no overlay_of) cannot be merged after {paths[0]}; "
                                  "give one complete config, then overlays of it (files with overlay_of)")
        elif not (Path(base).exists() and any(p.samefile(base) for p in paths[:i])):
            fix = "give it first, then its overlays"
            if suggest and Path(base).is_file():
                try:
                    check_config_files([*paths[:i], Path(base), *paths[i:]], suggest=False)
                    fix = f"name both: {with_base(argv or [], path, base)}"
                except ConfigError:
                    pass
            raise ConfigError(f"{path}: an overlay of {base} (overlay_of), which is not given before it; {fix}")


def with_base(argv: list[str], overlay: Path, base: str) -> str:
    """The command line ``snakemake ARGV`` with config file ``base`` inserted before the word naming ``overlay``
    (``--configfile=OVERLAY`` becomes ``--configfile BASE OVERLAY``), quoted for a shell; where no word names
    it (a profile's configfile), ``snakemake ARGV --configfile BASE OVERLAY``."""
    def split(word: str) -> tuple[str, str]:  # (an attached "--configfile=", the path)
        flag = next((f for f in ("--configfile=", "--configfiles=") if word.startswith(f)), "")
        return flag, word[len(flag):]

    at = next((i for i, word in enumerate(argv)
               if Path(split(word)[1]).is_file() and Path(split(word)[1]).samefile(overlay)), None)
    if at is None:
        words = [*argv, "--configfile", base, str(overlay)]
    else:
        flag, written = split(argv[at])
        words = [*argv[:at], *([flag.rstrip("=")] if flag else []), base, written, *argv[at + 1:]]
    return shlex.join(["snakemake", *words])


def check_sections(config: dict) -> None:
    """Every method section present has the sections it builds on (its ``needs``, mialab.pipeline.methods;
    nothing is inherited from config.yaml)."""
    for method in methods():
        for needs in method.needs:
            if method.name in config and needs not in config:
                raise ConfigError(f"{method.name}: needs a '{needs}' section, which this config does not have")


def check_config(config: dict) -> None:
    """Check cross-references: families, datasets and models named by other entries."""
    check_sections(config)
    datasets, models = config["datasets"], config["models"]
    families = known_families()
    for name, ds in datasets.items():
        fam = ds["pool"]["family"]
        if fam not in families:
            raise ConfigError(f"datasets.{name}.pool.family: unknown family {fam!r}; known: {', '.join(families)}")
    for name, spec in models.items():
        where = f"models.{name}"
        for ref_key in ("reference", "init"):
            ref = spec.get(ref_key)
            check_names(f"{where}.{ref_key}", [ref] if ref is not None else [], models, "model")
            if ref == name:
                raise ConfigError(f"{where}.{ref_key}: a model cannot be its own {ref_key}")
        members = spec.get("members") or []
        check_names(f"{where}.members", [m["dataset"] for m in (members if isinstance(members, list) else [members])],
                    datasets, "dataset")
        check_names(f"{where}.datasets", spec.get("datasets", []), datasets, "dataset")
        if spec["kind"] == "rl" and spec["epoch"] > spec["train"]["epochs"]:
            raise ConfigError(f"{where}.epoch: {spec['epoch']} is past the run's last epoch "
                              f"(train.epochs = {spec['train']['epochs']})")
        if spec["kind"] != "hf" and "tokenizer" not in config and spec["kind"] == "pretrain":
            raise ConfigError(f"{where}: kind 'pretrain' needs a top-level 'tokenizer' section")
        arch = spec.get("architecture")
        if arch and arch["hidden_size"] % arch["num_heads"]:
            raise ConfigError(f"{where}.architecture: hidden_size {arch['hidden_size']} is not a multiple of num_heads "
                              f"{arch['num_heads']} (each head gets hidden_size / num_heads dimensions)")
    _check_acyclic(models)
    check_pool_keys(datasets)
    check_model_paths(config)
    check_local_paths(config)
    for name, ds in datasets.items():
        para = ds.get("paraphrase")
        if para and para["backend"] != "offline":
            key = f"datasets.{name}.paraphrase.options"
            check_generation(key, para["backend"], para["options"], model=(f"{key}.model", para["options"]["model"]))


def _check_acyclic(models: dict) -> None:
    """Fail when following ``init``/``reference`` links from any model comes back to it."""

    def visit(node: str, path: list[str]) -> None:
        for nxt in (models[node].get(k) for k in ("init", "reference")):
            if nxt is None:
                continue
            if nxt in path:
                raise ConfigError(f"models: cycle through init/reference: {' -> '.join(path + [nxt])}")
            visit(nxt, path + [nxt])

    for start in models:
        visit(start, [start])


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that rejects a key given twice in one mapping (plain YAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ConfigError(f"{self.name}:{key_node.start_mark.line + 1}: key {key!r} given twice in one "
                                  f"mapping (first at line {seen[key] + 1}); YAML would silently keep the last")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def load_yaml(path) -> object:
    """Parse YAML (or JSON) file ``path`` safely; a duplicate key or a syntax error is a
    :class:`ConfigError` naming the file and line."""
    text = Path(path).read_text(encoding="utf-8")
    loader = _StrictLoader(text)
    loader.name = str(path)
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise ConfigError(f"{path}:{mark.line + 1}:{mark.column + 1}: YAML syntax error: {e.problem or e.context}") \
            from None
    finally:
        loader.dispose()


def command_line_config_files(argv: list[str]) -> list[str]:
    """The files a Snakemake command line names with ``--configfile`` / ``--configfiles`` (the last one
    given, as Snakemake reads it; no abbreviations)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--configfile", "--configfiles", nargs="+", default=[])
    return parser.parse_known_args(argv)[0].configfile


def check_command_line(argv: list[str] | None = None) -> None:
    """Check the config files of a Snakemake command line (``argv``, default this process's) with
    :func:`check_yaml_files` before Snakemake reads them: its loader names neither file nor line of a YAML
    error, and evaluates a file's YTE templates while loading it. Run by the workflow profile
    (profiles/default/config.yaml) on every invocation; a problem ends the process with its message. A file
    that is not there is left to Snakemake's own message."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        check_yaml_files([p for p in command_line_config_files(argv) if Path(p).is_file()])
    except ConfigError as e:
        sys.exit(f"mialab: {e}")


def typed_overrides(entries) -> list[tuple[str, object]]:
    """``(key, value)`` of each ``--config KEY=VALUE`` (Snakemake's raw ``config_args``), VALUE read as YAML
    (``yaml.safe_load``: data, never code), so a nested value keeps its types as in a config file (Snakemake
    reads the scalars inside ``scoring={batch_size: 32}`` as strings). A VALUE that is not YAML fails,
    naming it."""
    typed = []
    for entry in entries or ():
        key, _, value = str(entry).partition("=")
        try:
            typed.append((key, yaml.safe_load(value)))
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at column {mark.column + 1}" if mark else ""
            raise ConfigError(f"--config {entry}: not valid YAML{where} ({getattr(e, 'problem', None) or e}); "
                              "a nested value is written as YAML, e.g. 'scoring={batch_size: 32}'") from None
    return typed


def check_yaml_files(paths) -> None:
    """Re-read every config file Snakemake loaded (it keeps the last of duplicate keys) strictly.

    A file that turns on YTE templating (``__use_yte__``) is refused: Snakemake evaluates its
    expressions as Python while loading it, and a config string is never code here.
    """
    for path in paths:
        doc = load_yaml(path)
        if isinstance(doc, dict) and "__use_yte__" in doc:
            raise ConfigError(f"{path}: __use_yte__ makes Snakemake evaluate the file's expressions as Python "
                              "code (YTE templates); mialab configs are plain YAML: remove it and the templates")


def check_pool_keys(datasets: dict) -> None:
    """Each pool section holds only the keys its family declares (``$defs/pools`` of the schema)."""
    for name, ds in datasets.items():
        family = ds["pool"]["family"]
        accepted = pool_keys(family)
        for key in ds["pool"]:
            if key not in accepted:
                raise ConfigError(f"datasets.{name}.pool.{key}: not a key of family {family!r}; "
                                  f"it accepts: {', '.join(accepted)}")


# a hub repository id: org/name, as the hub spells them (a local path has no other form to be taken for one)
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")


def model_reference(key: str, value: str, models: dict | None = None, *, trusted: bool = False) -> None:
    """``value`` (config key ``key``) must be a configured model (when ``models`` is given), an
    existing model folder (declaring no code of its own unless ``trusted``: :func:`check_model_folder`),
    or a hub model id ``org/name`` that is not a local path."""
    if models is not None and value in models:
        return
    path = Path(value)
    if path.is_dir():
        check_model_folder(key, path, trusted=trusted)
        return
    if path.exists():
        raise ConfigError(f"{key}: {value!r} is a file; a model is a folder (config.json, *.safetensors) or a hub id")
    if not HUB_ID.match(value):
        known = f"a configured model ({', '.join(models)}), " if models is not None else ""
        raise ConfigError(f"{key}: {value!r} is not {known}an existing model folder, nor a hub model id (org/name)")


#: files of a model folder that name its tokenizer (AutoTokenizer reads one of them)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")
#: pickled weights, which mialab never loads (a pickle can run code)
PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt")


def check_model_folder(key: str, folder: Path, *, trusted: bool = False) -> None:
    """A local model folder (config key ``key``) must be what a job loads: a ``config.json``, a tokenizer,
    safetensors weights (every shard its index names, each as long as its header says), every JSON file
    parseable, a tokenizer whose token ids fit the model's ``vocab_size``, and, unless ``trusted`` (the
    model's ``models.<name>.trust_remote_code``), no code of its own (``auto_map``: :mod:`mialab.lm.loading`
    would refuse the folder in the job). A problem fails here, naming the file, instead of deep in
    transformers inside a job."""
    docs = {}
    for file in sorted(folder.glob("*.json")):
        try:
            docs[file.name] = json.loads(file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{key}: {file} is not valid JSON ({e}); a truncated or damaged copy?") from None
    for name in CODE_DECLARING_FILES:
        if isinstance(docs.get(name), dict) and "auto_map" in docs[name] and not trusted:
            raise ConfigError(f"{key}: {folder / name} declares custom code (auto_map), which runs only for a model "
                              "of the models section whose entry allows it (models.<name>.trust_remote_code: true; "
                              "a model named by path elsewhere never runs it); use a folder without auto_map")
    if "config.json" not in docs:
        raise ConfigError(f"{key}: {folder} has no config.json, so it is not a transformers model folder "
                          "(save_pretrained writes one; a checkpoint's parent or child folder?)")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"{key}: {folder} has no tokenizer ({', '.join(TOKENIZER_FILES)}); save the model's "
                          "tokenizer into the folder (tokenizer.save_pretrained)")
    index = docs.get("model.safetensors.index.json")
    shards = sorted(set(index.get("weight_map", {}).values())) if isinstance(index, dict) else []
    missing = [name for name in shards if not (folder / name).is_file()]
    if missing:
        raise ConfigError(f"{key}: {folder / 'model.safetensors.index.json'} names shard(s) that are not in the "
                          f"folder: {', '.join(missing)}")
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        pickled = sorted(p.name for pattern in PICKLED_WEIGHTS for p in folder.glob(pattern))
        found = (f"only pickled weights ({', '.join(pickled)}), which mialab never loads (a pickle can run code)"
                 if pickled else "no weights")
        raise ConfigError(f"{key}: {folder} holds {found}; mialab loads *.safetensors weights only: save them with "
                          "save_pretrained(..., safe_serialization=True) where you trust the model")
    for file in weights:
        problem = safetensors_problem(file)
        if problem:
            raise ConfigError(f"{key}: {file}: {problem}; a truncated or damaged copy?")
    vocab, top = docs["config.json"].get("vocab_size"), tokenizer_top_id(docs.get("tokenizer.json"))
    if isinstance(vocab, int) and top is not None and top >= vocab:
        raise ConfigError(f"{key}: {folder / 'tokenizer.json'} has token id {top}, but config.json's vocab_size is "
                          f"{vocab}: the tokenizer is not this model's (ids past the embedding fail in every job)")


def tokenizer_top_id(doc) -> int | None:
    """The largest token id of a ``tokenizer.json`` document (its vocabulary and added tokens), or None."""
    if not isinstance(doc, dict):
        return None
    vocab = (doc.get("model") or {}).get("vocab")  # BPE / WordPiece: token -> id; Unigram: [piece, score] by id
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab or [])))
    ids += [t["id"] for t in doc.get("added_tokens") or [] if isinstance(t, dict) and isinstance(t.get("id"), int)]
    ids = [i for i in ids if isinstance(i, int)]
    return max(ids) if ids else None


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a complete safetensors file (its header, then data up to the last tensor's
    end offset), or None. Reads the header only."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than the 8-byte header length"
        n = int.from_bytes(head, "little")
        if 8 + n > size:
            return f"the header says {n} bytes of metadata but the file has {size} bytes"
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return "the header is not valid JSON"
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end > size:
        return f"the tensors end at byte {8 + n + end} but the file has {size} bytes"
    return None


def check_model_paths(config: dict) -> None:
    """``kind: hf`` models and the LMs a method names by path are configured names, existing model
    folders or hub ids ``org/name``."""
    models = config["models"]
    for name, spec in models.items():
        if spec["kind"] == "hf":
            model_reference(f"models.{name}.path", spec["path"], trusted=trusts_remote_code(config, name))
    for method in methods():
        for key, value in (method.lm_keys(config) if method.lm_keys is not None else ()):
            model_reference(key, value, models)


def check_generation(key: str, backend: str, options: dict | None, *, model: tuple[str, str] | None = None) -> None:
    """A generation setting that loads nothing unasked: its rollout-engine ``backend``'s ``options`` (config
    key ``key``) hold no option that loads code (:func:`mialab.lm.engine.check_backend_options`: no
    ``trust_remote_code``, vLLM's engine arguments within its allow-list), and the model it names by path,
    ``model`` = (config key, value), is not a local folder that declares code of its own (a model named
    outside the models section never runs it; a hub id is refused by the loaders). Every generation path
    (a method's plan, a dataset's paraphraser) calls it before any job; the error names the key."""
    from mialab.lm.engine import check_backend_options

    try:
        check_backend_options(backend, options or {}, key=key)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if model is not None and Path(model[1]).is_dir():
        check_model_folder(model[0], Path(model[1]))


def data_paths(config: dict) -> list[tuple[str, str]]:
    """(config key, path) of every local path the config names as data: pool sources, tokenizer
    corpora, fillers, masked LMs' corpora."""
    named = []
    for name, ds in config["datasets"].items():
        for key in ("source", "nonmember_source"):
            if key in ds["pool"]:
                named += [(f"datasets.{name}.pool.{key}", p) for p in local_paths(ds["pool"][key])]
    for i, path in enumerate(config.get("tokenizer", {}).get("corpora", [])):
        named.append((f"tokenizer.corpora[{i}]", path))
    for name, spec in config["models"].items():
        if "filler" in spec:
            named += [(f"models.{name}.filler", p) for p in local_paths(spec["filler"])]
        named += [(f"models.{name}.corpora[{i}]", p) for i, p in enumerate(spec.get("corpora", []))]
    return named


def check_local_paths(config: dict) -> None:
    """Every local path the config names as data exists (relative to the working directory): a
    missing one fails here, before any job, instead of being taken for a hub id."""
    for key, path in data_paths(config):
        if not Path(path).exists():
            raise ConfigError(f"{key}: {path!r} does not exist (relative to {os.getcwd()}); "
                              "a hub dataset is written {hub: org/name}")
