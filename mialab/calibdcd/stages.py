"""CalibDCD as workflow stages (``rules/calibdcd.smk``): partition, features, calibration of every variant.

The workflow's protocol, per (dataset, seed):

- **evaluation** texts: the seed's common split (``build_split``), the texts every method scores, so
  CalibDCD's scores join the one results table and are compared with the baselines on the same texts;
- **supervised** split and known non-members **D-cal**: :func:`mialab.data.families.calibdcd.calibdcd_partition`
  of the pool *without* the split's texts (their labels are dropped before anything reads a label).
  D-cal is therefore disjoint from the evaluation texts (the paper keeps it in the reporting pool).

Features (generation is the cost) are keyed by texts, not seeds: the original query ``e0`` runs on
every pool text once per (model, dataset), so any seed only selects rows; the ten controlled views
run on each seed's D-cal only (the only texts they are needed for). All prompts of a feature job go
to the rollout engine in one call (one engine start, e.g. one vLLM launch); each detector's features
of all views are then computed in one pass (one reference-model load, one deduplicated embedding
call), the same features as the per-view entries of :mod:`mialab.calibdcd.extract`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from mialab.calibdcd.calibrate import FitCache, run_calibdcd
from mialab.calibdcd.extract import add_perturbed_prefix
from mialab.calibdcd.features import dpdllm_features, veilprobe_features
from mialab.calibdcd.frames import feature_frame
from mialab.calibdcd.lm import continuation_logprobs
from mialab.calibdcd.views import ORIGINAL, apply_view
from mialab.data.families.calibdcd import calibdcd_partition
from mialab.embeddings import encode

TEXT_COLUMNS = ("id", "prefix", "suffix")


def partition_around_split(pool: pd.DataFrame, split_ids: Sequence[str], *, seed: int, n_train_per_class: int,
                           n_calibration: int, name: str = "pool") -> dict[str, pd.DataFrame]:
    """``supervised`` (id, label), ``calibration`` (id) and ``evaluation`` (id) of one seed.

    The split's rows are removed from the pool first, so neither the supervised split nor D-cal
    can contain an evaluation text and no evaluation label is read.
    """
    split_ids = pd.Index(pd.unique(pd.Series(split_ids, dtype=str)))
    missing = split_ids.difference(pool["id"].astype(str))
    if len(missing):
        raise ValueError(f"{name}: {len(missing)} split id(s) not in the pool, e.g. {list(missing[:3])}")
    rest = pool[~pool["id"].astype(str).isin(split_ids)].reset_index(drop=True)
    parts = calibdcd_partition(rest, seed=seed, n_train_per_class=n_train_per_class, n_calibration=n_calibration,
                               calibration_in_evaluation=False, name=f"{name} without the evaluation split")
    return {"supervised": parts["train"][["id", "label"]].reset_index(drop=True),
            "calibration": parts["calibration"][["id"]].reset_index(drop=True),
            "evaluation": pd.DataFrame({"id": sorted(split_ids)})}


def scope_texts(pool: pd.DataFrame, ids: Sequence[str] | None = None) -> pd.DataFrame:
    """The ``id``, ``prefix``, ``suffix`` of ``ids`` (default: every pool text); labels are not carried."""
    texts = pool[list(TEXT_COLUMNS)].astype({"id": str})
    if ids is None:
        return texts.reset_index(drop=True)
    wanted = pd.Index([str(i) for i in ids])
    missing = wanted.difference(texts["id"])
    if len(missing):
        raise ValueError(f"{len(missing)} id(s) not in the pool, e.g. {list(missing[:3])}")
    return texts.set_index("id").loc[wanted].reset_index()


def query_inputs(detectors: Sequence[str]) -> list[str]:
    """Text columns the detectors put under a view: the prefix, and VeilProbe's perturbed prefix."""
    return ["prefix", "perturbed_prefix"] if "veilprobe" in detectors else ["prefix"]


def view_prompts(texts: pd.DataFrame, views: Sequence[str], inputs: Sequence[str]) -> pd.DataFrame:
    """``view, id, input, prompt``: every input column of every text under every view."""
    rows = [(view, i, column, prompt) for view in views for column in inputs
            for i, prompt in zip(texts["id"], apply_view(view, texts[column].astype(str).tolist()), strict=True)]
    return pd.DataFrame(rows, columns=["view", "id", "input", "prompt"])


