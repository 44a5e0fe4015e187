"""LaRA as workflow stages (``rules/lara.smk``): perturbations, features, baselines, scores.

The protocol, per (dataset, seed):

- **evaluated** questions: the seed's common split (the texts every method scores, so LaRA joins
  the results table on the same ids). A question is the split row's question
  (:func:`mialab.data.rl_corpus.pool_questions`: the request of a request + response pool, or the text).
- **known non-members**: the pool's label-0 rows outside the split (chosen by id: the split's
  labels are never read). They are the neighbour pool of the retrieval backend (a question's
  structural controls must be unseen) and, a seeded sample of ``n_reference`` of them, the clean
  reference set the detection score is standardised on.

Stages:

- perturbations (dataset, seed; model-free): :func:`mialab.lara.construction.build_perturbations`
  of the evaluated and the reference questions, with a column ``set`` (``evaluated`` / ``reference``);
- features (model, dataset; every seed): each distinct text of the seeds' tables is read once
  (neighbours are shared between questions and seeds: several times fewer forward passes); the
  stage's ``index.parquet`` lists them;
- baselines (model, dataset; a table per seed): ReCaLL (prefix: the seed's reference questions) and
  the LaRA code's output-level baselines (CDD, Self-Critique, ``recall_lara_code``, ``ppl_response``,
  ``min_k_response``, ``min_k_plus_plus_response``, DIME) on the evaluated questions, each distinct
  question answered once;
- scores (model, dataset; a table per seed): RSM / DC / RSI per layer, the detection score and its
  ablations, LaRA + Self-Critique for every beta; the split's labels are attached last, so no
  score depends on them. Opt-in ``lara.detection.reference: in_set`` instead standardises on the
  split's label-0 questions, the released code's default: those columns are ``lara_in_set...``
  (they use the evaluation labels; on null data they score above chance).

Score columns (higher = member): ``lara``, ``lara/<metric>`` (one metric), ``lara/no_<metric>``,
``lara/early|mid|late`` (9:9:10 layer runs), ``lara/recall`` (ReCaLL), ``lara/cdd``, ``lara/self_critique``,
``lara/recall_lara_code``, ``lara/ppl_response``, ``lara/min_k_response@k``, ``lara/min_k_plus_plus_response@k``,
``lara/dime``,
``lara/lara+sc@<beta>`` (``lara_in_set`` in place of ``lara`` for the LaRA columns under the in-set reference).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd

from mialab.core.finite import require_finite
from mialab.data.rl_corpus import normalise_question, pool_questions
from mialab.lara.baselines import (
    cdd_batch_size,
    cdd_scores,
    greedy_answers,
    mean_log_likelihood,
    perturbed_question,
    recall_scores,
    response_scores,
    self_critique_scores,
)
from mialab.lara.blanking import LLM_BACKENDS, BlankBackend, blank_token_loss, is_perturbed
from mialab.lara.combine import combine_lara_sc
from mialab.lara.construction import build_perturbations
from mialab.lara.detection import detection_scores
from mialab.lara.metrics import compute_metrics
from mialab.lara.neighbours import retrieval_neighbours
from mialab.lara.paraphrase import wordnet_variants
from mialab.lm.engine import Parts, fingerprint, model_identity
from mialab.lm.loading import load_lm

EVALUATED, REFERENCE = "evaluated", "reference"
PREFIX = "lara"
HELD_OUT, IN_SET = "held_out", "in_set"
REFERENCES = (HELD_OUT, IN_SET)
#: LaRA columns standardised on the evaluated set's own non-members (they use evaluation labels)
IN_SET_PREFIX = "lara_in_set"
METRIC_COLUMNS = ["rsm", "dc", "rsi"]


def known_nonmembers(pool: pd.DataFrame, split_ids) -> pd.DataFrame:
    """The pool's non-members that are not in the split (selected by id)."""
    held_out = ~pool["id"].astype(str).isin(set(map(str, split_ids)))
    return pool[held_out & (pool["label"] == 0)].reset_index(drop=True)


