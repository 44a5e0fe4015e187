"""LaRA core: perturbations, layer features, the three metrics, the detection score, baselines."""

from __future__ import annotations

import inspect
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import PROBLEMS

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from mialab.lara import baselines
from mialab.lara.baselines import (
    cdd_distance,
    cdd_peakedness,
    cdd_scores,
    critique_budget,
    dime_score,
    greedy_answers,
    mean_log_likelihood,
    min_k_plus_plus_response,
    min_k_response,
    perturbed_question,
    ppl_response,
    recall_lara_code,
    recall_score,
    recall_scores,
    response_scores,
    self_critique_scores,
    self_critique_similarity,
)
from mialab.lara.blanking import blank_important, blank_numbers_entities, count_blanks, replace_one_number, word_spans
from mialab.lara.combine import beta_sweep, combine_lara_sc, percentile_rank
from mialab.lara.construction import build_perturbations, role_name
from mialab.lara.detection import (
    MAD_TO_SD,
    MEAN_AD_TO_SD,
    align,
    detection_scores,
    fit_reference,
    layer_windows,
    robust_z,
    signed_log,
)
from mialab.lara.features import extract_features, extract_layer_features, layer_features, load_features
from mialab.lara.metrics import compute_metrics, directional_collapse, group_rows, local_variability, rsi, rsm
from mialab.lara.neighbours import find_neighbours, retrieval_neighbours
from mialab.lara.paraphrase import paraphrase_variants
from mialab.lm.engine import text_generator
from mialab.lm.generation import Generation, generate, topk_step_stats
from mialab.lm.loading import load_lm
from mialab.lm.logprobs import token_logprobs
from mialab.lm.prompts import format_prompt
from mialab.text.llm_prompts import load_template, parse_list
from mialab.text.spans import BLANK

QUESTIONS = PROBLEMS + [
    "Find the remainder when 2 to the power 100 is divided by 13.",
    "In triangle ABC the sides have lengths 13, 14 and 15. Find the area of the triangle.",
]


def structure_kept(original: str, blanked: str) -> bool:
    """Every [BLANK] stands for a non-empty span of the original; all other characters are unchanged."""
    pattern = "".join("(.+?)" if part == BLANK else re.escape(part) for part in re.split(r"(\[BLANK\])", blanked))
    return re.fullmatch(pattern, original, re.DOTALL) is not None


TINY_MODEL = {"corpus": QUESTIONS * 20, "num_heads": 4}  # conftest.tiny_model


# --- the three metrics -------------------------------------------------------------------------

def test_directional_collapse_is_one_along_the_neighbours_direction_and_minus_one_against_it():
    rng = np.random.default_rng(0)
    u = rng.normal(size=(3, 4, 8))  # one direction per (question, layer)
    shift_nb = u[:, None] * np.array([0.5, 1.0, 3.0])[None, :, None, None]
    np.testing.assert_allclose(directional_collapse(2.0 * u, shift_nb), 1.0, atol=1e-9)
    np.testing.assert_allclose(directional_collapse(-0.7 * u, shift_nb), -1.0, atol=1e-9)
    orthogonal = np.zeros((1, 1, 2))
    orthogonal[..., 1] = 1.0
    along = np.zeros((1, 2, 1, 2))
    along[..., 0] = 1.0
    assert directional_collapse(orthogonal, along)[0, 0] == pytest.approx(0.0)


def test_rsm_is_zero_when_the_shift_matches_the_neighbours_mean_and_hand_computed_otherwise():
    e = np.zeros(5)
    e[0] = 1.0
    shift_nb = np.array([1.0, 2.0, 3.0])[None, :, None, None] * e  # magnitudes 1, 2, 3: mean 2, sample std 1
    assert rsm(2.0 * e[None, None], shift_nb)[0, 0] == pytest.approx(0.0, abs=1e-12)
    std = 1.0   # ddof = 1 as the released code (ddof = 0 would give sqrt(2/3))
    assert rsm(-4.0 * e[None, None], shift_nb)[0, 0] == pytest.approx((4 - 2) / std, rel=1e-6)


def test_rsi_raw_variability_is_zero_for_identical_variants_and_the_spread_otherwise():
    h = np.random.default_rng(1).normal(size=(2, 1, 3, 6))  # [Q, K=1, L, D]
    assert np.all(local_variability(np.repeat(h, 4, axis=1)) == 0)
    v = np.zeros((1, 2, 1, 2))
    v[0, 0, 0], v[0, 1, 0] = [3.0, 4.0], [-3.0, -4.0]  # centroid 0, both at distance 5
    assert local_variability(v)[0, 0] == pytest.approx(5.0)
    nb = np.stack([v * 0.5, v, v * 1.5], axis=1)  # neighbour variabilities 2.5, 5, 7.5
    assert rsi(v, nb)[0, 0] == pytest.approx(0.0, abs=1e-9)


# --- detection score ---------------------------------------------------------------------------

def test_signed_log_robust_z_and_alignment_on_hand_numbers():
    np.testing.assert_allclose(signed_log([0.0, 1.0, -3.0, math.e - 1]), [0.0, math.log(2), -math.log(4), 1.0])
    reference = np.expm1(np.array([0.0, 1.0, 2.0, 3.0, 10.0]))[:, None]  # compressed 0,1,2,3,10: median 2, MAD 1
    ref = fit_reference(reference)
    assert ref.center[0] == pytest.approx(2.0) and ref.scale[0] == pytest.approx(MAD_TO_SD)
    assert robust_z(np.expm1(np.array([[5.0]])), ref, eps=0.0)[0, 0] == pytest.approx(3.0 / MAD_TO_SD)
    z = np.array([[[2.0], [-1.0], [3.0]]])  # metrics rsm, dc, rsi
    np.testing.assert_allclose(align(z)[0, :, 0], [2.0, 1.0, -3.0])


