"""Semantic checks of a workflow config that a JSON schema cannot express.

Run after the schema validation (``rules/common.smk``) so a broken cross-reference fails before
any job starts, with a message that names the key.
"""

from __future__ import annotations

from mialab.data.registry import known_families


class ConfigError(ValueError):
    """The configuration is inconsistent; the message names the offending key."""


def check_names(key: str, names, configured, what: str) -> None:
    """Every name under config key ``key`` must be one of ``configured`` (``what``: "model", "dataset")."""
    for name in names:
        if name not in configured:
            raise ConfigError(f"{key}: unknown {what} {name!r}; configured: {', '.join(configured)}")


def check_config(config: dict) -> None:
    """Check cross-references: families, datasets and models named by other entries."""
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
    _check_acyclic(models)


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
