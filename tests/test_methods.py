"""The method interface (mialab.pipeline.methods): every method registers from its own package, the pipeline and
the shared workflow loop over the registered methods and name none of them, and what a method declares agrees
with its plan, its rule file and the schema."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from workflow_helpers import REPO, default_config, validated

import mialab
from mialab.data.registry import config_schema
from mialab.pipeline.methods import METHODS, MethodPlan, method_plans, methods, rule_file
from mialab.pipeline.plan import LAYOUTS, STAGE_VERSIONS, Plan
from mialab.scoring.baselines import passive_columns

ROOT = Path(mialab.__file__).parent
#: The methods and detectors by every name they go by (a registered method's name is added to these).
METHOD_NAMES = ("adra", "lara", "calibdcd", "n_sampling", "n-sampling", "dpdllm", "veilprobe")
#: Where no method may be named: the floors below the methods, and the workflow's shared definitions.
NAMELESS = (*sorted((ROOT / "pipeline").rglob("*.py")), *sorted((ROOT / "core").rglob("*.py")),
            REPO / "rules" / "common.smk")


def naming(text: str, names=METHOD_NAMES) -> list[str]:
    """The lines of ``text`` that name a method: the name as a word of its own, an underscore or a slash
    beside it counting as a break (``adra_train``, ``calibdcd/scores``, ``N-Sampling``), any case."""
    words = "|".join(re.escape(n) for n in sorted({*names, *METHODS.known()}, key=len, reverse=True))
    pattern = re.compile(rf"(?<![a-z0-9])({words})(?![a-z0-9])", re.IGNORECASE)
    return [f"{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1) if pattern.search(line)]


def test_the_pipeline_and_core_name_no_method():
    found = {str(p.relative_to(REPO)): naming(p.read_text()) for p in NAMELESS}
    found = {p: lines for p, lines in found.items() if lines}
    assert not found, "modules below the methods that name one (declare it in the method's package instead):\n" + \
        "\n".join(f"{p}:{line}" for p, lines in found.items() for line in lines)


def test_the_snakefile_includes_the_registered_methods_rule_files_without_naming_them():
    """A method's rule file is included because the method is registered (rules/<method>.smk), so a new method
    touches no shared file; ``snakemake --list-rules`` shows every declared rule."""
    import subprocess
    import sys

    assert not naming((REPO / "Snakefile").read_text())
    listed = subprocess.run([sys.executable, "-m", "snakemake", "--list-rules"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert {r for m in methods() for r in m.rules} <= set(listed.stdout.split())


def test_the_check_sees_a_method_named():
    assert naming("SIZED = ('adra_train', 'score_baselines')") and naming("# N-Sampling's rollouts")
    assert naming('stage("calibdcd/scores", ...)') and naming("VeilProbe")
    assert not naming("a declaration of parallel work") and not naming("paradramatic")


def test_every_method_package_registers_one_method_named_as_its_section():
    packages = sorted(p.parent.name for p in ROOT.glob("*/method.py"))
    assert [m.name for m in methods()] and sorted(m.name for m in methods()) == packages
    for m in methods():
        assert issubclass(m.plan, MethodPlan) and m.plan.section == m.name
        assert all(need in METHODS.known() for need in m.needs)
        assert all(methods().index(METHODS.get(need)) < methods().index(m) for need in m.needs)


def test_no_method_plan_repeats_the_preamble():
    """The plans share MethodPlan's __init__ (the section, its check); one that builds on another keeps that
    plan and hands the rest to it."""
    for m in methods():
        source = inspect.getsource(m.plan)
        assert "self.spec = " not in source and "self.check()" not in source, m.name


def test_a_methods_stages_rules_and_sizing_agree():
    for m in methods():
        assert set(m.layouts) == set(m.versions), m.name
        assert all(stage.startswith(f"{m.name}/") for stage in m.layouts), m.name
        assert all(LAYOUTS[s] == m.layouts[s] and STAGE_VERSIONS[s] == m.versions[s] for s in m.layouts)
        rules = re.findall(r"^(?:local)?rule (\w+):", (REPO / rule_file(m)).read_text(), re.M)
        assert tuple(rules) == m.rules, m.name
        assert set(m.jobs) == set(m.work) and set(m.jobs) <= set(m.rules), m.name
        assert set(m.launched) <= set(m.jobs), m.name


def test_the_default_headline_is_the_passive_baselines_and_each_methods_families():
    cfg = validated(default_config())
    plan = Plan(cfg)
    default = config_schema()["properties"]["evaluation"]["properties"]["headline"]["default"]
    declared = {family: column for m in methods() for family, column in m.headline.items()}
    assert declared.items() <= default.items()
    passive = passive_columns(plan)
    rest = {f: c for f, c in default.items() if f not in declared}
    assert all(any(p.owns(c) for p in passive) for c in rest.values()), rest
    plans = method_plans(plan, cfg)
    for m in methods():   # a method's headline columns are its own
        owned = [c for c in plans[m.name].columns()]
        assert all(any(o.owns(column) for o in owned) for column in m.headline.values()), m.name


@pytest.mark.parametrize("name", ["adra", "lara", "calibdcd", "n_sampling"])
def test_the_paper_methods_are_registered(name):
    assert METHODS.get(name).name == name
