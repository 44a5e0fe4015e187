"""Checks of a training mixture: a contaminated model must also see text that is not a member."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def check_filler(model: str, filler: list[str], members: list[str]) -> None:
    """An empty filler is an error; a filler with fewer words than the member documents a warning
    (the model would train mostly on members). Both name config key ``models.<model>``."""
    if not filler or not any(doc.strip() for doc in filler):
        raise ValueError(f"models.{model}.filler: the filler holds no text (after filler_fraction and any "
                         "filtering), so the model would train on its members only")
    n_filler, n_members = sum(len(d.split()) for d in filler), sum(len(d.split()) for d in members)
    if n_filler < n_members:
        log.warning("models.%s: the filler has %d words, fewer than the %d words of member documents: the model "
                    "trains mostly on members (raise filler_fraction or use a larger filler)", model, n_filler,
                    n_members)
