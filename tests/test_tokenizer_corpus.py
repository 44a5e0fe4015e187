"""The tokenizer's corpus (mialab.training.tokenizer_corpus): every text of every configured source."""

from __future__ import annotations

import pandas as pd
import yaml
from conftest import REPO

from mialab.training.tokenizer_corpus import corpus_texts


def test_string_columns_of_any_dtype_are_read(tmp_path):
    """pandas 3 reads text columns as its ``str`` dtype, not ``object``: both are corpus text, numbers are not."""
    table = pd.DataFrame({"text": pd.array(["alpha beta", "gamma"], dtype="str"), "n": [1, 2],
                          "obj": pd.Series(["delta", None], dtype=object)})
    table.to_parquet(tmp_path / "t.parquet")
    (tmp_path / "f.txt").write_text("whole file")
    assert sorted(corpus_texts([str(tmp_path / "t.parquet"), str(tmp_path / "f.txt")])) == \
        ["alpha beta", "delta", "gamma", "whole file"]


def test_the_tiny_worlds_tokenizer_reads_every_pool_text():
    """config.yaml trains its tokenizer on the filler and on every pool text (members and non-members alike)."""
    corpora = yaml.safe_load((REPO / "config.yaml").read_text())["tokenizer"]["corpora"]
    texts = list(corpus_texts([str(REPO / c) for c in corpora]))
    wikimia = pd.read_parquet(REPO / "resources/data/wikimia/WikiMIA_length64.parquet")
    assert set(wikimia["input"]) <= set(texts)
    assert len(texts) > len(wikimia) + 1
