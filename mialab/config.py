"""Semantic checks of a workflow config that a JSON schema cannot express.

Run after the schema validation (``rules/common.smk``) so a broken cross-reference fails before
any job starts, with a message that names the key.
"""

from __future__ import annotations

from mialab.data.registry import known_families


class ConfigError(ValueError):
    """The configuration is inconsistent; the message names the offending key."""


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
            if ref is not None and ref not in models:
                raise ConfigError(f"{where}.{ref_key}: unknown model {ref!r}; configured: {', '.join(models)}")
            if ref == name:
                raise ConfigError(f"{where}.{ref_key}: a model cannot be its own {ref_key}")
        members = spec.get("members") or []
        for m in members if isinstance(members, list) else [members]:
            if m["dataset"] not in datasets:
                raise ConfigError(f"{where}.members: unknown dataset {m['dataset']!r}; configured: {', '.join(datasets)}")
        for ds in spec.get("datasets", []):
            if ds not in datasets:
                raise ConfigError(f"{where}.datasets: unknown dataset {ds!r}; configured: {', '.join(datasets)}")
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
