"""Regenerate the generated blocks of the documentation from finished runs: README.md's results table (the
headline table of results/evaluation/headline.parquet) and docs/sweep.md's exposure sweep (its figure,
copied to docs/figures/, and each method's onset).

    python scripts/readme_results.py [--workdir .] [--sweep DIR] [--readme README.md] [--sweep-doc docs/sweep.md] [--check]

Each block sits between two marker comments: README.md's `results:begin` / `results:end`, docs/sweep.md's
`sweep:begin` / `sweep:end`. Without a sweep run (neither --sweep nor one in --workdir) docs/sweep.md is left
as it is. --check changes nothing and exits 1 when a block differs from the runs'.
"""

import argparse
import os
import re
import shutil
import sys
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mialab.core.io import write_text  # noqa: E402
from mialab.data.registry import config_schema  # noqa: E402
from mialab.evaluation.readme import replace_section, results_section, sweep_onsets  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIGURE = "docs/figures/sweep_exposure.png"  # relative to the README's folder
SWEEP_BEGIN, SWEEP_END = "<!-- sweep:begin (scripts/readme_results.py) -->", "<!-- sweep:end -->"


def sweep_section(table: pd.DataFrame | None, baseline: str, figure: str) -> str:
    """The markdown between docs/sweep.md's markers: the sweep's figure and, where its table is given, the onsets."""
    text = [SWEEP_BEGIN, "",
            f"Exposure sweep (`configs/sweep_exposure.yaml`, one seed): AUROC against how often the members were "
            f"seen; r = 0 is the no-members control. onset: the first r whose 95% interval lies above 50%; beats "
            f"baseline: Δ > 0 against `{baseline}` at paired p < 0.05 (`results/sweep/exposure/sweep.md` has every r).",
            "", f"![exposure sweep]({figure})", ""]
    if table is not None and len(table):
        text += [sweep_onsets(table)]
    return "\n".join(text + [SWEEP_END])


def replace_sweep(doc: str, section: str, where: Path) -> str:
    """``doc`` with its sweep block (markers included) replaced by ``section``; an error without the markers."""
    pattern = re.compile(re.escape(SWEEP_BEGIN) + r".*?" + re.escape(SWEEP_END), re.S)
    if not pattern.search(doc):
        raise ValueError(f"{where} has no sweep section: add the two lines {SWEEP_BEGIN!r} and {SWEEP_END!r} where it goes")
    return pattern.sub(lambda _: section, doc, count=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=".", help="the working directory of the finished run (holds results/)")
    ap.add_argument("--sweep", help="the working directory of a finished exposure sweep (default: --workdir)")
    ap.add_argument("--readme", default=str(REPO / "README.md"))
    ap.add_argument("--sweep-doc", help="the page with the sweep's block (default: docs/sweep.md beside the README)")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    work = Path(args.workdir)
    headline_path = work / "results/evaluation/headline.parquet"
    if not headline_path.is_file():
        sys.exit(f"{headline_path}: no headline table; run the workflow first (snakemake --profile profiles/local)")
    props = config_schema()["properties"]["evaluation"]["properties"]
    run = yaml.safe_load((work / "config.yaml").read_text()) if (work / "config.yaml").is_file() else None
    if not run or "seeds" not in run:
        sys.exit(f"{work / 'config.yaml'}: the run's config, with its seeds, is needed beside results/")
    cfg = run.get("evaluation", {})
    targets = cfg.get("fpr_targets", props["fpr_targets"]["default"])
    baseline = cfg.get("baseline", props["baseline"]["default"])
    readme = Path(args.readme)
    updates = {readme: replace_section(readme.read_text(), results_section(pd.read_parquet(headline_path), targets,
                                                                            baseline, len(run["seeds"])))}
    sweep_dir = Path(args.sweep or work) / "results/sweep/exposure"
    sweep = sweep_dir / "sweep.png"
    if sweep.is_file():
        doc = Path(args.sweep_doc) if args.sweep_doc else readme.parent / "docs/sweep.md"
        table = pd.read_parquet(sweep_dir / "sweep.parquet") if (sweep_dir / "sweep.parquet").is_file() else None
        figure = os.path.relpath(readme.parent / FIGURE, doc.parent)
        updates[doc] = replace_sweep(doc.read_text() if doc.is_file() else "", sweep_section(table, baseline, figure), doc)
    stale = [path for path, new in updates.items() if new != path.read_text()]
    if args.check:
        for path in updates:
            print(f"{path}: generated section {'differs from the run' if path in stale else 'is up to date'}")
        return 1 if stale else 0
    if sweep.is_file():
        (readme.parent / FIGURE).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sweep, readme.parent / FIGURE)
    for path in stale:
        write_text(updates[path], path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
