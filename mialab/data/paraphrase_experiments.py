"""ADRA's paraphrased setting, as data: what each experiment trains and evaluates on, and the experiment a
dataset's ``paraphrase.apply_to`` names. It imports nothing, so the plan reads it without loading a
paraphraser (:mod:`mialab.data.paraphrase` applies it)."""

#: experiment -> {part: setting}
EXPERIMENTS: dict[str, dict[str, str]] = {
    # ADRA: existing (pretrained / post-trained) models are evaluated on paraphrases ...
    "existing_model": {"evaluate": "paraphrased"},
    # ... fine-tuning experiments train on paraphrases and evaluate on the originals.
    "finetune": {"train": "paraphrased", "evaluate": "original"},
}

#: ``datasets.<name>.paraphrase.apply_to`` -> ADRA experiment: ``evaluation`` (an existing model is
#: evaluated on paraphrases) or ``training`` (the contaminating model trains on paraphrased members
#: and is evaluated on the originals).
APPLY_TO: dict[str, str] = {"evaluation": "existing_model", "training": "finetune"}
