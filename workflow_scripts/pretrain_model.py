"""Rule pretrain_model: the tiny base model (or the no-members control) from scratch."""

from mialab.core.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

import shutil

import pandas as pd

from mialab.core.io import atomic_directory, remove_stale_temporaries, write_manifest
from mialab.data.mixing import check_filler
from mialab.data.sources import read_text
from mialab.lm.loading import load_tokenizer
from mialab.lm.tiny import init_model, llama_config, save_model
from mialab.training.checkpoints import check_steps, checkpoint_root
from mialab.training.pretrain import PretrainSettings, build_corpus, filler_documents, pack_blocks, pretrain

spec = snakemake.params.spec  # noqa: F821
out = snakemake.output  # noqa: F821
remove_stale_temporaries(out.model, out.manifest)  # left by a killed earlier attempt
checkpoints = checkpoint_root(out.model)
train, arch = PretrainSettings.from_config(spec["train"]), spec["architecture"]
tok = load_tokenizer(snakemake.input.tokenizer)  # noqa: F821
members = []
for m, pool_path in zip(spec["members"], snakemake.input.member_pools):  # noqa: F821
    pool = pd.read_parquet(pool_path)
    members.append((pool.loc[pool["label"] == 1, "text"].tolist(), m["repeats"]))
filler = filler_documents(read_text(snakemake.input.filler))  # noqa: F821
filler = filler[: max(1, round(spec["filler_fraction"] * len(filler)))]
check_filler(snakemake.wildcards.model, filler, [t for texts, r in members for t in texts * int(r)])  # noqa: F821
docs = build_corpus(filler, members, seed=train.seed)
blocks = pack_blocks(docs, tok, train.seq_len)
config = llama_config(len(tok), hidden_size=arch["hidden_size"], num_layers=arch["num_layers"],
                      num_heads=arch["num_heads"], intermediate_size=arch.get("intermediate_size"),
                      max_position_embeddings=max(arch["max_position_embeddings"], train.seq_len), tokenizer=tok)
model = init_model(config, train.seed)
losses = pretrain(model, blocks, train, checkpoint_dir=str(checkpoints))
steps = check_steps(len(losses), train.steps, f"pretraining {out.model}")
with atomic_directory(out.model) as tmp:
    save_model(model, tok, tmp)
write_manifest({**snakemake.params.manifest, "parameters": sum(p.numel() for p in model.parameters()),  # noqa: F821
               "blocks": int(len(blocks)), "member_documents": sum(len(t) * r for t, r in members), "steps": steps,
               "final_loss": losses[-1], "loss_curve_every_50": losses[::50]}, out.manifest, outputs=out)
shutil.rmtree(checkpoints, ignore_errors=True)