def deduplicated(encode: Callable[[list[str]], np.ndarray]) -> Callable[[list[str]], np.ndarray]:
    """``encode`` that embeds each distinct text once (prefixes and suffixes recur in every view, and
    small models repeat outputs), returning one row per input text."""
    def run(texts: list[str]) -> np.ndarray:
        unique, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
        return encode([str(t) for t in unique])[inverse]
    return run


def _frames(rows: pd.DataFrame, z: np.ndarray) -> pd.DataFrame:
    """Feature tables (one per view, concatenated) of ``rows`` (view, id) with features ``z``."""
    return pd.concat([feature_frame(rows.loc[mask, "id"].tolist(), view, z[mask.to_numpy()])
                      for view, mask in ((v, rows["view"] == v) for v in rows["view"].unique())], ignore_index=True)


def dpdllm_table(texts: pd.DataFrame, generations: pd.DataFrame, *, reference_model: str, length: int,
                 lm_options: Mapping) -> pd.DataFrame:
    """DPDLLM features of every (view, id) as :func:`mialab.calibdcd.extract.dpdllm_view_features` computes
    them (the reference LM scores the continuation of the view-wrapped prefix given the plain prefix),
    in one reference-model pass."""
    rows = generations[generations["input"] == "prefix"].reset_index(drop=True)
    prefixes = texts.set_index("id").loc[rows["id"], "prefix"].astype(str).tolist()
    logprobs = continuation_logprobs(reference_model, prefixes, rows["output"].tolist(), **lm_options)
    return _frames(rows, dpdllm_features(logprobs, length))


def veilprobe_table(texts: pd.DataFrame, generations: pd.DataFrame, *, embedding_model: str,
                    embedding_dtype: str = "float32") -> pd.DataFrame:
    """VeilProbe features of every (view, id) as :func:`mialab.calibdcd.extract.veilprobe_view_features`
    computes them, with one deduplicated embedding pass."""
    plain = generations[generations["input"] == "prefix"].reset_index(drop=True)
    perturbed = generations[generations["input"] == "perturbed_prefix"].reset_index(drop=True)
    if not plain[["view", "id"]].equals(perturbed[["view", "id"]]):
        raise ValueError("prefix and perturbed-prefix generations do not align")
    t = texts.set_index("id").loc[plain["id"]]
    z = veilprobe_features(t["prefix"].astype(str).tolist(), t["perturbed_prefix"].astype(str).tolist(),
                           t["suffix"].astype(str).tolist(), plain["output"].tolist(), perturbed["output"].tolist(),
                           deduplicated(lambda batch: encode(batch, model=embedding_model, dtype=embedding_dtype)))
    return _frames(plain, z)


@dataclass
class FeatureRun:
    """What one feature job writes: a feature table per detector and the target's outputs."""

    features: dict[str, pd.DataFrame]     # detector -> id, view, z0000 ...
    generations: pd.DataFrame             # view, id, input, prompt, output


def extract_features(texts: pd.DataFrame, views: Sequence[str], *, generate: Callable[[list[str]], list[str]],
                     detectors: Mapping[str, dict], lm_options: Mapping) -> FeatureRun:
    """Features of ``texts`` (id, prefix, suffix) under every view for every detector.

    ``detectors`` maps ``dpdllm`` to ``{reference_model, length}`` and ``veilprobe`` to
    ``{key_token_model, ratio, embedding_model, embedding_dtype}`` (model paths); ``lm_options`` (batch_size, device,
    dtype) go to the reference / key-token LM passes. ``generate`` is called once, with every
    distinct prompt, shortest first (batches of similar length pad less).
    """
    unknown = set(detectors) - {"dpdllm", "veilprobe"}
    if unknown:
        raise KeyError(f"unknown detector(s) {sorted(unknown)}; known: ['dpdllm', 'veilprobe']")
    if "veilprobe" in detectors:
        vp = detectors["veilprobe"]
        texts = add_perturbed_prefix(texts, key_token_model=vp["key_token_model"], ratio=vp["ratio"], **lm_options)
    generations = view_prompts(texts, views, query_inputs(list(detectors)))
    prompts = sorted(set(generations["prompt"]), key=lambda p: (len(p), p))
    outputs = generate(prompts)
    if len(outputs) != len(prompts) or not all(isinstance(o, str) for o in outputs):
        raise ValueError(f"generate returned {len(outputs)} outputs for {len(prompts)} prompts (strings expected)")
    generations["output"] = generations["prompt"].map(dict(zip(prompts, outputs, strict=True)))
    features = {}
    if "dpdllm" in detectors:
        dp = detectors["dpdllm"]
        features["dpdllm"] = dpdllm_table(texts, generations, reference_model=dp["reference_model"],
                                          length=dp["length"], lm_options=lm_options)
    if "veilprobe" in detectors:
        vp = detectors["veilprobe"]
        features["veilprobe"] = veilprobe_table(texts, generations, embedding_model=vp["embedding_model"],
                                                embedding_dtype=vp.get("embedding_dtype", "float32"))
    return FeatureRun(features, generations)


