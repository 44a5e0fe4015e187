"""Regenerate the settings references of the paper experiments (docs/fidelity/; the format:
docs/fidelity/README.md), their summary in docs/fidelity.md and the paper configs' ``# Fidelity`` header lines.

    LARA_CODE=<checkout> python benchmarks/fidelity_reference.py
        reads the released code (a local checkout of github talzoomanzoo/rl-data-contamination-mj, never copied
        here): every setting's value and file:line, then what the paper config's jobs receive;
    python benchmarks/fidelity_reference.py
        without LARA_CODE: the committed references' project side, refreshed from the config (after a change);
    --check: write nothing; exit 1 naming each file that would change (tests/test_fidelity_reference.py).

An unexplained difference (a setting that differs without a reason in the spec, mialab/lara/fidelity.py) or a
stale reason stops it, naming the setting.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mialab.core.paths import REPO
from mialab.lara import fidelity as lara
from mialab.pipeline.fidelity import dump, header_line, replace_block, replace_header_line, summary


def outputs(checkout: Path | None) -> dict[Path, str]:
    """Every file this writes and its new text."""
    docs = lara.documents(checkout)
    out = {lara.document_path(name): dump(doc) for name, doc in docs.items()}
    table = REPO / "docs" / "fidelity.md"
    out[table] = replace_block(table.read_text(), "lara", summary(docs))
    config = REPO / lara.CONFIG
    out[config] = replace_header_line(config.read_text(), header_line(docs))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 where a file would change")
    args = ap.parse_args(argv)
    checkout = os.environ.get(lara.CODE_ENV)
    changed = []
    for path, text in outputs(Path(checkout) if checkout else None).items():
        if not path.exists() or path.read_text() != text:
            changed.append(str(path.relative_to(REPO)))
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    print(("would change: " if args.check else "wrote: ") + (", ".join(changed) or "nothing"))
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