def blankable(texts: list[str], blank: dict | None = None) -> np.ndarray:
    """Which texts the blank backend (default ``numbers_entities``) perturbs (:func:`is_perturbed`);
    an LLM perturbs any text (it is not asked here)."""
    spec = dict(blank or {"backend": "numbers_entities"})
    name = spec.pop("backend")
    if name in LLM_BACKENDS:
        return np.ones(len(texts), dtype=bool)
    return np.array([is_perturbed(t, b, name) for t, b in zip(texts, BlankBackend.resolve(name)(list(texts), **spec))],
                    dtype=bool)


#: options an ``llm`` perturbation backend reads besides its ``generate`` (the others are the offline backends')
LLM_OPTIONS = ("num_blanks",)


def backend_specs(spec: dict, neighbour_pool: list[str], generate=None) -> dict[str, dict]:
    """``{"neighbours", "blank", "paraphrase"}`` backend specs for :func:`build_perturbations` from the
    ``lara`` section's ``neighbours`` / ``blank`` / ``paraphrase`` entries.

    A backend ``llm`` gets ``generate`` (``generate(prompts, temperature=t)``, :func:`mialab.lm.engine.text_generator`
    on ``lara.llm``) at the entry's own ``temperature`` (the code's: 0.8 neighbours, 0.3 blanking, 0.7
    paraphrases) and ``max_new_tokens`` where the entry has one (paraphrases: the code's 2000; else
    ``lara.llm.max_new_tokens``); neighbours default to retrieval from ``neighbour_pool`` (the known
    non-members). With ``lara.llm.fallback`` (the rehearsal's: its random-weight stand-ins follow no
    instruction) an ``llm`` backend's still-invalid answers give way to an offline backend
    (:func:`fallback_backends`); without it, a neighbour whose LLM blank stays invalid leaves its question's
    group, as in the code (:func:`mialab.lara.construction.kept_units`).
    """
    out = {}
    llm = spec.get("llm") or {}
    for part in ("neighbours", "blank", "paraphrase"):
        entry = {k: v for k, v in spec[part].items() if k not in ("n", "n_variants")}
        default = {"neighbours": "retrieval", "blank": "numbers_entities", "paraphrase": "wordnet"}[part]
        entry.setdefault("backend", default)
        if entry["backend"] in LLM_BACKENDS:
            if generate is None:
                raise ValueError(f"lara.{part}.backend: {entry['backend']} needs the lara.llm section "
                                 "(the instruction model)")
            budget = {"max_new_tokens": entry["max_new_tokens"]} if "max_new_tokens" in entry else {}
            out[part] = {"backend": entry["backend"],
                         "generate": functools.partial(generate, temperature=entry["temperature"], **budget),
                         **{k: entry[k] for k in LLM_OPTIONS if k in entry}}
            if llm.get("fallback") and entry["backend"] == "llm":
                out[part]["fallback"] = fallback_backends(spec, neighbour_pool)[part]
            elif part == "blank":
                out[part]["drop_invalid"] = True
        elif part == "neighbours":
            out[part] = retrieval_spec(entry, neighbour_pool)
        else:
            out[part] = entry
    return out


def instruction_model(spec: dict):
    """``generate`` of the ``lara.llm`` instruction model (:func:`mialab.lm.engine.text_generator` on its engine),
    or None without one."""
    if not spec.get("llm"):
        return None
    from mialab.lm.engine import text_generator

    llm = spec["llm"]
    return text_generator(llm["model"], **{k: v for k, v in llm.items() if k not in ("model", "fallback")})


def retrieval_spec(entry: dict, neighbour_pool: list[str]) -> dict:
    """The retrieval neighbour backend's spec from a ``lara.neighbours`` entry."""
    return {"backend": "retrieval", "pool": neighbour_pool, "dtype": entry["embedding_dtype"]}


def fallback_backends(spec: dict, neighbour_pool: list[str]) -> dict:
    """The offline backends ``lara.llm.fallback`` gives way to: retrieval neighbours from ``neighbour_pool``,
    ``token_loss`` blanking under the instruction model itself (it blanks any text with a word, as
    ``numbers_entities`` does not), WordNet variants with the ``lara.paraphrase`` entry's options."""
    llm, paraphrase = spec["llm"], spec["paraphrase"]
    device = llm.get("backend_options", {}).get("device", "auto")
    neighbours = {k: v for k, v in retrieval_spec(spec["neighbours"], neighbour_pool).items() if k != "backend"}
    return {"neighbours": functools.partial(retrieval_neighbours, **neighbours),
            "blank": functools.partial(blank_token_loss, model_path=llm["model"], device=device),
            "paraphrase": functools.partial(wordnet_variants,
                                            **{k: paraphrase[k] for k in ("rate", "min_count", "seed")})}


