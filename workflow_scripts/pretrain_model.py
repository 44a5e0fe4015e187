"""Rule pretrain_model: the tiny base model (or the no-members control) from scratch."""

from mialab.jobs import setup_job

setup_job(snakemake.log[0], snakemake.threads)  # noqa: F821

from pathlib import Path

import pandas as pd

from mialab.io import atomic_directory, write_json
from mialab.models.loading import load_tokenizer
from mialab.models.pretrain import build_corpus, filler_documents, pack_blocks, pretrain
from mialab.models.tiny import init_model, llama_config, save_model

spec = snakemake.params.spec  # noqa: F821
train, arch = spec["train"], spec["architecture"]
tok = load_tokenizer(snakemake.input.tokenizer)  # noqa: F821
members = []
for m, pool_path in zip(spec["members"], snakemake.input.member_pools):  # noqa: F821
    pool = pd.read_parquet(pool_path)
    members.append((pool.loc[pool["label"] == 1, "text"].tolist(), m["repeats"]))
filler = filler_documents(Path(snakemake.input.filler).read_text(encoding="utf-8"))  # noqa: F821
docs = build_corpus(filler[: max(1, round(spec.get("filler_fraction", 1.0) * len(filler)))], members, seed=train["seed"])
blocks = pack_blocks(docs, tok, train["seq_len"])
config = llama_config(len(tok), hidden_size=arch["hidden_size"], num_layers=arch["num_layers"],
                      num_heads=arch["num_heads"], intermediate_size=arch.get("intermediate_size"),
                      max_position_embeddings=max(arch["max_position_embeddings"], train["seq_len"]), tokenizer=tok)
model = init_model(config, train["seed"])
losses = pretrain(model, blocks, steps=train["steps"], batch_size=train["batch_size"], lr=train["lr"],
                  min_lr=train["min_lr"], warmup_steps=train["warmup_steps"], weight_decay=train["weight_decay"],
                  grad_clip=train["grad_clip"], seed=train["seed"], precision=train["precision"])
with atomic_directory(snakemake.output.model) as tmp:  # noqa: F821
    save_model(model, tok, tmp)
write_json({**snakemake.params.manifest, "parameters": sum(p.numel() for p in model.parameters()),  # noqa: F821
            "blocks": int(len(blocks)), "member_documents": sum(len(t) * r for t, r in members),
            "final_loss": losses[-1], "loss_curve_every_50": losses[::50]}, snakemake.output.manifest)  # noqa: F821
