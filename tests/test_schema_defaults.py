"""Defaults come from the schema alone (schemas/config.schema.yaml): a settings dataclass that mirrors a config
section keeps a default only for a key some section leaves out (what its absence means), and then it must be
the default of every section that does declare one."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from workflow_helpers import NS_TASK, RL_TRAIN, schema_defaults

from mialab.calibdcd.reference import FinetuneConfig
from mialab.lm.engine import SamplingConfig
from mialab.n_sampling.tasks import Task
from mialab.training.grpo import GRPOSettings
from mialab.training.mlm import MLMSettings
from mialab.training.pretrain import PretrainSettings
from mialab.training.sft import SFTSettings

#: each settings dataclass and the schema sections (object nodes) whose keys are its fields
MIRRORS: dict[type, list[tuple[str, ...]]] = {
    GRPOSettings: [RL_TRAIN, ("adra", "train")],
    PretrainSettings: [("models", "*", "kind=pretrain", "train")],
    MLMSettings: [("models", "*", "kind=mlm", "train")],
    SFTSettings: [("models", "*", "kind=sft", "train")],
    Task: [NS_TASK],
    SamplingConfig: [("n_sampling", "sampling"), NS_TASK, ("adra", "eval")],
    FinetuneConfig: [("calibdcd", "detectors", "dpdllm", "finetune")],
}

#: dataclass defaults that are one section's meaning of an absent key where another section declares another
#: default: (class, field) -> why
ABSENT_MEANS: dict[tuple[type, str], str] = {
    (GRPOSettings, "lora"): "an rl model's train.lora absent = full fine-tuning; adra.train.lora's default is LoRA",
}


def dataclass_defaults(cls: type) -> dict:
    return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
            for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}


def mismatches(cls: type, sections: list[tuple[str, ...]]) -> list[str]:
    """Where ``cls``'s defaults and the schema's differ: a default of a field every mirroring section gives a
    default to (the dataclass's is never read: a second copy), or one unlike a section's."""
    fields = {f.name for f in dataclasses.fields(cls)}
    declared = [(path, {k: v for k, v in schema_defaults(*path).items() if k in fields}) for path in sections]
    found = []
    for name, value in dataclass_defaults(cls).items():
        defaults = [(".".join(path), d[name]) for path, d in declared if name in d]
        if len(defaults) == len(sections):
            found.append(f"{cls.__name__}.{name} = {value!r}: every section declares a default "
                         f"({', '.join(p for p, _ in defaults)}); drop the dataclass's")
        found += [f"{cls.__name__}.{name} = {value!r} but {path}.{name} defaults to {default!r}"
                  for path, default in defaults if default != value and (cls, name) not in ABSENT_MEANS]
    return found


@pytest.mark.parametrize("cls", list(MIRRORS), ids=lambda c: c.__name__)
def test_a_settings_default_is_never_a_second_copy_of_the_schemas(cls):
    assert not mismatches(cls, MIRRORS[cls])


def test_the_check_sees_a_default_the_schema_does_not_hold():
    """Today's lapse, as it was: GRPOSettings with lr 1e-6 and save_steps 50 beside adra.train's 5e-5 and 10."""

    @dataclasses.dataclass(frozen=True)
    class Old:
        lr: float = 1.0e-6
        save_steps: int = 50
        max_steps: int = -1

    found = mismatches(Old, MIRRORS[GRPOSettings])
    assert any("Old.lr = 1e-06 but adra.train.lr defaults to 5e-05" in f for f in found), found
    assert any("Old.save_steps = 50 but adra.train.save_steps defaults to 10" in f for f in found), found
    assert any("Old.lr = 1e-06: every section declares a default" in f for f in found), found
    assert not any("max_steps" in f for f in found), found     # an rl model's train has no max_steps: -1 is its absence


def test_settings_built_from_a_validated_section_need_nothing_else():
    """Every field without a default is one the schema fills: a section validated from nothing builds."""
    GRPOSettings.from_config(schema_defaults(*RL_TRAIN))
    PretrainSettings.from_config(schema_defaults("models", "*", "kind=pretrain", "train"))
    MLMSettings.from_config(schema_defaults("models", "*", "kind=mlm", "train"))
    SFTSettings.from_config(schema_defaults("models", "*", "kind=sft", "train"))
    Task.from_config({"template": "continuation", **schema_defaults(*NS_TASK)})


def test_the_plan_reads_the_paraphrase_experiments_without_loading_a_paraphraser():
    code = "import sys, mialab.pipeline.plan\nprint('mialab.data.paraphrase' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_schema_reads_as_yaml_safe_load_reads_it():
    """config_schema parses with libyaml's safe loader where PyYAML has it: the same document as yaml.safe_load's."""
    import yaml

    from mialab.core.paths import SCHEMA
    from mialab.data.registry import config_schema

    assert config_schema() == yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
