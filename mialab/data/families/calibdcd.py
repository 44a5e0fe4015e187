"""CalibDCD splits (calibdcd paper, section 5.1 and Table 1) of an arXivTection, BookTection,
BookMIA or WikiMIA pool.

The paper's protocol:

- ``train``: a supervised training split for the feature-based detector, 100 texts = 50 members +
  50 non-members (``n_train_per_class``, default 50);
- ``evaluate``: the reporting pool, every other text (e.g. WikiMIA length 64: 542 - 100 = 442,
  234 members / 208 non-members; arXivTection: 1548 - 100 = 1448, 712 / 736);
- ``calibration``: known non-members for Multi-View Shift Detection, drawn from the reporting pool
  and disjoint from ``train``. The paper keeps them in the reporting pool ("the calibration
  examples remain in the reporting pool"; ``calibration_in_evaluation: true``, the default) and
  does not state how many it uses: ``n_calibration`` defaults to 100 (our choice). With
  ``calibration_in_evaluation: false`` they are removed from ``evaluate`` instead.

Seeded: the training split is :func:`mialab.data.sampling.sample_split` block ``seed`` (so seeds
0, 1, ... give disjoint training splits while the pool allows), the calibration draw uses
``(base_seed, seed)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mialab.data.sampling import sample_split
from mialab.data.schema import validate_split


def calibdcd_partition(pool: pd.DataFrame, *, seed: int = 0, n_train_per_class: int = 50,
                       n_calibration: int = 100, calibration_in_evaluation: bool = True,
                       base_seed: int = 0, name: str = "pool") -> dict[str, pd.DataFrame]:
    """Split ``pool`` into ``train``, ``calibration`` (known non-members) and ``evaluate``."""
    pool = validate_split(pool, name=name)
    train = sample_split(pool, n_train_per_class, seed, keep_pairs=False, base_seed=base_seed, name=name)
    evaluate = pool[~pool["id"].isin(train["id"])].sort_values(["label", "id"], ascending=[False, True])
    known = evaluate.loc[evaluate["label"] == 0, "id"].to_numpy()
    if len(known) < n_calibration:
        raise ValueError(f"{name}: {n_calibration} calibration non-members asked, only {len(known)} outside "
                         "the training split")
    rng = np.random.default_rng([base_seed, 3, seed])
    chosen = known[np.sort(rng.choice(len(known), size=n_calibration, replace=False))]
    calibration = evaluate[evaluate["id"].isin(chosen)]
    if not calibration_in_evaluation:
        evaluate = evaluate[~evaluate["id"].isin(chosen)]
    return {
        "train": train,
        "calibration": calibration.reset_index(drop=True),
        "evaluate": validate_split(evaluate.reset_index(drop=True), name=f"{name} evaluation pool"),
    }
