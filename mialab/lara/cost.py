"""What one job of LaRA's rules computes (mialab.lm.cost, priced by mialab.pipeline.sizing). A dataset's
questions are every seed's split's candidates and the clean reference set (``controls.n_reference``).

- ``lara_perturbations`` (dataset): with ``lara.llm``, one LLM answer per question for its neighbours, one for
  its blank and one for its blanked text's paraphrases (each at its ``max_new_tokens``) on one engine; the
  offline backends run on the CPU.
- ``lara_features`` (model, dataset): one forward pass of every question and each of its perturbed texts
  (``neighbours.n`` neighbours, the blanked text, ``paraphrase.n_variants`` paraphrases), one text a pass.
- ``lara_baselines`` (model, dataset): transformers' generate of every question's greedy and perturbed
  answers and CDD's samples (``cdd.max_new_tokens`` each) and Self-Critique's second answer, ``batch_size``
  sequences a batch; ReCaLL's and the responses' forward passes.
"""

from __future__ import annotations

from mialab.lm.cost import Work


def questions(facts, dataset: str) -> float:
    return facts.texts(dataset) + facts.config["lara"]["controls"]["n_reference"]


def lara_perturbations(facts, model: str | None, dataset: str, **_) -> Work:
    lara = facts.config["lara"]
    llm = lara.get("llm")
    if not llm:
        return Work()
    q = questions(facts, dataset)
    answers = sum(lara[part]["backend"] == "llm" for part in ("neighbours", "blank")) * llm["max_new_tokens"]
    if lara["paraphrase"]["backend"] == "llm":
        answers += lara["paraphrase"]["max_new_tokens"]
    p = facts.params_b(llm["model"])
    generated = {"vllm_tokens": q * answers} if llm["engine"] == "vllm" else {"hf_tokens": q * answers}
    return Work(params_b=p, loads_b=(p,), engines=int(llm["engine"] == "vllm"), **generated)


def lara_features(facts, model: str, dataset: str, **_) -> Work:
    lara = facts.config["lara"]
    texts = questions(facts, dataset) * (2 + lara["neighbours"]["n"] + lara["paraphrase"]["n_variants"])
    tokens = lara["features"].get("max_length") or facts.pool(dataset).tokens
    p = facts.params_b(model)
    return Work(params_b=p, dtype=lara["features"]["dtype"], loads_b=(p,), scored_texts=texts,
                scored_tokens=texts * tokens)


def lara_baselines(facts, model: str, dataset: str, **_) -> Work:
    base = facts.config["lara"]["baselines"]
    q = facts.texts(dataset)
    new = q * ((2 + base["cdd"]["n_samples"]) * base["cdd"]["max_new_tokens"] + base["self_critique"]["max_new_tokens"])
    p = facts.params_b(model)
    scored = 4 * q   # ReCaLL's question with and without its prefix, the two responses' log-probabilities
    return Work(params_b=p, dtype=base["dtype"], loads_b=(p,), hf_tokens=new, hf_batch=base["batch_size"],
                scored_texts=scored, scored_tokens=scored * facts.pool(dataset).tokens)


WORK = {"lara_perturbations": lara_perturbations, "lara_features": lara_features, "lara_baselines": lara_baselines}