def test_a_zero_mad_falls_back_to_the_mean_absolute_deviation_and_a_flat_reference_is_an_error():
    ref = fit_reference(np.expm1(np.array([1.0, 1.0, 1.0, 2.0, 5.0]))[:, None])  # deviations 0,0,0,1,4
    assert ref.scale[0] == pytest.approx(MEAN_AD_TO_SD * 1.0)
    with pytest.raises(ValueError, match="no spread"):
        fit_reference(np.ones((4, 2)))


def _metrics_table(ids: list[str], layers: int, rng, shift: float = 0.0) -> pd.DataFrame:
    n = len(ids) * layers
    return pd.DataFrame({"id": np.repeat(ids, layers), "layer": np.tile(np.arange(1, layers + 1), len(ids)),
                         "rsm": rng.normal(size=n) + shift, "dc": rng.uniform(-1, 1, size=n),
                         "rsi": rng.normal(size=n) - shift})


def test_detection_scores_read_no_labels_so_shuffling_them_changes_nothing():
    rng = np.random.default_rng(2)
    evaluated = _metrics_table([f"e{i}" for i in range(20)], 6, rng)
    evaluated["label"] = np.repeat(rng.integers(0, 2, size=20), 6)
    reference = _metrics_table([f"r{i}" for i in range(15)], 6, rng)
    before = detection_scores(evaluated, reference)
    shuffled = evaluated.assign(label=np.repeat(rng.permutation(evaluated["label"].to_numpy()[::6]), 6))
    assert not shuffled["label"].equals(evaluated["label"])
    pd.testing.assert_frame_equal(before, detection_scores(shuffled, reference))
    assert "label" not in inspect.signature(detection_scores).parameters
    assert "label" not in inspect.signature(fit_reference).parameters


def test_detection_scores_rank_a_deviating_question_first_and_ablations_are_consistent():
    rng = np.random.default_rng(3)
    evaluated = pd.concat([_metrics_table([f"e{i}" for i in range(10)], 6, rng),
                           _metrics_table(["planted"], 6, rng, shift=8.0)], ignore_index=True)
    scores = detection_scores(evaluated, _metrics_table([f"r{i}" for i in range(30)], 6, rng))
    assert scores.loc[scores["lara"].idxmax(), "id"] == "planted"  # higher = more member-like
    np.testing.assert_allclose(scores["lara"], scores[["lara_rsm", "lara_dc", "lara_rsi"]].mean(axis=1))
    sizes = np.array([len(w) for w in layer_windows(6).values()])   # 1, 1, 4 of 6 layers
    np.testing.assert_allclose(scores["lara"], scores[["lara_early", "lara_mid", "lara_late"]] @ sizes / 6)
    np.testing.assert_allclose(scores["lara_no_dc"], scores[["lara_rsm", "lara_rsi"]].mean(axis=1))


def test_metrics_probe_hidden_states_0_to_L_minus_1_and_standardise_with_the_sample_std():
    """Against a direct computation on a small tensor: layers ``0..L-1`` of ``L + 1`` hidden states
    (the code's ``select_layers``), neighbour z-scores with ``ddof=1`` (``rsm_calculation.py``)."""
    rng = np.random.default_rng(7)
    m, k, n_hidden, d = 3, 2, 4, 5      # neighbours, variants, hidden states (L = 3 blocks), width
    rows = [(q, n, f, v) for q in ["q"] for n in range(-1, m) for f, v in
            [("original", -1), ("blank", -1)] + [("variant", j) for j in range(k)]]
    index = pd.DataFrame(rows, columns=["id", "neighbour", "form", "variant"])
    feats = rng.normal(size=(len(index), n_hidden, d))
    table = compute_metrics(index, feats)
    assert table["layer"].tolist() == [0, 1, 2]          # not 3: the final normed output is left out
    at = {key: feats[i] for i, key in enumerate(map(tuple, index.to_numpy()))}
    for layer in range(3):
        shift = lambda n: at[("q", n, "original", -1)][layer] - at[("q", n, "blank", -1)][layer]  # noqa: E731
        nb = np.array([np.linalg.norm(shift(n)) for n in range(m)])
        expected = (np.linalg.norm(shift(-1)) - nb.mean()) / (np.std(nb, ddof=1) + 1e-8)
        assert table.loc[layer, "rsm"] == pytest.approx(expected, rel=1e-9)
        spread = lambda n: np.mean([np.linalg.norm(v - np.mean(vs, axis=0)) for vs in  # noqa: E731
                                    [np.array([at[("q", n, "variant", j)][layer] for j in range(k)])] for v in vs])
        nb = np.array([spread(n) for n in range(m)])
        expected = (spread(-1) - nb.mean()) / (np.std(nb, ddof=1) + 1e-8)
        assert table.loc[layer, "rsi"] == pytest.approx(expected, rel=1e-9)


