# CPU rehearsal of a paper config (`--config rehearsal=true`, mialab/rehearsal.py; the hook is in
# rules/common.smk): rule rehearsal_model builds the tiny stand-in of each hub model the config names,
# an ordinary HF folder (safetensors, a trained tokenizer with the family's special tokens and chat
# template) that the rehearsed config's `kind: hf` entries point at. A stand-in encoder (e.g. of
# Qwen/Qwen3-Embedding-8B) is an input of every causal-LM stand-in, so every stage that reads an
# encoder (all of them read some model first) runs after it exists.
from mialab.rehearsal import TOKENIZER_CORPUS


def stand_in(wc):
    """The stand-in stage of rule rehearsal_model's wildcards (only a rehearsal plans any)."""
    stands = getattr(PLAN, "stand_ins", {})
    if (wc.name, wc.key) not in stands:
        raise WorkflowError(f"results/rehearsal/models/{wc.name}/{wc.key}: not a stand-in of this config "
                            f"(rehearsal: {config['rehearsal']}); stand-ins: {sorted(s.dir for s in stands.values())}")
    return stands[(wc.name, wc.key)]


rule rehearsal_model:
    input:
        corpus=TOKENIZER_CORPUS,
        encoders=lambda wc: [] if "encoder" in stand_in(wc).manifest["spec"] else PLAN.encoders(),
    output:
        model=directory("results/rehearsal/models/{name}/{key}/model"),
        manifest="results/rehearsal/models/{name}/{key}/manifest.json",
    wildcard_constraints:
        name=r"[A-Za-z0-9_.-]+",
    params:
        manifest=lambda wc: stand_in(wc).manifest,
    priority: 20  # every model stage waits for it
    threads: 1
    conda:
        "../environment.yml"
    log:
        "results/logs/rehearsal_model/{name}/{key}.log",
    benchmark:
        "results/benchmarks/rehearsal_model/{name}/{key}.tsv"
    script:
        "../workflow_scripts/rehearsal_model.py"
