"""Regenerate README.md's results section from a finished run: the headline table of
results/evaluation/headline.parquet and the exposure sweep's figure (copied to docs/figures/ beside
the README) with each method's onset.

    python scripts/readme_results.py [--workdir .] [--sweep DIR] [--readme README.md] [--check]

--check changes nothing and exits 1 when the README's section differs from the run's.
"""

import argparse
import shutil
import sys
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mialab.core.io import write_text  # noqa: E402
from mialab.evaluation.readme import replace_section, results_section  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIGURE = "docs/figures/sweep_exposure.png"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=".", help="the working directory of the finished run (holds results/)")
    ap.add_argument("--sweep", help="the working directory of a finished exposure sweep (default: --workdir)")
    ap.add_argument("--readme", default=str(REPO / "README.md"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    work = Path(args.workdir)
    headline_path = work / "results/evaluation/headline.parquet"
    if not headline_path.is_file():
        sys.exit(f"{headline_path}: no headline table; run the workflow first (snakemake --profile profiles/local)")
    props = yaml.safe_load((REPO / "schemas/config.schema.yaml").read_text())["properties"]["evaluation"]["properties"]
    cfg = yaml.safe_load((work / "config.yaml").read_text()).get("evaluation", {}) if (work / "config.yaml").is_file() else {}
    targets = cfg.get("fpr_targets", props["fpr_targets"]["default"])
    baseline = cfg.get("baseline", props["baseline"]["default"])
    sweep_dir = Path(args.sweep or work) / "results/sweep/exposure"
    sweep = sweep_dir / "sweep.png"
    table = pd.read_parquet(sweep_dir / "sweep.parquet") if sweep.is_file() else None
    section = results_section(pd.read_parquet(headline_path), targets, baseline, FIGURE if sweep.is_file() else None, table)
    readme = Path(args.readme)
    new = replace_section(readme.read_text(), section)
    if args.check:
        same = new == readme.read_text()
        print("README results section is up to date" if same else "README results section differs from the run")
        return 0 if same else 1
    if sweep.is_file():
        (readme.parent / FIGURE).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sweep, readme.parent / FIGURE)
    write_text(new, readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
