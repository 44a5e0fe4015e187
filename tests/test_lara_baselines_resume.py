"""LaRA's baselines resume (issue #22): generated a part at a time (mialab.lara.stages.baseline_scores) they are
the scores of one pass over all questions, and the script of rule lara_baselines, killed by SIGKILL once a part
is on disk, reruns from its parts (its log says which) to the bytes of the job run uninterrupted."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from test_generation_kill import (
    manifest_but_seconds,
    part_starts,
    reused_parts,
    script_job,
    sigkill_after_a_part,
    start,  # noqa: F401 (the fixture)
)

from mialab.core.io import write_parquet
from mialab.lm.engine import parts_folder

WORDS = "find the number of ways to choose two sides of a square circle triangle whose area sum is seven".split()
BATCH, SAMPLES = 4, 2   # a part: lcm(4 answers, 4 // 2 CDD questions) = 4 questions
PARTS = 6
QUESTIONS = [" ".join(WORDS[(5 * i + k) % len(WORDS)] for k in range(4 + 3 * (i % 5))) + "?"
             for i in range(PARTS * BATCH)]
TINY_MODEL = {"corpus": QUESTIONS * 4, "min_frequency": 1, "hidden_size": 32, "num_layers": 1}
SPEC = {"recall": {"prefix_size": 1, "max_words": 12}, "top_k_logprobs": 50, "batch_size": BATCH, "device": "cpu",
        "dtype": "float32", "self_critique": {"max_new_tokens": 16, "headroom": 32},
        "cdd": {"n_samples": SAMPLES, "temperature": 0.8, "top_p": 0.95, "alpha": 0.05, "max_new_tokens": 16,
                "seed": 0},
        "responses": {"min_k": 0.2, "perturbation_prefix": "[NOTE]", "perturbation_suffix": "[END]"}}


def seed_table(evaluated: range, reference: list[str]) -> pd.DataFrame:
    """A perturbation table's original rows: evaluated questions of :data:`QUESTIONS` and reference questions."""
    rows = [(f"q{i}", QUESTIONS[i], "evaluated") for i in evaluated] + [(f"r{i}", t, "reference")
                                                                        for i, t in enumerate(reference)]
    return pd.DataFrame({"id": [r[0] for r in rows], "text": [r[1] for r in rows], "set": [r[2] for r in rows],
                         "form": "original", "neighbour": -1})


#: Two seeds sharing a third of the questions, each with its own ReCaLL prefix.
TABLES = [seed_table(range(16), ["what is the sum of two sides?"]), seed_table(range(8, 24), ["count the ways."])]


def test_baselines_in_parts_are_one_pass_and_a_rerun_generates_nothing(tiny_model, tmp_path, monkeypatch):
    """Parts whose Self-Critique re-answers decode other lengths than one pass over all questions does (a context
    that leaves some critiques few tokens) give its scores exactly; a rerun reads every part back."""
    import mialab.lara.baselines as baselines
    import mialab.lara.stages as stages

    budgets, critique_budget = [], baselines.critique_budget

    def recorded_budget(*args, **kwargs) -> int:
        budgets.append(critique_budget(*args, **kwargs))
        return budgets[-1]

    monkeypatch.setattr(baselines, "critique_budget", recorded_budget)
    monkeypatch.setattr(baselines, "context_length", lambda model: 280)
    assert stages.baseline_part_size(BATCH, SAMPLES) == BATCH
    one_pass = stages.baseline_scores(tiny_model, TABLES, **SPEC)
    budgets.clear()
    folder = tmp_path / "parts"
    parted = stages.baseline_scores(tiny_model, TABLES, **SPEC, parts=folder)
    assert part_starts(folder) == list(range(0, PARTS * BATCH, BATCH))
    assert len({max(budgets[i:i + BATCH]) for i in range(0, len(budgets), BATCH)}) > 1, budgets
    for a, b in zip(one_pass, parted, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)

    def no_generation(*args, **kwargs):
        raise AssertionError("a rerun generated answers")

    monkeypatch.setattr(stages, "greedy_answers", no_generation)
    for a, b in zip(one_pass, stages.baseline_scores(tiny_model, TABLES, **SPEC, parts=folder), strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def write_job(model: str, work: Path) -> Path:
    """A lara_baselines job of :data:`TABLES` in ``work`` (its outputs there too); returns its JSON file."""
    work.mkdir()
    seeds = range(len(TABLES))
    tables = [str(work / f"perturbations-{seed}.parquet") for seed in seeds]
    for table, path in zip(TABLES, tables):
        write_parquet(table, path)
    return script_job(work, "lara_baselines.py", input={"tables": tables, "model": model},
                      output={"scores": [str(work / f"seed-{seed}" / "baselines.parquet") for seed in seeds],
                              "manifest": str(work / "manifest.json")},
                      params={"spec": SPEC, "model_path": model, "manifest": {"config": SPEC}},
                      wildcards={"model": "target"}, config={"models": {"target": {"trust_remote_code": False}}},
                      log=str(work / "job.log"))


@pytest.mark.slow  # three processes that each start torch
def test_sigkilled_baselines_job_resumes_from_its_parts_to_the_uninterrupted_bytes(tiny_model, tmp_path,
                                                                                   start):  # noqa: F811
    whole, killed = write_job(tiny_model, tmp_path / "whole"), write_job(tiny_model, tmp_path / "killed")
    uninterrupted, proc = start(whole), start(killed)
    parts = parts_folder(killed.parent / "manifest.json")
    kept = sigkill_after_a_part(proc, parts)
    scores = [killed.parent / f"seed-{seed}" / "baselines.parquet" for seed in range(len(TABLES))]
    assert 1 <= len(kept) < PARTS and not any(p.exists() for p in scores), kept

    stale = killed.parent / ".manifest.json.k1ll3d.tmp"  # what a kill during the final write leaves
    stale.write_bytes(b"half a manifest")
    log = killed.parent / "job.log"
    log.write_text("")
    assert start(killed).wait(timeout=300) == 0, log.read_text()[-3000:]
    assert reused_parts(log.read_text()) == kept
    assert uninterrupted.wait(timeout=300) == 0, (whole.parent / "job.log").read_text()[-3000:]
    for path in scores:
        assert path.read_bytes() == (whole.parent / path.relative_to(killed.parent)).read_bytes(), path
    assert not parts.exists() and not stale.exists()
    assert manifest_but_seconds(whole) == manifest_but_seconds(killed)
