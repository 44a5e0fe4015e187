"""CalibDCD as workflow stages (``rules/calibdcd.smk``): partition, features, calibration of every variant.

The workflow's protocol, per (dataset, seed):

- **evaluation** texts: the seed's common split (``build_split``), the texts every method scores, so
  CalibDCD's scores join the one results table and are compared with the baselines on the same texts;
- **supervised** split and known non-members **D-cal**: :func:`mialab.data.families.calibdcd.calibdcd_partition`
  of the pool *without* the split's texts (their labels are dropped before anything reads a label).
  D-cal is therefore disjoint from the evaluation texts (the paper keeps it in the reporting pool).

Features (generation is the cost) are keyed by texts, not seeds: the original query ``e0`` runs on
every pool text once per (model, dataset), so any seed only selects rows; the ten controlled views
run on each seed's D-cal only (the only texts they are needed for). A feature job starts the rollout
engine once (e.g. one vLLM launch) and sends it all prompts of each sampling setting in one call
(DPDLLM samples at its own temperature and length, VeilProbe uses the ``generation`` section; equal
settings share one call); DPDLLM's features of all views are then computed in one reference-model
pass, the same features as :func:`mialab.calibdcd.extract.dpdllm_view_features`. DPDLLM's reference model is fine-tuned once per pool
(:func:`mialab.calibdcd.reference.finetune_reference`, rule ``calibdcd_reference``).

VeilProbe's prompts do not depend on the target: its query of each text (``veilprobe.query``: the whole
text, as its code, or the pool's prefix) and that query's key-token perturbation are made once per pool
(rule ``calibdcd_perturbation``, :func:`perturb_pool`; the code: once per dataset), and every target's
feature job reads them. The target samples ``veilprobe.continuations`` continuations of each (its mapping
script reads three per text).

VeilProbe's features come from its two mapping models (:mod:`mialab.calibdcd.mapping`), trained per
(target, pool) on the original query's (query, output) and (perturbed query, output) pairs of
every pool text, one pair per continuation (rule ``calibdcd_veilprobe``, :func:`veilprobe_tables`); the models then read the
queries of every scope (the original query on every text, the controlled views on D-cal). As in
VeilProbe's code the features read the query only (the target's outputs shape the mapping models),
so the target answers VeilProbe's prompts under the original query only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from mialab.calibdcd.calibrate import FitCache, run_calibdcd
from mialab.calibdcd.extract import add_perturbed_query, dpdllm_prompts, veilprobe_queries
from mialab.calibdcd.features import veilprobe_vector
from mialab.calibdcd.frames import feature_frame
from mialab.calibdcd.mapping import MappingConfig, mapping_features, train_mapping_model
from mialab.calibdcd.plan import UNCALIBRATED, score_column
from mialab.calibdcd.reference import reference_probabilities
from mialab.calibdcd.views import ORIGINAL, apply_view
from mialab.data.families.calibdcd import calibdcd_partition
from mialab.lm.tiny import bert_tokenizer

TEXT_COLUMNS = ("id", "text", "prefix", "suffix")


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
    """The ``id``, ``text``, ``prefix``, ``suffix`` of ``ids`` (default: every pool text); labels are not carried."""
    texts = pool[list(TEXT_COLUMNS)].astype({"id": str})
    if ids is None:
        return texts.reset_index(drop=True)
    wanted = pd.Index([str(i) for i in ids], name="id")   # named: before pandas 3.1 .loc names the index after the key
    missing = wanted.difference(texts["id"])
    if len(missing):
        raise ValueError(f"{len(missing)} id(s) not in the pool, e.g. {list(missing[:3])}")
    return texts.set_index("id").loc[wanted].reset_index()


#: texts per part of the original perturbation (a requeued job resumes from its parts)
PERTURBATION_PART_TEXTS = 32


def perturb_pool(texts: pd.DataFrame, options: Mapping, lm_options: Mapping, parts=None) -> pd.DataFrame:
    """``id, query, perturbed_query`` of every text (:func:`mialab.calibdcd.extract.add_perturbed_query` with
    ``options``, :func:`mialab.calibdcd.plan.perturbation_options`' keys). The original perturbation (attribution per text)
    runs :data:`PERTURBATION_PART_TEXTS` texts at a time through the folder ``parts`` (a
    :class:`mialab.lm.engine.Parts` folder, or None), equal to one pass; surprisal (one batched pass) at once."""
    def perturb(start: int, stop: int) -> pd.DataFrame:
        extra = {"first_index": start} if options.get("perturbation") == "original" else {}
        done = add_perturbed_query(texts.iloc[start:stop], **options, **extra, **lm_options)
        return done[["id", "query", "perturbed_query"]].reset_index(drop=True)

    if parts is None or options.get("perturbation") != "original":
        return perturb(0, len(texts))
    from mialab.lm.engine import Parts, fingerprint

    key = fingerprint({"options": dict(options), "lm": dict(lm_options), "ids": texts["id"].tolist(),
                       "queries": veilprobe_queries(texts, options["query"])})
    return Parts(parts).run(key, len(texts), PERTURBATION_PART_TEXTS, perturb)


#: the text columns a detector's prompts are built from (DPDLLM's: added by :func:`extract_features`;
#: VeilProbe's: :func:`perturb_pool`'s)
DETECTOR_INPUTS = {"dpdllm": ("dpdllm_prompt",), "veilprobe": ("query", "perturbed_query")}


def view_prompts(texts: pd.DataFrame, views: Sequence[str], detectors: Sequence[str]) -> pd.DataFrame:
    """``detector, view, id, input, text, prompt``: every input column a detector puts under a view
    (DPDLLM's prompt; VeilProbe's query and perturbed query) with its text, for every text and view."""
    rows = [(det, view, i, column, text, prompt) for det in detectors for view in views
            for column in DETECTOR_INPUTS[det]
            for i, text, prompt in zip(texts["id"], texts[column].astype(str),
                                       apply_view(view, texts[column].astype(str).tolist()), strict=True)]
    return pd.DataFrame(rows, columns=["detector", "view", "id", "input", "text", "prompt"])


def _frames(rows: pd.DataFrame, z: np.ndarray) -> pd.DataFrame:
    """Feature tables (one per view, concatenated) of ``rows`` (view, id) with features ``z``."""
    return pd.concat([feature_frame(rows.loc[mask, "id"].tolist(), view, z[mask.to_numpy()])
                      for view, mask in ((v, rows["view"] == v) for v in rows["view"].unique())], ignore_index=True)


def dpdllm_table(generations: pd.DataFrame, *, reference_model: str, length: int,
                 lm_options: Mapping) -> pd.DataFrame:
    """DPDLLM features of every (view, id) as :func:`mialab.calibdcd.extract.dpdllm_view_features` computes
    them (the reference model reads the text's DPDLLM prompt followed by the target's continuation of the
    view-wrapped prompt), in one reference-model pass."""
    rows = generations[generations["detector"] == "dpdllm"].reset_index(drop=True)
    z = reference_probabilities(reference_model, list(zip(rows["text"], rows["output"], strict=True)), length=length,
                                device=lm_options["device"], dtype=lm_options["dtype"])
    return _frames(rows, z)


@dataclass
class VeilProbeRun:
    """What one VeilProbe job writes: the feature tables of both scopes and the training logs."""

    original: pd.DataFrame      # id, view (original), z0000 ... of every pool text
    views: pd.DataFrame         # id, view, z0000 ... of D-cal under every controlled view
    logs: dict                  # input (query / perturbed_query) -> mapping-model training log


def veilprobe_tables(generations: pd.DataFrame, calibration_ids: Sequence[str], views: Sequence[str], *,
                     tokenizer: str, mapping: MappingConfig, folders: Mapping[str, str],
                     vocab_size: int | None = None, device: str = "cpu") -> VeilProbeRun:
    """Train VeilProbe's two mapping models on the original query's generations (every pool text, every
    continuation: one pair each, in the order of the generations) into ``folders[input]`` and compute the
    features of every pool text under the original query and of ``calibration_ids`` under ``views``.

    ``tokenizer``: the models' vocabulary (a folder); with ``vocab_size``, instead one vocabulary of that size
    trained on every text and output of both models' pairs (uncased, as bert-base-uncased:
    :func:`mialab.lm.tiny.bert_tokenizer`), no label read."""
    own = generations[(generations["detector"] == "veilprobe") & (generations["view"] == ORIGINAL)]
    pairs = {column: own[own["input"] == column] for column in DETECTOR_INPUTS["veilprobe"]}
    inputs = {column: rows.drop_duplicates("id").set_index("id") for column, rows in pairs.items()}
    query, perturbed = inputs["query"], inputs["perturbed_query"]
    if query.empty or not query.index.equals(perturbed.index):
        raise ValueError("VeilProbe needs the original query's query and perturbed-query generations of the same texts")
    if vocab_size is not None:
        tokenizer = bert_tokenizer([t for rows in pairs.values() for c in ("text", "output") for t in rows[c].astype(str)],
                                   vocab_size, lowercase=True)
    logs = {column: train_mapping_model(tokenizer, rows["text"].tolist(), rows["output"].tolist(), folders[column],
                                        config=mapping, device=device) for column, rows in pairs.items()}
    ids = query.index.tolist()
    missing = pd.Index([str(i) for i in calibration_ids]).difference(query.index)
    if len(missing):
        raise ValueError(f"{len(missing)} calibration id(s) have no original-query generation, e.g. {list(missing[:3])}")
    cal = list(dict.fromkeys(str(i) for i in calibration_ids))
    queries = [(ORIGINAL, ids)] + [(view, cal) for view in views]
    z = {}
    for column, rows in inputs.items():
        texts = [q for view, part in queries for q in apply_view(view, rows.loc[part, "text"].astype(str).tolist())]
        z[column] = mapping_features(folders[column], texts, device=device)
    vectors = veilprobe_vector(z["query"], z["perturbed_query"])
    frames, start = [], 0
    for view, part in queries:
        frames.append(feature_frame(part, view, vectors[start:start + len(part)]))
        start += len(part)
    return VeilProbeRun(frames[0], pd.concat(frames[1:], ignore_index=True), logs)


@dataclass
class FeatureRun:
    """What one feature job writes: a feature table per detector and the target's outputs."""

    features: dict[str, pd.DataFrame]     # dpdllm -> id, view, z0000 ...
    generations: pd.DataFrame             # detector, view, id, input, text, prompt, sample, output


