"""Regenerate the settings references of the paper experiments (docs/fidelity/; the format:
docs/fidelity/README.md), their summaries in docs/fidelity.md and the paper configs' ``# Fidelity`` header lines.

    LARA_CODE=<checkout> MIA_RL_CODE=<checkout> DPDLLM_CODE=<checkout> VEILPROBE_CODE=<checkout> \
        python benchmarks/fidelity_reference.py
        reads the released code of each method whose variable names a local checkout (never copied here:
        github talzoomanzoo/rl-data-contamination-mj for LaRA, oseyosey/MIA-RL for ADRA, ZovanZhou/DPDLLM and
        STAIR-BUPT/VeilProbe for the two detectors CalibDCD calibrates): every setting's value and file:line, then
        what the paper configs' jobs receive; a method (a detector) without a checkout keeps its committed
        references, their project side refreshed from the configs;
    --check: write nothing; exit 1 naming each file that would change (tests/test_fidelity_reference.py).

An unexplained difference (a setting that differs without a reason in the method's spec, mialab/<method>/fidelity.py)
or a stale reason stops it, naming the setting.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mialab.adra import fidelity as adra
from mialab.calibdcd import fidelity as calibdcd
from mialab.core.paths import REPO
from mialab.lara import fidelity as lara
from mialab.pipeline.fidelity import code_checkout, dump, header_line, replace_block, replace_header_line, summary

#: each method's spec module and its tag in docs/fidelity.md
METHODS = {"lara": lara, "adra": adra, "calibdcd": calibdcd}


def outputs(checkouts: dict[str, Path | dict[str, Path] | None] | None = None) -> dict[Path, str]:
    """Every file this writes and its new text (``checkouts``: a method's local checkout of its released code, or,
    for CalibDCD, each detector's: ``mialab.pipeline.fidelity.code_checkout``)."""
    checkouts = checkouts or {}
    table = REPO / "docs" / "fidelity.md"
    text = table.read_text()
    out: dict[Path, str] = {}
    for tag, method in METHODS.items():
        docs = method.documents(checkouts.get(tag))
        out |= {method.document_path(name): dump(doc) for name, doc in docs.items()}
        text = replace_block(text, tag, summary(docs))
        for config in dict.fromkeys(d["config"] for d in docs.values()):
            path = REPO / config
            mine = {n: d for n, d in docs.items() if d["config"] == config}
            out[path] = replace_header_line(out.get(path, path.read_text()), header_line(mine))
    out[table] = text
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 where a file would change")
    args = ap.parse_args(argv)
    checkouts = {tag: code_checkout(m.CODE_ENV, os.environ) for tag, m in METHODS.items()}
    changed = []
    for path, text in outputs(checkouts).items():
        if not path.exists() or path.read_text() != text:
            changed.append(str(path.relative_to(REPO)))
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    print(("would change: " if args.check else "wrote: ") + (", ".join(changed) or "nothing"))
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
