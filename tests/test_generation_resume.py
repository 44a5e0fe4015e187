"""Resumable generation (issue #22, item 4): rollouts and text completions written in parts; a run killed
after its first part resumes to the same bytes as an uninterrupted one; corrupt or foreign parts are redone."""

from __future__ import annotations

import os
import shutil

import pandas as pd
import pytest
from workflow_helpers import ns_sampling

from mialab.lm import engine, hf_backend
from mialab.lm.engine import Parts, parts_folder, rollout_generator, run_rollouts_many, write_rollouts

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SPLIT = pd.DataFrame({
    "id": ["m1", "m2", "n1", "n2", "n3"],
    "prefix": ["the quick brown fox", "once upon a time", "to be or", "a tiny model", "the lazy dog"],
    "suffix": ["jumps over the lazy dog", "there was a tiny model", "not to be", "samples words", "sleeps"],
})
TINY_MODEL = {"corpus": [" ".join(SPLIT["prefix"] + " " + SPLIT["suffix"])] * 50, "min_frequency": 1}
OPTIONS = {"batch_size": 2, "device": "cpu"}


class Killed(Exception):
    pass


@pytest.fixture(autouse=True)
def small_parts(monkeypatch):
    """Parts of one batch (2 candidates): the split's 5 candidates make 3 parts."""
    monkeypatch.setattr(hf_backend, "PART_CANDIDATES", 2)


def rollouts(model: str, out, *, seed: int = 0, parts: bool = True) -> bytes:
    (table,) = run_rollouts_many([SPLIT], [ns_sampling(n=3, max_new_tokens=6, seed=seed)], model=model,
                                 template="Continue: {prefix}", prompt_format="chat", backend_options=OPTIONS,
                                 parts=[parts_folder(out)] if parts else None)
    write_rollouts(table, out)
    return out.read_bytes()


def count_saves(monkeypatch, *, die_after: int | None = None) -> list:
    """Record every part written; raise :class:`Killed` after the ``die_after``-th."""
    saved, save = [], Parts.save

    def recorded(self, key, start, stop, frame):
        save(self, key, start, stop, frame)
        saved.append(start)
        if die_after is not None and len(saved) == die_after:
            raise Killed

    monkeypatch.setattr(Parts, "save", recorded)
    return saved


def killed_run(tiny_model, out, **kw) -> None:
    with pytest.MonkeyPatch.context() as m:
        count_saves(m, die_after=1)
        with pytest.raises(Killed):
            rollouts(tiny_model, out, **kw)


def test_parts_give_the_bytes_of_an_unchunked_call(tiny_model, tmp_path, monkeypatch):
    saved = count_saves(monkeypatch)
    assert rollouts(tiny_model, tmp_path / "parts.parquet") == rollouts(tiny_model, tmp_path / "whole.parquet",
                                                                       parts=False)
    assert saved == [0, 2, 4]


def test_killed_rollouts_resume_from_the_first_part_to_the_same_bytes(tiny_model, tmp_path, monkeypatch):
    whole = rollouts(tiny_model, tmp_path / "whole.parquet", parts=False)
    out = tmp_path / "rollouts.parquet"
    killed_run(tiny_model, out)
    assert not out.exists() and len(list(parts_folder(out).glob("*.parquet"))) == 1
    saved = count_saves(monkeypatch)
    assert rollouts(tiny_model, out) == whole
    assert saved == [2, 4]  # the first part was reused


def test_corrupt_part_is_regenerated(tiny_model, tmp_path, monkeypatch):
    whole = rollouts(tiny_model, tmp_path / "whole.parquet", parts=False)
    out = tmp_path / "rollouts.parquet"
    killed_run(tiny_model, out)
    (part,) = parts_folder(out).glob("*.parquet")
    part.write_bytes(part.read_bytes()[:100])  # truncated, as by a kill mid-copy
    saved = count_saves(monkeypatch)
    assert rollouts(tiny_model, out) == whole
    assert saved == [0, 2, 4]


def test_part_of_other_settings_is_not_reused(tiny_model, tmp_path, monkeypatch):
    whole = rollouts(tiny_model, tmp_path / "whole.parquet", parts=False)
    out, other = tmp_path / "rollouts.parquet", tmp_path / "other.parquet"
    killed_run(tiny_model, other, seed=1)
    killed_run(tiny_model, out)
    (own,), (foreign,) = parts_folder(out).glob("*.parquet"), parts_folder(other).glob("*.parquet")
    shutil.copy(foreign, own)  # seed 1's first part under the name seed 0's would have
    saved = count_saves(monkeypatch)
    assert rollouts(tiny_model, out) == whole
    assert saved == [0, 2, 4]
    shutil.copytree(parts_folder(other), parts_folder(out), dirs_exist_ok=True)  # other settings, other names
    saved.clear()
    assert rollouts(tiny_model, out) == whole
    assert saved == []  # seed 0's parts are all there; seed 1's are never read


def test_text_completions_resume_to_the_same_continuations(tiny_model, tmp_path, monkeypatch):
    prompts = list(SPLIT["prefix"])
    settings = {"max_new_tokens": 5, "temperature": 1.0, "seed": 3}
    plain = rollout_generator(tiny_model, backend_options=OPTIONS)(prompts, **settings)
    folder = tmp_path / "generations.parquet.parts"
    generate = rollout_generator(tiny_model, backend_options=OPTIONS, parts=folder)
    with monkeypatch.context() as m:
        count_saves(m, die_after=1)
        with pytest.raises(Killed):
            generate(prompts, **settings)
    saved = count_saves(monkeypatch)
    assert generate(prompts, **settings) == plain
    assert saved == [2, 4]
    Parts(folder).remove()
    assert not folder.exists()


def test_hf_offset_must_fall_on_a_batch_boundary(tiny_model):
    backend = engine.start_backend("hf", tiny_model, OPTIONS)
    assert backend.part_size == 2
    with pytest.raises(ValueError, match="batch boundary"):
        backend.generate([[1, 2]], ns_sampling(), frozenset({0}), offset=1)