def extract_features(texts: pd.DataFrame, views: Sequence[str], *, generate: Callable[..., list[str]],
                     detectors: Mapping[str, dict], lm_options: Mapping) -> FeatureRun:
    """The target's outputs on ``texts`` (id, text, prefix, suffix; VeilProbe: and ``query``,
    ``perturbed_query``, of :func:`perturb_pool`) under every view for every detector, and DPDLLM's
    features (VeilProbe's come from :func:`veilprobe_tables`).

    ``detectors`` maps ``dpdllm`` to ``{reference_model, length, prompt, max_new_tokens, temperature}`` (the
    fine-tuned reference folder; ``prompt``: :func:`mialab.calibdcd.extract.dpdllm_prompts`) and
    ``veilprobe`` to ``{max_new_tokens, temperature, continuations}``; ``lm_options``
    (batch_size, device, dtype) go to the reference model's passes. ``generate(prompts, max_new_tokens=,
    temperature=, n=)`` returns ``n`` continuations of each prompt (prompt-major; ``n``: the detector's
    ``continuations``, 1 where it names none) and is called once per distinct sampling setting, with its
    distinct prompts, shortest first (batches of similar length pad less). The generations hold one row per
    continuation, numbered in ``sample``.
    """
    unknown = set(detectors) - set(DETECTOR_INPUTS)
    if unknown:
        raise KeyError(f"unknown detector(s) {sorted(unknown)}; known: {sorted(DETECTOR_INPUTS)}")
    if "veilprobe" in detectors and not {"query", "perturbed_query"} <= set(texts.columns):
        raise ValueError("VeilProbe's prompts need the texts' query and perturbed_query (rule calibdcd_perturbation)")
    if "dpdllm" in detectors:
        dp = detectors["dpdllm"]
        texts = texts.assign(dpdllm_prompt=dpdllm_prompts(texts, length=dp["length"], prompt=dp["prompt"]))
    generations = view_prompts(texts, views, list(detectors))
    settings = {det: (spec["max_new_tokens"], spec["temperature"], spec.get("continuations", 1))
                for det, spec in detectors.items()}
    outputs = {}
    for setting in dict.fromkeys(settings.values()):
        max_new_tokens, temperature, n = setting
        rows = generations["detector"].map(settings) == setting
        prompts = sorted(set(generations.loc[rows, "prompt"]), key=lambda p: (len(p), p))
        got = generate(prompts, max_new_tokens=max_new_tokens, temperature=temperature, n=n)
        if len(got) != n * len(prompts) or not all(isinstance(o, str) for o in got):
            raise ValueError(f"generate returned {len(got)} outputs for {len(prompts)} prompts x {n} continuations "
                             "(strings expected)")
        outputs[setting] = {p: got[i * n:(i + 1) * n] for i, p in enumerate(prompts)}
    samples = [outputs[settings[d]][p] for d, p in zip(generations["detector"], generations["prompt"])]
    generations = generations.loc[generations.index.repeat([len(s) for s in samples])].reset_index(drop=True)
    generations["sample"] = [i for s in samples for i in range(len(s))]
    generations["output"] = [o for s in samples for o in s]
    features = {}
    if "dpdllm" in detectors:
        features["dpdllm"] = dpdllm_table(generations, reference_model=dp["reference_model"],
                                          length=dp["length"], lm_options=lm_options)
    return FeatureRun(features, generations)


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
    scores = pd.DataFrame({"id": first["id"], score_column(detector, UNCALIBRATED): first["score_original"]})
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


def calibrate_detectors(features: Iterable[tuple[pd.DataFrame, pd.DataFrame]], seeds: Sequence[Mapping], *,
                        detectors: Sequence[str],
                        spec: Mapping) -> Iterator[tuple[str, int, CalibrationRun, pd.DataFrame]]:
    """Rule ``calibdcd_calibrate``: :func:`calibrate_variants` for every detector and seed, detector-major (the
    rule's output order), each with its score table labelled by :func:`attach_labels` once every score is fixed.

    ``features``: each detector's (original, controlled-view) feature tables; ``seeds``: per seed its
    ``seed``, ``supervised`` table, ``calibration`` and ``evaluation`` ids and ``split`` (id, label).
    """
    for detector, (original, views) in zip(detectors, features, strict=True):
        for s in seeds:
            run = calibrate_variants(original, views, s["supervised"], s["calibration"], s["evaluation"],
                                     detector=detector, variants=spec["variants"], tau=spec["tau"],
                                     tolerance=spec["tolerance"], seed=s["seed"])
            yield detector, s["seed"], run, attach_labels(run.scores, s["split"])
