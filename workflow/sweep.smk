# The exposure sweep (mialab.evaluation.sweep): the experiment of `base` at each member exposure r of
# `exposure` (a Snakemake Paramspace), every method of its results table scored, then AUROC against
# r per method. Each exposure is one run of the main Snakefile on its own config in one shared working
# directory (results/sweep/exposure/world/), one after another: stages that do not depend on r
# (pools, splits, tokenizer, the control model) have the same content keys and are built once.
#
#   snakemake -s workflow/sweep.smk --configfile configs/sweep_exposure.yaml --cores 2
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml
from snakemake.utils import Paramspace, update_config, validate

sys.path.insert(0, str(Path(workflow.basedir).parent))

from mialab.evaluation.sweep import exposure_config, sweep_figure, sweep_markdown, sweep_table
from mialab.core.io import atomic_path, write_parquet, write_text
from mialab.data.registry import config_schema

validate(config, "../schemas/sweep.schema.yaml")
SPACE = Paramspace(pd.DataFrame({"r": [int(r) for r in config["exposure"]]}))
ROOT = "results/sweep/exposure"
WORLD = f"{ROOT}/world"
MAIN = str(Path(workflow.basedir).parent / "Snakefile")
PROFILE = str(Path(workflow.basedir).parent / "profiles" / "local")
POINTS = list(SPACE.instance_patterns)  # r~0, r~1, ... in the config's order
EXPOSURES = [int(r) for r in config["exposure"]]


def base_config():
    """The swept experiment: its complete config, then its overlays, merged as Snakemake merges them."""
    cfg = {}
    for path in config["base"]:
        update_config(cfg, yaml.safe_load(Path(path).read_text()))
    return cfg


def evaluation_settings(path):
    """The headline families and the interval level of a swept config (the schema's defaults where unset)."""
    props = config_schema()["properties"]["evaluation"]["properties"]
    ev = yaml.safe_load(Path(path).read_text()).get("evaluation", {})
    return {"headline": ev.get("headline", props["headline"]["default"]),
            "level": ev.get("bootstrap", {}).get("level", props["bootstrap"]["properties"]["level"]["default"])}


def previous_point(wildcards):
    """Exposures run one after another (they share the working directory): the one before this."""
    here = EXPOSURES.index(int(wildcards.r))
    return [f"{ROOT}/{POINTS[here - 1]}/headline.parquet"] if here else []


rule sweep_all:
    default_target: True
    input:
        f"{ROOT}/sweep.md",
        f"{ROOT}/sweep.csv",
        f"{ROOT}/sweep.png",


rule sweep_config:
    output:
        f"{ROOT}/{SPACE.wildcard_pattern}/config.yaml",
    params:
        point=lambda wc: SPACE.instance(wc),
    run:
        cfg = exposure_config(base_config(), int(params.point["r"]), config)
        write_text(yaml.safe_dump(cfg, sort_keys=False), output[0])


rule sweep_point:
    input:
        config=f"{ROOT}/{SPACE.wildcard_pattern}/config.yaml",
        after=previous_point,
    output:
        headline=f"{ROOT}/{SPACE.wildcard_pattern}/headline.parquet",
        summary=f"{ROOT}/{SPACE.wildcard_pattern}/summary.md",
    threads: config["cores"]
    log:
        f"{ROOT}/{SPACE.wildcard_pattern}/run.log",
    run:
        world = Path(WORLD)
        world.mkdir(parents=True, exist_ok=True)
        if not (world / "resources").exists():
            (world / "resources").symlink_to(Path("resources").resolve())
        # targets before --configfile, which takes every word after it as a file
        cmd = [sys.executable, "-m", "snakemake", *config["targets"], "-s", MAIN, "-d", str(world), "--profile",
               PROFILE, "--cores", str(threads), "--configfile", str(Path(input.config).resolve())]
        with open(log[0], "w") as fh:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                  env={**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")})
        if proc.returncode != 0:
            raise WorkflowError(f"the run at {wildcards} failed ({proc.returncode}); see {log[0]}")
        write_parquet(pd.read_parquet(world / "results/evaluation/headline.parquet"), output.headline)
        write_text((world / "results/evaluation/summary.md").read_text(), output.summary)


rule sweep_summary:
    input:
        points=expand(f"{ROOT}/{{point}}/headline.parquet", point=POINTS),
        configs=expand(f"{ROOT}/{{point}}/config.yaml", point=POINTS),
    output:
        table=f"{ROOT}/sweep.parquet",
        csv=f"{ROOT}/sweep.csv",
        markdown=f"{ROOT}/sweep.md",
        figure=f"{ROOT}/sweep.png",
    run:
        table = sweep_table({r: pd.read_parquet(p) for r, p in zip(EXPOSURES, input.points)})
        ev = evaluation_settings(input.configs[0])
        write_parquet(table, output.table)
        write_text(table.round(4).to_csv(index=False), output.csv)
        write_text("# Exposure sweep\n\n" + sweep_markdown(table, ev["level"]), output.markdown)
        with atomic_path(output.figure) as tmp:
            sweep_figure(table, ev["headline"], str(tmp), ev["level"])
