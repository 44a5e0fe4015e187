# CPU rehearsal of a paper config (`--config rehearsal=true`, mialab/pipeline/rehearsal.py; the hook is in
# rules/common.smk, with its input functions stand_in and stand_ins_of): rule rehearsal_model builds the tiny stand-in of each hub model the config names,
# an ordinary HF folder (safetensors, a trained tokenizer with the family's special tokens and chat
# template) that the rehearsed config's `kind: hf` entries point at. A stand-in named outside the
# models section (e.g. the encoder of Qwen/Qwen3-Embedding-8B) is an input of every models-section
# stand-in, so every stage that reads it (each also reads a model) runs after it exists.
from mialab.pipeline.rehearsal import TOKENIZER_CORPUS


rule rehearsal_model:
    input:
        corpus=TOKENIZER_CORPUS,
        detached=lambda wc: [] if stand_in(wc).path("model") in PLAN.detached() else PLAN.detached(),
    output:
        model=directory(PLAN.pattern("rehearsal", "model")),
        manifest=PLAN.pattern("rehearsal", "manifest.json"),
    params:
        manifest=lambda wc: stand_in(wc).manifest,
    priority: 20  # every model stage waits for it
    threads: 1
    log:
        PLAN.stage_log("rehearsal_model", "rehearsal"),
    benchmark:
        PLAN.stage_benchmark("rehearsal_model", "rehearsal")
    script:
        "../workflow_scripts/rehearsal_model.py"
