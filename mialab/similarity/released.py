"""The released ADRA code's reward functions, loaded from a local copy to compare against (never vendored).

``MIA_RL_CODE`` (or the ``path`` argument) names the root of a checkout of the MIA-RL repository
(github.com/oseyosey/MIA-RL); its ``verl/verl/utils/reward_score/lexical.py`` and
``adra/utils_rl/ngram_coverage.py`` are imported from there. Used only by tests and
``benchmarks/bench_reconstruction.py``, which skip when no copy is named.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

ENV = "MIA_RL_CODE"
LEXICAL = Path("verl/verl/utils/reward_score/lexical.py")
NGRAM = Path("adra/utils_rl/ngram_coverage.py")


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def released_code(path: str | os.PathLike | None = None) -> types.SimpleNamespace | None:
    """(``lexical``, ``ngram_coverage``) modules of the released code, or None when no copy is named or found."""
    root = Path(path or os.environ.get(ENV, "") or "/nonexistent")
    if not ((root / LEXICAL).is_file() and (root / NGRAM).is_file()):
        return None
    for package in ("adra", "adra.utils_rl"):  # lexical.py imports adra.utils_rl.ngram_coverage
        sys.modules.setdefault(package, types.ModuleType(package)).__path__ = []
    ngram = _load("adra.utils_rl.ngram_coverage", root / NGRAM)
    lexical = _load("mia_rl_released_lexical", root / LEXICAL)
    return types.SimpleNamespace(lexical=lexical, ngram_coverage=ngram)


def code_profile(metric: str, tau: float) -> dict:
    """The code's metric profile of an ADRA reward (``trio``: trio_v3_unique, ``ngram``: unique_ngram_coverage_ref)."""
    metrics = {"trio": ["lexical_token_overlap_ref", "lexical_lcs_ratio", "lexical_unique_ngram_coverage_ref"],
               "ngram": ["lexical_unique_ngram_coverage_ref"]}[metric]
    return {"metrics": metrics, "weights": [1.0] * len(metrics), "length_penalty_type": "ratio",
            "length_threshold": float(tau)}


def code_rewards(code: types.SimpleNamespace, metric: str, candidates, references, *, tau: float,
                 dynamic: bool) -> list[float]:
    """The code's reward of every pair (its ``_compute_score_single``), dynamic n-gram range or fixed [3, 30]."""
    profile = code_profile(metric, tau)
    old = os.environ.get("ADRA_USE_DYNAMIC_MAX_NGRAM")
    os.environ["ADRA_USE_DYNAMIC_MAX_NGRAM"] = "true" if dynamic else ""
    try:
        return [code.lexical._compute_score_single(r, c, profile) for c, r in zip(candidates, references)]
    finally:
        if old is None:
            os.environ.pop("ADRA_USE_DYNAMIC_MAX_NGRAM")
        else:
            os.environ["ADRA_USE_DYNAMIC_MAX_NGRAM"] = old