def test_layer_windows_split_9_9_10_as_the_released_code():
    """``segment_lengths_9_9_10``: 9 L // 28 early and mid layers, the rest late."""
    assert [len(w) for w in layer_windows(28).values()] == [9, 9, 10]
    assert [w.tolist() for w in layer_windows(7).values()] == [[0, 1], [2, 3], [4, 5, 6]]
    assert [w.tolist() for w in layer_windows(4).values()] == [[0], [1], [2, 3]]   # the tiny world's 4 layers
    assert {k: w.tolist() for k, w in layer_windows(3).items()} == {"late": [0, 1, 2]}   # the code: early, mid NaN
    rng = np.random.default_rng(5)
    evaluated, reference = _metrics_table(["e0", "e1"], 28, rng), _metrics_table([f"r{i}" for i in range(9)], 28, rng)
    scores = detection_scores(evaluated, reference)
    late = [layer for layer in range(1, 29)][18:]      # _metrics_table numbers layers 1..28
    ref = reference[reference["layer"].isin(late)]
    x = evaluated[(evaluated["id"] == "e0") & evaluated["layer"].isin(late)]
    z = []
    for metric in ("rsm", "dc", "rsi"):
        centre = ref.groupby("layer")[metric].apply(lambda v: np.median(signed_log(v)))
        scale = ref.groupby("layer")[metric].apply(
            lambda v: MAD_TO_SD * np.median(np.abs(signed_log(v) - np.median(signed_log(v)))))
        z.append(np.abs((signed_log(x[metric].to_numpy()) - centre[late].to_numpy()) / (scale[late].to_numpy() + 1e-8)))
    assert scores.loc[0, "lara_late"] == pytest.approx(np.mean(z), rel=1e-9)


# --- combination -------------------------------------------------------------------------------

def test_percentile_rank_combination_and_beta_sweep():
    np.testing.assert_allclose(percentile_rank(np.array([3.0, 1.0, 2.0, 2.0])), [1.0, 0.25, 0.625, 0.625])
    lara, sc = np.array([1.0, 2.0, 3.0, 4.0]), np.array([4.0, 3.0, 2.0, 1.0])
    np.testing.assert_allclose(combine_lara_sc(lara, sc, beta=0.65), 0.65 * sc / 4 + 0.35 * lara / 4)
    sweep = beta_sweep(["a", "b", "c", "d"], lara, sc, betas=[0.0, 1.0])
    np.testing.assert_allclose(sweep.loc[sweep["beta"] == 0.0, "score"], lara / 4)
    np.testing.assert_allclose(sweep.loc[sweep["beta"] == 1.0, "score"], sc / 4)


# --- perturbations -----------------------------------------------------------------------------

def test_numbers_entities_blanking_keeps_the_structure():
    text = "Let $x$ be a real number. Alice and Bob pick 12 cards from New York, then three more."
    blanked = blank_numbers_entities([text])[0]
    # "Alice" opens a sentence, so capitalisation says nothing about it; "Bob" and "New York" are entities.
    assert blanked == ("Let [BLANK] be a real number. Alice and [BLANK] pick [BLANK] cards from [BLANK], "
                       "then [BLANK] more.")
    assert all(structure_kept(q, b) for q, b in zip(QUESTIONS, blank_numbers_entities(QUESTIONS)))
    with pytest.raises(ValueError, match="nothing to blank"):
        blank_important(["what is the answer?"])


def test_token_loss_blanking_blanks_the_requested_fraction_of_words(tiny_model):
    blanked = blank_important(QUESTIONS[:3], "token_loss", model_path=tiny_model, fraction=0.25, device="cpu")
    for q, b in zip(QUESTIONS[:3], blanked):
        assert count_blanks(b) == math.ceil(0.25 * len(word_spans(q)))
        assert structure_kept(q, b)


def test_the_codes_edit_perturbations_change_the_question_without_blanks():
    """``num_replace`` (one number, not 0 / 1 when another exists), ``var_rename`` and ``distractor``
    (an LLM, the code's prompts); the LLM paraphrases of an edited text use the code's second prompt."""
    import random

    text = "Take 1 step, then 12 steps and 0 more."
    edited = blank_important([text], "num_replace")[0]
    assert edited == blank_important([text], "num_replace")[0] and BLANK not in edited   # seeded per text
    changed = [(a, b) for a, b in zip(re.findall(r"-?\d+", text), re.findall(r"-?\d+", edited)) if a != b]
    assert len(changed) == 1 and changed[0][0] == "12"
    assert replace_one_number("no numbers", random.Random(0)) == "no numbers"
    with pytest.raises(ValueError, match="nothing to blank or edit"):
        blank_important(["no numbers here"], "num_replace")
    prompts = []
    renamed = blank_important(["Let x be 3."], "var_rename",
                              generate=lambda p, **_: prompts.extend(p) or ['["Let widget be 3."]'])
    assert renamed == ["Let widget be 3."] and "single-letter variable" in prompts[0]
    answers = iter(["Let x be 3.", '["Let x be 3. The sky is blue."]'])   # a copy is asked for again
    assert blank_important(["Let x be 3."], "distractor", generate=lambda p, **_: [next(answers)]) == [
        "Let x be 3. The sky is blue."]
    asked = []
    variants = paraphrase_variants(["Let widget be 3."], 2, "llm", generate=lambda p, **_: asked.extend(p) or [
        '["Suppose widget is 3.", "Assume widget equals 3."]'])
    assert variants == [["Suppose widget is 3.", "Assume widget equals 3."]] and len(asked) == 1
    assert "it may contain edits such as a replaced number" in asked[0] and "create 2 paraphrased" in asked[0]


def test_wordnet_variants_rewrite_words_but_keep_blanks_and_math():
    blanked = "Let [BLANK] be the smallest positive integer such that $n^2$ divides [BLANK]. Determine the sum."
    variants = paraphrase_variants([blanked], 4, seed=7)[0]
    assert variants == paraphrase_variants([blanked], 4, seed=7)[0]  # seeded
    for v in variants:
        assert count_blanks(v) == 2 and "$n^2$" in v and v != blanked
    assert len(set(variants)) > 1
    with pytest.raises(ValueError, match="changed the number"):
        paraphrase_variants([blanked], 1, lambda texts, k: [[t.replace(BLANK, "it", 1)] for t in texts])


