"""The exposure sweep: the configs it derives (keys shared where r does not matter), its table and
figure, and a two-point sweep end to end (r = 0 at chance)."""

import copy
import math
import os
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from workflow_helpers import REPO, default_config, foundation_config

from mialab.evaluation.sweep import SweepError, exposure_config, onset, sweep_figure, sweep_markdown, sweep_table
from mialab.pipeline.plan import Plan

SWEEP = yaml.safe_load((REPO / "configs" / "sweep_exposure.yaml").read_text())


def _validated(cfg: dict) -> dict:
    from snakemake.utils import validate

    cfg = copy.deepcopy(cfg)
    validate(cfg, str(REPO / "schemas" / "config.schema.yaml"))
    return cfg


def _sweep_base() -> dict:
    from snakemake.utils import update_config

    cfg = {}
    for path in SWEEP["base"]:
        update_config(cfg, yaml.safe_load((REPO / path).read_text()))
    return cfg


def test_exposure_configs_vary_only_the_members_and_r3_is_the_default_world():
    base = _sweep_base()
    plans = {r: Plan(_validated(exposure_config(base, r, SWEEP)), results="results") for r in SWEEP["exposure"]}
    zero = plans[0].config["models"]
    assert zero["base"]["members"] == [{"dataset": "wikimia", "repeats": 0}]
    assert "members" not in zero["sft"] and "contamination_rate" not in zero["sft"]  # fine-tuned on filler alone
    assert "grpo_e2" not in zero and plans[0].config["lara"]["models"] == ["sft", "grpo_e1"]
    assert zero["grpo_e1"]["members"] == {"dataset": "aime", "split_seed": 0, "repeats": 0}  # fillers in their places
    assert plans[16].config["models"]["grpo_e1"]["members"]["repeats"] == 16 and plans[16].config["seeds"] == [0]
    assert len({p.rl_run("grpo_e1").key for p in plans.values()}) == len(plans)
    assert "adra" in plans[0].config and plans[0].config["adra"]["targets"] == [{"model": "sft", "dataset": "aime"}]
    assert plans[16].config["models"]["sft"]["members"] == {"dataset": "aime", "repeats": 16}
    assert plans[16].config["models"]["sft"]["contamination_rate"] == pytest.approx(16 / 19)
    # the control, the tokenizer and the splits do not depend on r: one folder for every exposure
    assert len({p.model("control").key for p in plans.values()}) == 1
    assert len({p.split("aime", 0).key for p in plans.values()}) == 1
    assert len({p.model("base").key for p in plans.values()}) == len(plans)
    # r = 3 is the default world's exposure: the same models, so the same folders
    default, three = Plan(_validated(base), results="results"), Plan(_validated(exposure_config(base, 3, SWEEP)))
    assert three.model("base").key == default.model("base").key and three.model("sft").key == default.model("sft").key


def test_a_sweep_that_drops_a_model_others_build_on_is_an_error():
    with pytest.raises(SweepError, match="'sft' is the init or reference of"):
        exposure_config(default_config(), 1, {**SWEEP, "drop": ["sft"]})
    with pytest.raises(SweepError, match="model 'nope' is not in the base config"):
        exposure_config(default_config(), 1, {**SWEEP, "pretrain": {"nope": "wikimia"}})


def _headline(r: int) -> pd.DataFrame:
    rows = []
    for fam, col, auc in [("Loss", "loss", 0.5 + 0.02 * r), ("Min-K%++", "min_k_plus_plus@0.2", 0.5 + 0.03 * r)]:
        rows.append({"dataset": "wikimia", "model": "base", "family": fam, "method": col, "auroc": auc,
                     "auroc_lo": auc - 0.06, "auroc_hi": auc + 0.06, "delta_auroc": auc - (0.5 + 0.03 * r),
                     "p_value": 1.0 if fam == "Min-K%++" else 0.01})
    return pd.DataFrame(rows)