def stage_questions(split: pd.DataFrame, pool: pd.DataFrame, *, rule: str = "request", max_words: int | None = None,
                    template: str = "{question}", n_reference: int = 30, seed: int | list[int] = 0,
                    blank: dict | None = None) -> tuple[pd.DataFrame, list[str]]:
    """``(questions, neighbour_pool)``: ``questions`` has ``id``, ``text``, ``set`` (the split's rows,
    then ``n_reference`` known non-members drawn with ``seed``); ``neighbour_pool`` is the question
    of every known non-member that has something to blank (the others cannot be controls). A question is
    ``template`` filled with the row's question (the LaRA code's: the user turn, its answer-format line too)."""
    def questions_of(rows: pd.DataFrame) -> pd.Series:
        return pool_questions(rows, rule, max_words).map(lambda q: template.format(question=q))

    controls = known_nonmembers(pool, split["id"])
    control_questions = questions_of(controls)
    usable = blankable(control_questions.tolist(), blank)
    controls, control_questions = controls[usable].reset_index(drop=True), control_questions[usable]
    if len(controls) < n_reference:
        raise ValueError(f"{len(controls)} usable known non-members outside the split, {n_reference} needed for the "
                         "reference set; lower lara.controls.n_reference or give the pool more non-members")
    control_questions = control_questions.reset_index(drop=True)
    order = np.sort(np.random.default_rng(seed).choice(len(controls), size=n_reference, replace=False))
    questions = pd.concat([
        pd.DataFrame({"id": split["id"].astype(str), "text": questions_of(split), "set": EVALUATED}),
        pd.DataFrame({"id": controls["id"].astype(str).iloc[order], "text": control_questions.iloc[order],
                      "set": REFERENCE}),
    ], ignore_index=True)
    return questions, control_questions.tolist()


def perturbation_table(questions: pd.DataFrame, backends: dict[str, dict], *, n_neighbours: int = 5,
                       n_variants: int = 5) -> pd.DataFrame:
    """The perturbation table of every question, with its ``set``; ``backends`` from :func:`backend_specs`."""
    table = build_perturbations(questions[["id", "text"]], n_neighbours=n_neighbours, n_variants=n_variants,
                                **backends)
    return table.merge(questions[["id", "set"]], on="id", how="left", validate="many_to_one")


def perturbation_counts(questions: pd.DataFrame, neighbour_pool: list[str], table: pd.DataFrame) -> dict[str, int]:
    """A seed's manifest counts for rule ``lara_perturbations``: evaluated and reference questions,
    neighbour pool, perturbation rows and distinct texts."""
    return {"questions": int((questions["set"] != REFERENCE).sum()),
            "reference_questions": int((questions["set"] == REFERENCE).sum()),
            "neighbour_pool": len(neighbour_pool), "rows": len(table), "distinct_texts": int(table["text"].nunique())}


def distinct_texts(table: pd.DataFrame) -> pd.DataFrame:
    """One row (``text``) per distinct text of the table, in order of first appearance."""
    return pd.DataFrame({"text": pd.unique(table["text"])})


def aligned_features(table: pd.DataFrame, index: pd.DataFrame, features: np.ndarray) -> np.ndarray:
    """Features of every table row, from features of its distinct texts (``index`` rows)."""
    position = pd.Series(np.arange(len(index)), index=index["text"].to_numpy())
    if position.index.has_duplicates:
        raise ValueError("the feature index repeats a text")
    rows = position.reindex(table["text"].to_numpy())
    if rows.isna().any():
        raise ValueError(f"{int(rows.isna().sum())} perturbation text(s) have no features")
    return features[rows.to_numpy(dtype=np.int64)]


def question_metrics(table: pd.DataFrame, index: pd.DataFrame, features: np.ndarray) -> pd.DataFrame:
    """RSM, DC and RSI per (question, layer) with the question's ``set``."""
    metrics = compute_metrics(table, aligned_features(table, index, features))
    sets = table.drop_duplicates("id").set_index("id")["set"]
    return metrics.assign(set=metrics["id"].map(sets).to_numpy())