def test_retrieval_neighbours_never_return_the_question_or_duplicates():
    pool = QUESTIONS + [QUESTIONS[0].upper(), "  " + QUESTIONS[1] + " ", QUESTIONS[2]]
    nbs = retrieval_neighbours(QUESTIONS[:3], 3, pool=pool)
    for q, row in zip(QUESTIONS[:3], nbs):
        keys = [" ".join(x.lower().split()) for x in row]
        assert len(row) == 3 and len(set(keys)) == 3 and " ".join(q.lower().split()) not in keys
    with pytest.raises(ValueError, match="distinct questions"):
        retrieval_neighbours(QUESTIONS[:1], 3, pool=QUESTIONS[:2] * 5)


def test_llm_backends_parse_list_answers_and_reprompt_invalid_ones():
    assert parse_list('Sure:\n```json\n["A [BLANK] b?", "C?"]\n```') == ["A [BLANK] b?", "C?"]
    assert parse_list("Here they are:\n1. First one\n   continues\n2) Second\n- Third") == [
        "First one continues", "Second", "Third"]
    calls = []

    def generate(prompts: list[str], **_) -> list[str]:
        calls.append(len(prompts))
        if len(calls) == 1:  # first round: a copy of the question and only one new one
            return [f"1. {QUESTIONS[0]}\n2. How many primes are below 50?" for _ in prompts]
        return ['["How many squares are below 90?", "How many cubes are below 900?"]' for _ in prompts]

    nbs = find_neighbours([QUESTIONS[0]], 2, "llm", generate=generate)
    assert nbs == [["How many primes are below 50?", "How many squares are below 90?"]] and calls == [1, 1]
    replies = iter(["No blanks here.", '["Find [BLANK] of [BLANK]."]', '```json\n["Find [BLANK] of 4."]\n```'])
    prompts = []
    got = blank_important(["Find 3 of 4."], "llm", generate=lambda p, **_: prompts.extend(p) or [next(replies)])
    assert got == ["Find [BLANK] of 4."]        # exactly num_blanks = 1 blank, as the code's importance prompt
    assert "EXACTLY 1 occurrences of [BLANK]" in prompts[0] and prompts[0].endswith("1. Find 3 of 4.\n")
    two = iter(['["Find [BLANK] of [BLANK]."]'])
    assert blank_important(["Find 3 of 4."], "llm", num_blanks=2, generate=lambda p, **_: [next(two)]) == [
        "Find [BLANK] of [BLANK]."]
    # a text's variants in one call (the code's JSON array); a wrong blank count, a copy or a repeat is asked again
    answers = iter(['["Compute [BLANK] now.", "Get [BLANK] and [BLANK].", "Find [BLANK] now."]',
                    '["Compute [BLANK] now.", "Determine [BLANK] today."]'])
    asked = []
    variants = paraphrase_variants(["Find [BLANK] now."], 2, "llm",
                                   generate=lambda p, attempt: asked.append((len(p), attempt)) or [next(answers)])
    assert variants == [["Compute [BLANK] now.", "Determine [BLANK] today."]] and asked == [(1, 0), (1, 1)]
    with pytest.raises(KeyError, match="known: llm, retrieval"):
        find_neighbours(QUESTIONS, 2, "nearest")


def test_llm_backends_fall_back_for_prompts_still_invalid_and_fail_without_a_fallback():
    """``fallback``: the prompts still invalid after ``max_attempts`` (and only those) take the offline
    backend's answer, for the same text (the paraphrase's variant of the same index)."""
    def junk(prompts: list[str], **_) -> list[str]:   # a rehearsal stand-in: never the asked-for format
        return ["no list, no blank" for _ in prompts]

    with pytest.raises(ValueError, match="still lack 2 valid"):
        find_neighbours(QUESTIONS[:2], 2, "llm", generate=junk)
    asked = []
    nbs = find_neighbours(QUESTIONS[:2], 2, "llm", generate=junk,
                          fallback=lambda qs, m: asked.extend(qs) or [[f"{q} A", f"{q} B"] for q in qs])
    assert asked == QUESTIONS[:2] and nbs == [[f"{q} A", f"{q} B"] for q in QUESTIONS[:2]]

    def some_valid(prompts: list[str], **_) -> list[str]:   # the second text's answer is valid
        return ["Find [BLANK] of 4." if "Find 3 of 4." in p.split("Problems:")[1] else "no blank" for p in prompts]

    got = blank_important(["Find 1 of 2.", "Find 3 of 4."], "llm", generate=some_valid,
                          fallback=lambda ts: [t.replace("1", BLANK) for t in ts])
    assert got == ["Find [BLANK] of 2.", "Find [BLANK] of 4."]
    with pytest.raises(ValueError, match="llm blanking"):
        blank_important(["Find 1 of 2."], "llm", generate=junk)
    variants = paraphrase_variants(["Find [BLANK] now.", "Get [BLANK]."], 2, "llm", generate=junk,
                                   fallback=lambda ts, n: [[f"{t} v{j}" for j in range(n)] for t in ts])
    assert variants == [["Find [BLANK] now. v0", "Find [BLANK] now. v1"], ["Get [BLANK]. v0", "Get [BLANK]. v1"]]


# --- features and the staged pipeline ----------------------------------------------------------

