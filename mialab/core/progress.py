"""Progress bars for long loops (training, scoring, generation), written to stderr with ``rich``.

In a Snakemake job stderr goes to the rule's log file; ``rich`` then prints plain lines.
"""

from __future__ import annotations

import sys
from typing import Iterable, Iterator, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")

console = Console(file=sys.stderr)


def progress() -> Progress:
    """A ``rich`` progress display with count, elapsed and remaining time."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console,
                    refresh_per_second=2, transient=False)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate ``items`` with a progress bar."""
    with progress() as prog:
        task = prog.add_task(description, total=total if total is not None else len(items))  # type: ignore[arg-type]
        for item in items:
            yield item
            prog.advance(task)