def score_column(detector: str, variant: str) -> str:
    """Results-table name of a CalibDCD score: ``calibdcd/<detector>/<variant>`` (``original``: uncalibrated)."""
    return f"calibdcd/{detector}/{variant}"


@dataclass
class CalibrationRun:
    """What one calibration job writes (no evaluation label anywhere)."""

    scores: pd.DataFrame        # id, calibdcd/<detector>/original, calibdcd/<detector>/<variant> ...
    views: pd.DataFrame         # variant, view, fpp, kept
    objective: pd.DataFrame     # variant, rank, lam, basis_dim, J, selected
    summaries: dict[str, dict]  # variant -> run summary (kept views, r, lambda, recovery)


def _rows(frame: pd.DataFrame, ids: Sequence[str], views: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows of a feature table for ``ids`` (and ``views`` when given)."""
    keep = frame["id"].astype(str).isin([str(i) for i in ids])
    if views is not None:
        keep &= frame["view"].isin(views)
    return frame[keep]


def calibrate_variants(original: pd.DataFrame, controlled: pd.DataFrame, supervised: pd.DataFrame,
                       calibration_ids: Sequence[str], evaluation_ids: Sequence[str], *, detector: str,
                       variants: Sequence[str], tau: float, tolerance: float, seed: int) -> CalibrationRun:
    """Calibrate ``detector`` with every variant and score the evaluation texts under ``e0``.

    ``original``: feature table of the original query (covering supervised, D-cal and evaluation
    ids); ``controlled``: D-cal's controlled-view features; ``supervised``: id, label. Only the
    supervised labels are read.
    """
    if not variants:
        raise ValueError("no CalibDCD variant to run")
    sup = _rows(original, supervised["id"], [ORIGINAL])
    cal = pd.concat([_rows(original, calibration_ids, [ORIGINAL]), _rows(controlled, calibration_ids)],
                    ignore_index=True)
    pool = _rows(original, evaluation_ids, [ORIGINAL])
    fits = FitCache()  # the variants share the original classifier (and identity corrections their retrained one)
    runs = {v: run_calibdcd(sup, supervised[["id", "label"]], cal, pool, detector=detector, variant=v, tau=tau,
                            tolerance=tolerance, seed=seed, fits=fits) for v in variants}
    first = runs[variants[0]].scores
    scores = pd.DataFrame({"id": first["id"], score_column(detector, "original"): first["score_original"]})
    for v, run in runs.items():                   # every run scored the same pool rows in the same order
        scores[score_column(detector, v)] = run.scores["score_calibrated"].to_numpy()
    return CalibrationRun(
        scores=scores,
        views=pd.concat([r.views.assign(variant=v) for v, r in runs.items()], ignore_index=True),
        objective=pd.concat([r.objective.assign(variant=v) for v, r in runs.items()], ignore_index=True),
        summaries={v: r.summary for v, r in runs.items()})


def attach_labels(scores: pd.DataFrame, split: pd.DataFrame) -> pd.DataFrame:
    """The score table with the split's ``label`` (for the evaluation, after every score is fixed)."""
    labels = split[["id", "label"]].astype({"id": str})
    if set(labels["id"]) != set(scores["id"].astype(str)):
        raise ValueError("the scores cover other ids than the split")
    out = scores.astype({"id": str}).merge(labels, on="id", how="left", validate="one_to_one")
    return out[["id", "label", *[c for c in scores.columns if c != "id"]]]
