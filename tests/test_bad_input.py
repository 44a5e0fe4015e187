"""Bad input fails at its rule with a clear message and leaves no half-written output."""

import pandas as pd

from workflow_helpers import default_config, make_workdir, snakemake


def _only_wikimia(source: str, n_per_class: int = 64) -> dict:
    """The default config with the wikimia dataset changed (the test targets its splits only)."""
    cfg = default_config()
    cfg["datasets"]["wikimia"]["pool"]["source"] = source
    cfg["datasets"]["wikimia"]["split"]["n_per_class"] = n_per_class
    return cfg


def test_missing_column_fails_in_build_pool_without_output(tmp_path):
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"text": ["a b c d"] * 4, "label": [1, 0, 1, 0]}).to_parquet(bad)
    wd = make_workdir(tmp_path / "wd", _only_wikimia(str(bad)))
    proc = snakemake(wd, "--cores", "1", "--keep-going", "splits", check=False)
    assert proc.returncode != 0
    logs = "".join(p.read_text() for p in (wd / "results/logs/build_pool/wikimia").rglob("*.log"))
    assert "missing column(s) ['input']" in logs
    assert not list((wd / "results/pools/wikimia").rglob("pool.parquet"))
    assert not list((wd / "results").rglob("*.tmp"))


def test_split_larger_than_pool_fails_in_build_split_without_output(tmp_path):
    wd = make_workdir(tmp_path, _only_wikimia("resources/data/wikimia/WikiMIA_length64.parquet", 400))
    proc = snakemake(wd, "--cores", "1", "--keep-going", "splits", check=False)
    assert proc.returncode != 0
    logs = "".join(p.read_text() for p in (wd / "results/logs/build_split/wikimia").rglob("*.log"))
    assert "dataset 'wikimia': asked for 400 per class" in logs
    assert "lower datasets.wikimia.split.n_per_class to at most" in logs and "cap_to_min_class" not in logs
    assert list((wd / "results/pools/wikimia").rglob("pool.parquet"))
    assert not list((wd / "results/splits/wikimia").rglob("split.parquet"))