def in_set_reference(evaluated: pd.DataFrame, split: pd.DataFrame) -> pd.DataFrame:
    """The released code's default clean reference: the evaluated questions whose split label is 0.

    It reads the evaluation labels (a question's score then depends on which of the others are
    non-members), so scores fitted on it are named :data:`IN_SET_PREFIX` and are optimistic.
    """
    clean = set(split.loc[split["label"] == 0, "id"].astype(str))
    reference = evaluated[evaluated["id"].astype(str).isin(clean)]
    if reference["id"].nunique() < 2:
        raise ValueError(f"lara.detection.reference: in_set needs at least 2 label-0 questions in the split, "
                         f"found {reference['id'].nunique()}")
    return reference


def score_table(metrics: pd.DataFrame, baselines: pd.DataFrame, split: pd.DataFrame, *, how: str = "abs",
                betas: list[float] = (0.65,), reference: str = HELD_OUT) -> pd.DataFrame:
    """The stage's score table: ``id``, ``label`` and the columns of the module doc, in split order.

    ``reference``: ``held_out`` fits the detection reference on the reference questions (known
    non-members outside the split) and joins ``label`` last; ``in_set`` fits it on the split's
    label-0 questions (:func:`in_set_reference`) and names the LaRA columns ``lara_in_set...``.
    """
    if reference not in REFERENCES:
        raise ValueError(f"lara.detection.reference: unknown {reference!r}; known: {', '.join(REFERENCES)}")
    evaluated = metrics[metrics["set"] == EVALUATED].drop(columns="set")
    fitted = (metrics[metrics["set"] == REFERENCE].drop(columns="set") if reference == HELD_OUT
              else in_set_reference(evaluated, split))
    prefix = PREFIX if reference == HELD_OUT else IN_SET_PREFIX
    scores = detection_scores(evaluated, fitted, how=how)
    scores = scores.rename(columns=lambda c: c if c == "id" else prefix if c == PREFIX
                           else f"{prefix}/{c.removeprefix(PREFIX + '_')}")
    scores = scores.merge(baselines, on="id", how="outer", validate="one_to_one")
    for beta in betas:
        scores[f"{prefix}/lara+sc@{beta:g}"] = combine_lara_sc(scores[prefix].to_numpy(),
                                                               scores[f"{PREFIX}/self_critique"].to_numpy(), beta)
    if set(scores["id"]) != set(split["id"].astype(str)):
        raise ValueError("the LaRA scores and the split cover different ids")
    out = split[["id", "label"]].astype({"id": str}).merge(scores, on="id", validate="one_to_one")
    for column in out.columns.drop(["id", "label"]):
        require_finite(f"LaRA score column {column!r}", out[column])
    return out