def test_layer_features_have_every_layer_and_pool_the_texts_tokens(tiny_model):
    model, tok = load_lm(tiny_model, device="cpu")
    short, long = "Find the sum.", QUESTIONS[7] + " " + QUESTIONS[6]
    alone = extract_layer_features(tiny_model, [short], device="cpu")
    both = layer_features(model, tok, [short, long])
    assert alone.shape == (1, 3, 64) and both.shape == (2, 3, 64)
    assert not np.allclose(both[0], both[1])
    ids = tok(short)["input_ids"]  # layer 0 = the mean input embedding of every token, the BOS too (the code)
    assert ids[0] == tok.bos_token_id
    table = model.get_input_embeddings().weight.detach().numpy()
    np.testing.assert_allclose(alone[0, 0], table[ids].mean(axis=0), atol=1e-6)
    own = layer_features(model, tok, [short, long], special_tokens=False)   # the text's own tokens
    np.testing.assert_allclose(own[0, 0], table[ids[1:]].mean(axis=0), atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_texts_layer_features_do_not_depend_on_the_texts_extracted_with_it(tiny_model, dtype):
    """Bit-identical features for a text alone, among longer and shorter texts and in another order, in fp32
    and in bf16 (a padded batch moved them: the kernels' summation order follows the batch's shapes)."""
    model, tok = load_lm(tiny_model, device="cpu", dtype=dtype)
    texts = [QUESTIONS[i % 8] + " Explain." * (4 * i) for i in range(6)]
    alone = np.concatenate([layer_features(model, tok, [t], max_length=96) for t in texts])
    for order in (list(range(6)), [5, 0, 3, 1, 4, 2]):
        together = layer_features(model, tok, [texts[i] for i in order], max_length=96)
        np.testing.assert_array_equal(together, alone[order])


def test_pipeline_from_questions_to_metrics_and_resumable_shards(tiny_model, tmp_path):
    questions = pd.DataFrame({"id": ["q0", "q1"], "text": QUESTIONS[:2]})
    table = build_perturbations(questions, neighbours={"backend": "retrieval", "pool": QUESTIONS[2:]},
                                n_neighbours=3, n_variants=2)
    assert len(table) == 2 * 4 * 4 and table["role"].value_counts().eq(2).all()
    assert set(table["role"]) >= {role_name(-1, "original"), "variant_1", "neighbour_2_blank", "neighbour_0_variant_1"}
    blank = table.set_index(["id", "neighbour", "form", "variant"])["text"]
    for (qid, k, form, j), text in blank.items():
        assert count_blanks(text) == (0 if form == "original" else count_blanks(blank[(qid, k, "blank", -1)]))

    out = tmp_path / "features"
    extract_features(table, tiny_model, out, shard_size=12, device="cpu")
    shards = sorted((out / "shards").glob("*.safetensors"))
    stamps = [p.stat().st_ino for p in shards]  # a rewrite is a rename of a new file: a new inode
    edited = table.copy()
    edited.loc[30, "text"] = edited.loc[30, "text"] + " Explain."
    extract_features(edited, tiny_model, out, shard_size=12, device="cpu")
    assert [p.stat().st_ino == s for p, s in zip(shards, stamps)] == [True, True, False]
    stamps = [p.stat().st_ino for p in shards]
    os.utime(Path(tiny_model) / "config.json")  # a new mtime alone is no new model: nothing is stale
    extract_features(edited, tiny_model, out, shard_size=12, device="cpu")
    assert [p.stat().st_ino for p in shards] == stamps
    cfg = Path(tiny_model) / "config.json"  # other content in the same folder (as retraining into it): all stale
    cfg.write_text(cfg.read_text() + "\n")
    extract_features(edited, tiny_model, out, shard_size=12, device="cpu")
    assert all(p.stat().st_ino != s for p, s in zip(shards, stamps))
    index, feats = load_features(out)
    assert feats.shape == (32, 3, 64) and index["text"].tolist() == edited["text"].tolist()

    metrics = compute_metrics(index, feats)
    assert metrics.shape == (4, 5) and metrics["layer"].tolist() == [0, 1, 0, 1]   # hidden_states[0..L-1]
    assert np.isfinite(metrics[["rsm", "dc", "rsi"]].to_numpy()).all()
    assert (metrics["dc"].abs() <= 1 + 1e-9).all()
    with pytest.raises(ValueError, match="missing role"):
        group_rows(index.drop(index=5))


# --- output-level baselines --------------------------------------------------------------------

def test_recall_cdd_and_self_critique_on_hand_numbers():
    np.testing.assert_allclose(recall_score([-3.0, -1.0], [-2.0, -2.0]), [1.5, 0.5])
    greedy = list(range(20))  # mean length (20 + 20 + 19 + 20 + 20) / 5 = 19.8: alpha * l = 0.99 edits
    samples = [list(range(20)), list(range(19)), [0] * 20, list(range(1, 20)) + [99]]
    assert cdd_peakedness(greedy, samples, alpha=0.05) == pytest.approx(0.25)   # the longest (20): 0.5
    assert cdd_peakedness("abcd", ["abcd", "abce"], alpha=0.25) == pytest.approx(1.0)
    assert self_critique_similarity([1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 0.0]) == pytest.approx(0.75)
    assert self_critique_similarity([1.0, 0.0], [0.0, 1.0]) == pytest.approx(0.0)
    a, b = [1.0, 2.0], [2.0, 1.0, 2.0]
    assert self_critique_similarity(a, b) == pytest.approx(4.0 / (math.sqrt(5) * 3.0) * 2 / 3)


def test_topk_step_statistics_follow_the_codes_reading_of_vllm_logprobs():
    """``process_single_output`` on fixed logits: top-k log-probabilities (unnormalised), p clipped at 1e-12."""
    import torch

    logits = torch.tensor([[[2.0, 1.0, 0.0, -1.0, -30.0]], [[0.0, 0.0, 0.0, 0.0, 0.0]]])   # 2 steps, batch 1
    chosen = torch.tensor([[1, 4]])
    stats = topk_step_stats(list(logits), chosen, k=3)
    for t in range(2):
        logp = torch.log_softmax(logits[t, 0].double(), -1).numpy()
        top = np.sort(logp)[::-1][:3]                         # vLLM's logprobs=3 entries of this step
        p = np.clip(np.exp(top), 1e-12, None)
        mu = np.sum(p * top)
        assert stats["logprobs"][0, t] == pytest.approx(logp[chosen[0, t]])      # exact, even outside the top 3
        assert stats["entropies"][0, t] == pytest.approx(-np.sum(p * np.log(p)))
        assert stats["mus"][0, t] == pytest.approx(mu)
        assert stats["sigmas"][0, t] == pytest.approx(np.sqrt(max(np.sum(p * top ** 2) - mu ** 2, 1e-6)))


def test_response_level_baselines_as_the_lara_code_defines_them():
    lp = [-0.1, -2.0, -0.5, -3.0, -0.2, -1.0, -0.3, -0.4, -0.6, -0.7]
    assert ppl_response(lp) == pytest.approx(-np.exp(-np.mean(lp)))           # PPLDetector, direction -1
    assert min_k_response(lp, 0.2) == pytest.approx(-np.mean([-3.0, -2.0]))   # MinkDetector: -mean(lowest int(0.2 n))
    mus, sigmas = np.full(10, -1.0), np.full(10, 0.5)
    z = (np.array(lp) - mus) / sigmas
    assert min_k_plus_plus_response(lp, mus, sigmas, 0.2) == pytest.approx(np.mean(np.sort(z)[:2]))
    assert recall_lara_code(lp, [-1.0] * 4) == pytest.approx(-1.0 / np.mean(lp))   # RecallDetector: LL(pert) / LL(orig)
    e1, e2 = [1.0, 2.0], [2.0, 1.0, 2.0]
    assert dime_score(e1, e2) == pytest.approx(-(4.0 / (math.sqrt(5) * 3.0)) * 2 / 3)   # DIMEDetector, direction -1
    assert perturbed_question("Q?", "[NOTE]", "[END]") == "[NOTE] Q? [END]"
    gen = lambda lps, ents: Generation(text="", token_ids=(), entropies=tuple(ents), logprobs=tuple(lps),  # noqa: E731
                                       mus=tuple(mus), sigmas=tuple(sigmas))
    scores = response_scores([gen(lp, e1)], [gen([-1.0] * 4, e2)], min_k=0.2)
    assert set(scores) == {"recall_lara_code", "ppl_response", "min_k_response@0.2",
                           "min_k_plus_plus_response@0.2", "dime"}
    assert scores["dime"][0] == pytest.approx(dime_score(e1, e2))
    # CDD's distance: both cut to 100 tokens once the shorter exceeds 100 (levenshtein_distance_token)
    assert cdd_distance(list(range(150)), list(range(100)) + [-1] * 60) == 0
    assert cdd_distance(list(range(99)), list(range(99)) + [-1] * 60) == 60


def test_model_driven_baselines_on_the_tiny_model(tiny_model):
    model, tok = load_lm(tiny_model, device="cpu")
    ids = tok(QUESTIONS[0])["input_ids"]
    assert mean_log_likelihood(model, tok, [QUESTIONS[0]])[0] == pytest.approx(token_logprobs(model, [ids])[0].mean())
    model, tok = load_lm(tiny_model, device="cpu", padding_side="left")
    scores = recall_scores(model, tok, QUESTIONS[:2], QUESTIONS[5:7])
    assert scores.shape == (2,) and np.all(scores > 0)
    gens = generate(model, tok, QUESTIONS[:2], max_new_tokens=6, do_sample=True, num_return_sequences=3, batch_size=2)
    assert [len(g) for g in gens] == [3, 3]
    assert all(0 <= e <= math.log(len(tok)) + 1e-6 for g in gens for x in g for e in x.entropies)
    completions = text_generator(tiny_model, max_new_tokens=4, backend_options={"device": "cpu"})(QUESTIONS[:3])
    assert len(completions) == 3 and all(isinstance(c, str) for c in completions)
    answers = dict(max_new_tokens=6, batch_size=8, top_k=50)
    sampling = dict(n_samples=3, temperature=0.8, top_p=0.95, alpha=0.05, seed=0)
    cdd = cdd_scores(model, tok, QUESTIONS[:2], **sampling, **answers)
    sc = self_critique_scores(model, tok, QUESTIONS[:2], **answers)
    assert np.all((cdd >= 0) & (cdd <= 1)) and np.all((sc >= 0) & (sc <= 1 + 1e-9))
    first = greedy_answers(model, tok, QUESTIONS[:2], **answers)  # shared answers give the same scores
    assert np.array_equal(cdd_scores(model, tok, QUESTIONS[:2], **sampling, **answers, greedy=first), cdd)
    assert np.array_equal(self_critique_scores(model, tok, QUESTIONS[:2], **answers, first=first), sc)


def test_llm_fallback_gives_way_to_retrieval_token_loss_and_wordnet(tiny_model):
    """``lara.llm.fallback`` (the rehearsal's): a stand-in that never answers in format still yields a
    whole perturbation table, from retrieval neighbours, ``token_loss`` blanks under the instruction model
    and WordNet variants; without it the stage fails."""
    from mialab.lara.stages import backend_specs, perturbation_table

    spec = {"llm": {"model": tiny_model, "fallback": True, "backend_options": {"device": "cpu"}},
            "neighbours": {"backend": "llm", "n": 2, "temperature": 0.8, "embedding_dtype": "float32"},
            "blank": {"backend": "llm", "num_blanks": 1, "temperature": 0.3},
            "paraphrase": {"backend": "llm", "n_variants": 2, "temperature": 0.7, "rate": 0.5, "min_count": 0,
                           "seed": 0}}
    questions = pd.DataFrame({"id": ["q0"], "text": [QUESTIONS[0]], "set": ["evaluated"]})
    pool = QUESTIONS[1:]

    def junk(prompts: list[str], **_) -> list[str]:
        return ["" for _ in prompts]

    table = perturbation_table(questions, backend_specs(spec, pool, junk), n_neighbours=2, n_variants=2)
    neighbours = table.loc[(table["neighbour"] >= 0) & (table["form"] == "original"), "text"]
    assert len(table) == 3 * 4 and set(neighbours) <= set(pool)
    assert table.loc[table["form"] != "original", "text"].map(count_blanks).ge(1).all()
    with pytest.raises(ValueError, match="llm neighbours"):
        perturbation_table(questions, backend_specs({**spec, "llm": {"model": tiny_model}}, pool, junk))


def test_a_neighbour_whose_llm_blank_stays_invalid_leaves_its_group_down_to_two_as_the_code():
    """The code (``rep_stiff.py``): a similar question without a valid incomplete version leaves RSM, DC and RSI,
    the group scored while ``min_valid_similars`` (2) remain. Here it leaves the table, the question keeps its
    other neighbours (renumbered), and the metrics of a question with fewer neighbours are those of its own
    group alone; the question's own blank invalid, or one neighbour left, is an error. An LLM short of neighbours
    is asked again up to the code's 7 times, and the question keeps the 2 or more it has."""
    from mialab.lara.stages import backend_specs, perturbation_table

    spec = {"llm": {"model": "an/instruct-model"},
            "neighbours": {"backend": "llm", "n": 3, "temperature": 0.8, "embedding_dtype": "float32"},
            "blank": {"backend": "llm", "num_blanks": 1, "temperature": 0.3},
            "paraphrase": {"backend": "wordnet", "n_variants": 2, "rate": 0.5, "min_count": 0, "seed": 0}}
    neighbours = {"q0": ["Count the primes below 40.", "Count the squares below 90.", "Count the cubes below 99."],
                  "q1": ["Add the digits of 42.", "Add the digits of 97.", "Add the digits of 35."]}
    questions = pd.DataFrame({"id": ["q0", "q1"], "text": ["Count the primes below 50.", "Add the digits of 73."],
                              "set": ["evaluated"] * 2})

    def generate(prompts: list[str], *, temperature: float, attempt: int = 0) -> list[str]:
        out = []
        for p in prompts:
            if "similar problems" in p:
                out.append(json.dumps(neighbours["q0" if "primes below 50" in p else "q1"]))
            else:   # blanking: the cubes (q0) never get a valid blank, nor, with `broken`, two of q1's
                text = p.rsplit("1. ", 1)[1].strip()
                out.append(text if "cubes" in text or broken & {text} else text.replace("digits", BLANK, 1)
                           .replace("primes", BLANK).replace("squares", BLANK))
        return out

    broken: set[str] = set()
    table = perturbation_table(questions, backend_specs(spec, [], generate), n_neighbours=3, n_variants=2)
    kept = table[table["form"] == "original"].groupby("id")["neighbour"].max() + 1
    assert kept.to_dict() == {"q0": 2, "q1": 3}                      # the cubes left q0's group
    assert "Count the cubes below 99." not in set(table["text"])
    assert set(table.loc[(table["id"] == "q0") & (table["role"] == "neighbour_1"), "text"]) == {
        "Count the squares below 90."}                                # renumbered
    feats = np.random.default_rng(0).normal(size=(len(table), 3, 4))
    ragged = compute_metrics(table, feats)
    alone = compute_metrics(table[table["id"] == "q0"], feats[(table["id"] == "q0").to_numpy()])
    pd.testing.assert_frame_equal(ragged[ragged["id"] == "q0"].reset_index(drop=True), alone)
    broken = {"Add the digits of 42.", "Add the digits of 97."}
    with pytest.raises(ValueError, match="question q1: 1 of 3 neighbours have a valid blank, 2 needed"):
        perturbation_table(questions, backend_specs(spec, [], generate), n_neighbours=3, n_variants=2)
    broken = {"Add the digits of 73."}
    with pytest.raises(ValueError, match="question q1: its blank stays invalid"):
        perturbation_table(questions, backend_specs(spec, [], generate), n_neighbours=3, n_variants=2)
    # an LLM that writes 2 of the 3 neighbours asked for, each of the code's 7 times: the question keeps the 2
    asked, broken = [], set()
    neighbours["q1"] = neighbours["q1"][:2]
    counted = lambda prompts, **kw: asked.append(len(prompts)) or generate(prompts, **kw)  # noqa: E731
    table = perturbation_table(questions, backend_specs(spec, [], counted), n_neighbours=3, n_variants=2)
    assert (table[table["form"] == "original"].groupby("id")["neighbour"].max() + 1).to_dict() == {"q0": 2, "q1": 2}
    assert asked[:7] == [2] + [1] * 6                                # q1 asked again 6 times, then kept as it is
    neighbours["q1"] = neighbours["q1"][:1]
    with pytest.raises(ValueError, match="llm neighbours: 1 prompt.* still lack 2 valid"):
        perturbation_table(questions, backend_specs(spec, [], generate), n_neighbours=3, n_variants=2)


def test_the_perturbation_job_gets_the_gpus_of_its_instruction_models_engine():
    """``lara_perturbations`` with ``lara.llm``: vLLM's tensor_parallel_size GPUs (the paper config's 1), one
    on hf; model-free without it (the tiny world): no GPU."""
    import yaml
    from workflow_helpers import REPO, default_config, validated

    from mialab.pipeline.sizing import Sizing

    cfg = validated(yaml.safe_load((REPO / "configs" / "paper" / "lara_rl_models.yaml").read_text()))
    job = Sizing(cfg, environ={}).job("lara_perturbations")
    assert (job.kind, job.gpus, job.params_b > 5) == ("generate", 1, True)   # Qwen2.5-7B-Instruct
    cfg["lara"]["llm"]["backend_options"]["tensor_parallel_size"] = 2
    assert Sizing(cfg, environ={}).job("lara_perturbations").gpus == 2
    cfg["lara"]["llm"]["engine"] = "hf"
    assert Sizing(cfg, environ={}).job("lara_perturbations").gpus == 1
    assert Sizing(validated(default_config()), environ={}).job("lara_perturbations").gpus == 0


def test_self_critique_cuts_the_first_answer_to_the_context_as_the_code(tiny_model, monkeypatch):
    """The code (``generate_full_data.py``) puts at most ``context - len(encode(prompt)) - 512`` tokens of
    the first answer in the critique prompt and lets the re-answer run to ``context - len(encode(critique
    prompt)) - 32`` tokens (at least 1); a model of short context cuts both. The headroom exceeds the critique
    template's own tokens (~150 of this tokenizer's), as the code's 512 does for its models, so that the critique
    prompt fits the context: vLLM, which the code runs, refuses one that does not, and so does the hf engine."""
    model, tok = load_lm(tiny_model, device="cpu", padding_side="left")
    questions, answers, headroom = QUESTIONS[:2], dict(max_new_tokens=24, batch_size=8, top_k=50), 160
    first = greedy_answers(model, tok, questions, **answers)
    prompts = [format_prompt(tok, q) for q in questions]
    seen = []

    def spy(model, tokenizer, texts, **options):
        seen.append((texts, options["max_new_tokens"]))
        return greedy_answers(model, tokenizer, texts, **options)

    monkeypatch.setattr(baselines, "greedy_answers", spy)
    tpl = load_template("self_critique")
    whole = self_critique_scores(model, tok, questions, **answers, headroom=headroom, first=first)
    assert seen[-1] == ([tpl.format(question=q, response=f.text) for q, f in zip(questions, first)], 24)
    context = max(len(tok.encode(p)) for p in prompts) + headroom + 5  # room for 5 tokens of the first answer
    monkeypatch.setattr(model.config, "max_position_embeddings", context)
    short = self_critique_scores(model, tok, questions, **answers, headroom=headroom, first=first)
    critiques, n_tokens = seen[-1]
    for q, p, f, c in zip(questions, prompts, first, critiques):
        budget, ids = context - len(tok.encode(p)) - headroom, tok.encode(f.text)
        assert 5 <= budget < len(ids)   # counted with the BOS, as tokenizer.encode counts it
        assert c == tpl.format(question=q, response=tok.decode(ids[:budget], skip_special_tokens=True))
    assert n_tokens == 1 == max(critique_budget(tok, format_prompt(tok, c), context=context, max_new_tokens=24)
                                for c in critiques)   # the context is used up: one token, the code's floor
    second = greedy_answers(model, tok, critiques, **{**answers, "max_new_tokens": 1})
    np.testing.assert_allclose(short, [self_critique_similarity(f.entropies, s.entropies)
                                       for f, s in zip(first, second)])
    assert not np.allclose(short, whole)


def _seed_table(evaluated: list[int], reference: list[int]) -> pd.DataFrame:
    """A perturbation table's original rows: evaluated questions and reference questions."""
    rows = [(f"q{i}", QUESTIONS[i], "evaluated") for i in evaluated] + [(f"r{i}", QUESTIONS[i], "reference")
                                                                         for i in reference]
    return pd.DataFrame({"id": [r[0] for r in rows], "text": [r[1] for r in rows], "set": [r[2] for r in rows],
                         "form": "original", "neighbour": -1})


def test_baselines_of_several_seeds_answer_shared_questions_once_and_keep_each_seeds_recall_prefix(tiny_model):
    from mialab.lara.stages import baseline_scores

    cdd = {"n_samples": 3, "temperature": 0.8, "top_p": 0.95, "alpha": 0.05, "max_new_tokens": 6, "seed": 0}
    spec = dict(recall={"prefix_size": 1, "max_words": 12}, cdd=cdd, self_critique={"max_new_tokens": 6},
                top_k_logprobs=50, batch_size=4, device="cpu", dtype="float32",
                responses={"min_k": 0.2, "perturbation_prefix": "[NOTE]", "perturbation_suffix": "[END]"})
    a, b = _seed_table([0, 1, 2], [4, 5]), _seed_table([1, 2, 3], [6, 7])
    merged = baseline_scores(tiny_model, [a, b], **spec)
    alone = [baseline_scores(tiny_model, [t], **spec)[0] for t in (a, b)]
    for m, s, t in zip(merged, alone, (a, b)):
        assert m["id"].tolist() == t.loc[t["set"] == "evaluated", "id"].tolist()
        for column in ("lara/recall", "lara/self_critique", "lara/recall_lara_code", "lara/ppl_response",
                       "lara/min_k_response@0.2", "lara/min_k_plus_plus_response@0.2", "lara/dime"):
            # deterministic: the same as scoring the seed alone
            np.testing.assert_allclose(m[column], s[column], rtol=1e-4, atol=1e-5)
        assert m["lara/cdd"].between(0, 1).all()
    shared = [m.set_index("id").loc[["q1", "q2"]] for m in merged]
    np.testing.assert_array_equal(shared[0]["lara/cdd"], shared[1]["lara/cdd"])   # answered once
    assert not np.allclose(shared[0]["lara/recall"], shared[1]["lara/recall"])   # another seed, another prefix
    clash = b.assign(text=b["text"].where(b["id"] != "q1", "another text"))
    with pytest.raises(ValueError, match="1 question id"):
        baseline_scores(tiny_model, [a, clash], **spec)


def test_wordnet_cache_folder_is_configurable(monkeypatch, tmp_path):
    from mialab.text.wordnet import cache_dir

    monkeypatch.setenv("MIALAB_WORDNET_CACHE", str(tmp_path / "wn"))
    assert cache_dir() == tmp_path / "wn"
