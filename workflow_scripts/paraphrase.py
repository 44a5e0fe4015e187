"""Rules paraphrase (a split) and paraphrase_pool (a pool's members): the paraphrased setting of one split or pool."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import pandas as pd

from mialab.core.io import write_manifest, write_parquet
from mialab.data.paraphrase import paraphrase_members, paraphrase_setting, paraphraser_for
from mialab.data.schema import validate_split

params, output, wc = snakemake.params, snakemake.output, snakemake.wildcards  # noqa: F821
paraphraser = paraphraser_for(params.spec, family=params.family)
if "split" in output.keys():
    name = f"dataset {wc.dataset!r} seed {wc.seed}"
    split = validate_split(pd.read_parquet(snakemake.input.split), name=f"{name} split")  # noqa: F821
    parts, info = paraphrase_setting(split, paraphraser, experiment="existing_model")
    out, path = validate_split(parts["evaluate"], name=f"{name} paraphrased split"), output.split
    assert out["id"].tolist() == split["id"].tolist() and out["label"].tolist() == split["label"].tolist()
else:
    name = f"dataset {wc.dataset!r} pool"
    pool = validate_split(pd.read_parquet(snakemake.input.pool), name=name)  # noqa: F821
    out, path = paraphrase_members(pool, paraphraser), output.pool
    members = (pool["label"] == 1).to_numpy()
    changed = int((out["text"].to_numpy()[members] != pool["text"].to_numpy()[members]).sum())
    info = {"experiment": "finetune", "setting": {"train": "paraphrased", "evaluate": "original"},
            "paraphraser": {"backend": paraphraser.backend, **paraphraser.options},
            "n_rows": int(members.sum()), "n_changed": changed, "fraction_changed": changed / max(1, members.sum())}
if info["n_changed"] == 0:
    raise ValueError(f"{name}: the {paraphraser.backend} paraphraser changed none of {info['n_rows']} texts")
print({k: v for k, v in info.items() if k != "paraphraser"})
write_parquet(out, path)
write_manifest({**params.manifest, "paraphrase": info}, output.manifest, outputs=output)