def _evaluated_and_reference(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The original evaluated questions and reference questions of a perturbation table."""
    originals = table[(table["form"] == "original") & (table["neighbour"] < 0)]
    return originals[originals["set"] == EVALUATED], originals[originals["set"] == REFERENCE]


def recall_prefix(references: pd.DataFrame, recall: dict) -> list[str]:
    """ReCaLL's prefix: the ``prefix_size`` shortest reference questions (known non-members; short,
    so that prefix and question fit a small model's context), cut to ``prefix_max_words``."""
    shortest = references["text"].iloc[np.argsort(references["text"].str.len().to_numpy(), kind="stable")]
    return [normalise_question(t, recall.get("prefix_max_words")) for t in shortest.iloc[:recall["prefix_size"]]]


def baseline_part_size(batch_size: int, n_samples: int) -> int:
    """Questions per resumable part of the baselines: one answer batch, rounded up to whole batches of CDD's
    sampled answers, so that every batch of a part is the batch of an uninterrupted run."""
    return math.lcm(batch_size, cdd_batch_size(batch_size, n_samples))


def baseline_scores(model_path: str, tables: list[pd.DataFrame], *, recall: dict, cdd: dict, self_critique: dict,
                    responses: dict, top_k_logprobs: int, batch_size: int, device: str, dtype: str,
                    system_prompt: str | None = None, trust_remote_code: bool = False,
                    parts: str | Path | None = None) -> list[pd.DataFrame]:
    """The output-level baselines of every evaluated question (:mod:`mialab.lara.baselines`), one
    table (``id`` and ``lara/...`` columns) per perturbation table (one per seed).

    The seeds' splits share questions: every generation answers each distinct question once, and
    ReCaLL's unconditional likelihood is read once; ReCaLL's prefix is each seed's own
    (:func:`recall_prefix` of its reference questions) and scores a question's first ``max_words``
    words. The model is loaded once. The original greedy answers (``self_critique.max_new_tokens``
    tokens) are Self-Critique's first answers, the response-level baselines' original responses and,
    when it decodes as many tokens, CDD's greedy answers; the perturbed greedy answers
    (``responses.perturbation_prefix`` / ``_suffix`` around the question) feed ``recall_lara_code`` and DIME.

    With a ``parts`` folder the generated baselines are resumable there (:class:`mialab.lm.engine.Parts`):
    :func:`baseline_part_size` questions at a time, each part's scores saved, a rerun reusing the valid
    ones; ReCaLL's forward passes run after them. A part gives the scores of an uninterrupted run: its
    batches are that run's, CDD samples them under the same seeds, and a greedy answer's first ``n`` steps
    do not depend on how many more its batch decodes (Self-Critique's re-answers decode a part's longest
    budget).
    """
    seeds = [_evaluated_and_reference(t) for t in tables]
    questions = pd.concat([q[["id", "text"]] for q, _ in seeds]).drop_duplicates()
    clash = questions["id"][questions["id"].duplicated()]
    if len(clash):
        raise ValueError(f"{len(clash)} question id(s) have different texts in different seeds, e.g. {sorted(clash)[:3]}")
    question_ids, texts = questions["id"].tolist(), questions["text"].tolist()
    model, tok = load_lm(model_path, device=device, dtype=dtype, padding_side="left", trust_remote_code=trust_remote_code)
    answer_tokens = self_critique["max_new_tokens"]
    greedy = dict(max_new_tokens=answer_tokens, batch_size=batch_size, top_k=top_k_logprobs, system=system_prompt)
    wrap = (responses["perturbation_prefix"], responses["perturbation_suffix"])

    def generated(start: int, stop: int) -> pd.DataFrame:
        """The generation-based baselines of questions ``[start, stop)``."""
        chunk = texts[start:stop]
        first = greedy_answers(model, tok, chunk, **greedy)
        perturbed = greedy_answers(model, tok, [perturbed_question(t, *wrap) for t in chunk], **greedy)
        return pd.DataFrame({
            "id": question_ids[start:stop],
            f"{PREFIX}/cdd": cdd_scores(model, tok, chunk, **cdd, batch_size=batch_size, top_k=top_k_logprobs,
                                        system=system_prompt, offset=start,
                                        greedy=first if cdd["max_new_tokens"] == answer_tokens else None),
            f"{PREFIX}/self_critique": self_critique_scores(model, tok, chunk, **self_critique, batch_size=batch_size,
                                                            top_k=top_k_logprobs, system=system_prompt, first=first),
            **{f"{PREFIX}/{name}": values for name, values in
               response_scores(first, perturbed, min_k=responses["min_k"]).items()},
        })

    if parts is None:
        shared = generated(0, len(texts))
    else:
        settings = {"model": model_identity(model_path), "cdd": cdd, "self_critique": self_critique,
                    "responses": responses, "top_k_logprobs": top_k_logprobs, "batch_size": batch_size,
                    "device": device, "dtype": dtype, "system_prompt": system_prompt}
        key = fingerprint({"lara_baselines": settings, "ids": question_ids, "texts": texts})
        shared = Parts(parts).run(key, len(texts), baseline_part_size(batch_size, cdd["n_samples"]), generated)
    shared = shared.set_index("id")
    recall_texts = [normalise_question(t, recall.get("max_words")) for t in texts]
    unconditional = pd.Series(mean_log_likelihood(model, tok, recall_texts), index=shared.index)
    recall_text = pd.Series(recall_texts, index=shared.index)
    out = []
    for evaluated, references in seeds:
        ids = evaluated["id"].to_numpy()
        recall_column = recall_scores(model, tok, recall_text.loc[ids].tolist(), recall_prefix(references, recall),
                                      unconditional=unconditional.loc[ids].to_numpy())
        out.append(pd.concat([pd.DataFrame({"id": ids, f"{PREFIX}/recall": recall_column}),
                              shared.loc[ids].reset_index(drop=True)], axis=1))
    return out