def test_sweep_table_onset_markdown_and_figure(tmp_path):
    table = sweep_table({4: _headline(4), 0: _headline(0), 1: _headline(1)})
    assert list(table["r"]) == [0, 0, 1, 1, 4, 4]
    on = onset(table).set_index("family")
    assert on.loc["Min-K%++", "first_r_above_chance"] == 4 and on.loc["Loss", "first_r_above_chance"] == 4
    assert on["chance_at_r0"].all() and on.loc["Loss", "beats_baseline_at"] == []
    md = sweep_markdown(table, 0.95)
    assert "| Min-K%++ | 50.0 [44, 56] | 53.0 [47, 59] | 62.0 [56, 68] | r=4 | – |" in md
    drawn = sweep_figure(table, {"Loss": "loss", "Min-K%++": "min_k_plus_plus@0.2"}, str(tmp_path / "s.png"))
    assert drawn == {"wikimia / base": ["Loss", "Min-K%++"]} and (tmp_path / "s.png").stat().st_size > 1000


@pytest.mark.slow
def test_two_point_sweep_end_to_end_with_r0_at_chance(tmp_path):
    """r in {0, 8} on WikiMIA, one seed, with base (80 pretraining steps) and the control (60):
    the foundation's scoring methods (the passive baselines and GradNorm, ReCaLL and DC-PDD: the default tiny world's
    attacks but the two that read its masked LM)."""
    cfg = foundation_config()
    cfg["seeds"] = [0]
    cfg["datasets"] = {"wikimia": cfg["datasets"]["wikimia"]}
    cfg["models"] = {k: cfg["models"][k] for k in ("base", "control")}
    cfg["models"]["base"]["train"]["steps"] = 80
    cfg["models"]["control"]["train"]["steps"] = 60
    (tmp_path / "resources").symlink_to(REPO / "resources")
    (tmp_path / "world.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    sweep = {"base": ["world.yaml"], "exposure": [0, 8], "pretrain": {"base": "wikimia"}, "cores": 2}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "workflow" / "sweep.smk"),
                           "--configfile", "sweep.yaml", "--cores", "2"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=1500, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    logs = "".join(p.read_text()[-3000:] for p in tmp_path.glob("results/sweep/exposure/*/run.log"))
    assert proc.returncode == 0, proc.stderr[-4000:] + logs
    table = pd.read_parquet(tmp_path / "results/sweep/exposure/sweep.parquet")
    zero = table[table["r"] == 0]
    attacks = ("GradNorm", "ReCaLL", "DC-PDD")
    assert set(zip(zero["model"], zero["family"])) == \
        {("base", f) for f in ("Loss", "R-Loss", "Zlib", "Min-K%++", *attacks)} | \
        {("control", f) for f in ("Loss", "Zlib", "Min-K%++", *attacks)}
    # the no-members control: every method at chance, within the noise of 64 + 64 candidates: an AUROC's standard
    # error at chance (Hanley & McNeil 1982) is 0.051 here, and over the table's intervals the largest deviation
    # is held at a family-wise 5% level (Bonferroni), not at each interval's own (a CI excluding 50 now and then
    # is what thirteen intervals give)
    from scipy.stats import norm

    n_pos = n_neg = 64
    se = math.sqrt((0.25 + (n_pos - 1) * (1 / 3 - 0.25) + (n_neg - 1) * (1 / 3 - 0.25)) / (n_pos * n_neg))
    bound = norm.ppf(1 - 0.05 / (2 * len(zero))) * se
    assert 0.14 < bound < 0.17 and (abs(zero["auroc"] - 0.5) < bound).all(), \
        zero[["model", "family", "auroc", "auroc_lo", "auroc_hi"]]
    eight = table[(table["r"] == 8) & (table["model"] == "base")].set_index("family")
    assert eight.loc["Min-K%++", "auroc_lo"] > 0.5  # seen 8 times: detected
    control = table[table["model"] == "control"].pivot(index="family", columns="r", values="auroc")
    assert (control[0] == control[8]).all()  # the control does not depend on r: built once, scored the same
    assert (tmp_path / "results/sweep/exposure/sweep.png").stat().st_size > 1000
    assert "### wikimia / base" in (tmp_path / "results/sweep/exposure/sweep.md").read_text()
