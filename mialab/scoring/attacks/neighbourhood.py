"""Neighbourhood attack (Mattern et al. 2023, arXiv:2305.18462; MIMIR ``mimir/attacks/neighborhood.py``, its
BERT path): the text's loss compared with the losses of ``n_neighbours`` neighbours, texts one masked-LM swap
away. The score is the neighbours' mean loss minus the text's loss, i.e. the text's mean token log-likelihood
minus its neighbours' mean (each neighbour's own mean log-likelihood): a member is likelier than texts close
to it. MIMIR's ``NeighborhoodAttack._attack`` returns the text's loss minus the neighbours' (its convention:
higher = non-member), so ours is minus MIMIR's.

The neighbours (MIMIR's ``BertModel.generate_neighbors_``, strategy ``deterministic``,
``original_tokenization_swap: true``): the text is tokenized by the fill-mask model (``scoring.neighbourhood.
mlm_model``) with offsets, cut to that model's positions (MIMIR's ``max_tokens``, 512 = bert-base's). For every
token after ``[CLS]`` (the final ``[SEP]`` included, as MIMIR), the input embeddings (the embedding layer's
output) get dropout p = 0.7 on that token's embedding alone and are fed to the model as ``inputs_embeds``
(which adds the position embeddings again, as MIMIR's call does); of its top 6 predictions there, each
other than the original token is a candidate scored ``p(candidate) / (1 - p(original))`` (1 - 0.9 where
p(original) = 1). The ``n_neighbours`` highest candidates (ties in position order; at most 100) are the
neighbours, best first: each the text with that token's character span replaced by the candidate's decoded
text, ``##`` removed. The ``[SEP]`` token's span is empty at offset 0, so a candidate there is put before the
text (MIMIR's in-place swap does the same). MIMIR's ``pct_swap_bert`` is read by its ``random`` strategy
only.

Each neighbour is scored by the target as the text is (:func:`mialab.lm.logprobs.token_stats`,
``scoring.max_length`` and ``scoring.truncation``), reading ``log p`` of its tokens alone; its loss is minus its
mean token log-probability, as MIMIR's ``get_lls`` computes one loss per neighbour. A text's neighbours of one
length share a forward pass, stacked without padding (``together``): their logits depend on the text alone (its
neighbours and how many share a length), never on another text's, and differ from a pass of one neighbour
alone by float rounding only.
``reduce``: ``mean`` of the neighbours' losses (the paper, and MIMIR's ``_attack``'s ``mean_substr_score``), or
``max``: MIMIR's ``get_lls`` returns the list of the neighbours' losses, ``_attack`` subtracts each from the
text's loss and ``run.py``'s ``get_mia_scores`` keeps the ``np.min`` of those differences, i.e. the text's
loss against its highest-loss neighbour (what MIMIR's published numbers measure).

Seeding: the dropout is drawn from torch's generator seeded with ``seed`` before each text (in a forked RNG
state), so a text's neighbours are the same alone or among any others; MIMIR seeds once per run, so its
neighbours of a text depend on the texts before it. ``batch_size`` positions share one fill-mask pass (MIMIR:
one; the dropout masks are drawn position by position as MIMIR draws them, so only float rounding differs), and
the fill-mask head reads only each row's masked position (:func:`head_at`; MIMIR computes every position's).

The neighbours depend on the text and the settings alone, so they are found once per dataset (rule
``prepare_attack``, :meth:`Neighbourhood.prepare`: ``results/attacks/neighbourhood/<dataset>/<key>/
prepared.parquet``, one row per text with its neighbours) and every score job of the dataset reads them; MIMIR
finds them again in each run.

Settings ``scoring.neighbourhood``: ``mlm_model`` (a configured ``kind: mlm`` model, or a local folder / hub id
of a masked LM: MIMIR's bert-base-uncased), ``n_neighbours`` (MIMIR's ``n_perturbation_list``, one score per
n; here one n), ``reduce``, ``seed``, ``batch_size``. Costs (:mod:`mialab.scoring.cost`): a score job's, the
``n_neighbours`` target passes a text costs; the preparation's, the fill-mask model's
(:meth:`Neighbourhood.prepare_work`).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from heapq import nlargest
from pathlib import Path

import numpy as np

from mialab.core.progress import progress
from mialab.lm.logprobs import token_stats
from mialab.pipeline.config import ConfigError, model_reference
from mialab.scoring.attacks import Attack, Texts, register

#: MIMIR's BERT path: the dropout on the target token's embedding, the top predictions read there, the most
#: neighbours kept, and the original probability used where it is exactly 1.
DROPOUT, TOP, MOST, CERTAIN = 0.7, 6, 100, 0.9
#: bert-base's positions (MIMIR's ``max_tokens``): the longest text the cost model counts for the fill-mask passes
MLM_POSITIONS = 512


def mlm_path(plan, name: str) -> str:
    """``scoring.neighbourhood.mlm_model`` resolved as CalibDCD resolves its ``mlm_model``
    (``CalibDCDPlan.lm_path``, a method above this floor): a configured model's folder, else the local path
    or hub id as written. A configured model must be a ``kind: mlm`` one (a given one: name its path); another
    name must be a model folder (checked as every folder a config names) or a hub id ``org/name``, which rule
    prefetch fetches (MIMIR's ``bert-base-uncased`` is ``google-bert/bert-base-uncased``)."""
    models = plan.config["models"]
    if name not in models:
        model_reference("scoring.neighbourhood.mlm_model", name, models)   # a folder, checked; or org/name
        return name
    if models[name]["kind"] != "mlm":
        raise ConfigError(f"scoring.neighbourhood.mlm_model: models.{name} is a kind {models[name]['kind']} model, "
                          "not a masked LM (kind: mlm); name a masked LM's folder or hub id directly")
    return plan.model_path(name)


def load_mlm(path: str, device):
    """The fill-mask model and its tokenizer (float32, eval mode), loaded as every model of a job is."""
    import torch
    from transformers import AutoModelForMaskedLM

    from mialab.core.jobs import go_offline
    from mialab.lm.loading import load_pretrained, load_tokenizer

    go_offline()
    tok = load_tokenizer(path)
    if not tok.is_fast:
        raise ValueError(f"scoring.neighbourhood.mlm_model {path}: its tokenizer gives no character offsets "
                         "(not a fast tokenizer)")
    return load_pretrained(AutoModelForMaskedLM, path, dtype=torch.float32).to(device).eval(), tok


@contextmanager
def head_at(mlm, positions: list[int]):
    """Within it, ``mlm``'s output holds row ``r``'s prediction at ``positions[r]`` alone (logits ``[rows, 1,
    vocab]``): a forward hook hands the fill-mask head only those hidden states. MIMIR's ``generate_neighbors_``
    computes and softmaxes every position's and reads one a row; a head works position by position, so the read
    ones are the same but for float rounding, at a fraction of the cost (the head over a vocabulary, and its
    softmax, dominate a small model's pass)."""
    import torch

    def keep(module, args, output):
        key = next(iter(output.keys())) if hasattr(output, "keys") else 0
        hidden = output[key]
        picked = hidden[torch.arange(len(positions), device=hidden.device), positions][:, None]
        if isinstance(output, tuple):
            return (picked, *output[1:])
        output[key] = picked
        return output

    handle = mlm.base_model.register_forward_hook(keep)
    try:
        yield
    finally:
        handle.remove()


def neighbours(mlm, tok, text: str, n: int, *, seed: int, batch_size: int = 32) -> list[str]:
    """The text's ``n`` best one-token swaps (module doc), best first."""
    import torch

    device = next(mlm.parameters()).device
    limit = min(mlm.config.max_position_embeddings, tok.model_max_length)
    enc = tok(text, truncation=True, max_length=limit, return_offsets_mapping=True, return_tensors="pt")
    ids, offsets = enc["input_ids"].to(device), enc["offset_mapping"][0].tolist()
    positions = range(1, ids.shape[1])
    with torch.inference_mode(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        embeds = mlm.base_model.embeddings(ids)
        dropped = [torch.nn.functional.dropout(embeds[:, i, :], p=DROPOUT, training=True) for i in positions]
        replacements: dict[tuple[int, int], float] = {}
        for begin in range(0, len(dropped), batch_size):
            chunk = list(positions)[begin:begin + batch_size]
            rows = embeds.repeat(len(chunk), 1, 1)
            for row, i in enumerate(chunk):
                rows[row, i] = dropped[begin + row][0]
            with head_at(mlm, chunk):
                probs = torch.softmax(mlm(inputs_embeds=rows).logits[:, 0], dim=-1)
            for row, i in enumerate(chunk):
                original = probs[row, ids[0, i]].item()
                top_p, top_c = torch.topk(probs[row], TOP)
                for cand, p in zip(top_c.tolist(), top_p.tolist()):
                    if cand != ids[0, i].item():
                        replacements[(i, cand)] = p / (1 - (CERTAIN if original == 1 else original))
    out = []
    for i, cand in nlargest(MOST, nlargest(n, replacements, key=replacements.get), key=replacements.get):
        start, end = offsets[i]
        out.append(text[:start] + tok.decode(cand).replace("##", "") + text[end:])
    return out


@register
class Neighbourhood(Attack):
    name = "neighbourhood"
    forwards = 10  # MIMIR's largest default n; the config's n_neighbours: passes()
    prepared_by = ("mlm_model", "n_neighbours", "seed", "batch_size")   # the neighbours: once per dataset

    def passes(self, scoring: dict) -> int:
        return scoring[self.name]["n_neighbours"]

    def check(self, scoring: dict) -> str | None:
        if not scoring[self.name].get("mlm_model"):
            return ("scoring.neighbourhood.mlm_model: the neighbourhood attack needs a fill-mask model (a configured "
                    "kind: mlm model, or a masked LM's folder / hub id; MIMIR: google-bert/bert-base-uncased)")
        return None

    def prepare_model(self, settings: dict) -> str | None:
        return settings["mlm_model"]

    def prepare_work(self, facts, dataset: str) -> dict:
        """The fill-mask model, loaded, and its passes: a text of ``L`` tokens masks each of its ``L`` positions in
        a pass over all ``L`` tokens, ``batch_size`` positions a pass. ``L`` is counted as ``scoring.max_length``
        capped at :data:`MLM_POSITIONS` (errs high for short texts)."""
        spec, texts = facts.config["scoring"][self.name], facts.texts(dataset)
        p = facts.params_b(spec["mlm_model"])
        length = min(facts.config["scoring"]["max_length"], MLM_POSITIONS)
        passes = texts * math.ceil(length / spec["batch_size"])
        return {"params_b": p, "dtype": "float32", "loads_b": (p,), "passes": passes,
                "train_flops": 2 * p * 1e9 * texts * length * length}

    def prepare_inputs(self, plan, dataset: str) -> dict[str, str]:
        name = plan.config["scoring"][self.name]["mlm_model"]
        path = mlm_path(plan, name)
        return {"mlm": path} if name in plan.config["models"] or Path(path).is_dir() else {}

    def inputs(self, plan, dataset: str) -> dict[str, str]:
        return {"prepared": self.prepared_run(plan, dataset).path("prepared.parquet")}

    def prepare(self, texts: list[str], ids: list[str], settings: dict, inputs: dict, device: str = "cpu"):
        """Each text's neighbours (:func:`neighbours`), best first: ``id``, ``text``, ``neighbours`` (a list);
        ``device``: ``scoring.device``."""
        import pandas as pd
        import torch

        from mialab.lm.loading import resolve_device

        fault = self.check({self.name: settings})
        if fault:
            raise ValueError(fault)
        mlm, tok = load_mlm(inputs.get("mlm", settings["mlm_model"]), torch.device(resolve_device(device)))
        found: list[list[str]] = []
        with progress() as prog:
            task = prog.add_task("neighbourhood: neighbours", total=len(texts))
            for text in texts:
                found.append(neighbours(mlm, tok, text, settings["n_neighbours"], seed=settings["seed"],
                                        batch_size=settings["batch_size"]))
                prog.advance(task)
        return pd.DataFrame({"id": list(ids), "text": list(texts), "neighbours": found})

    def score(self, texts: Texts) -> np.ndarray:
        spec = texts.settings(self.name)
        found = [list(ns) for ns in texts.prepared(self.name)["neighbours"]]
        flat = [t for ns in found for t in ns]
        names = [f"{i} neighbour {j}" for i, ns in zip(texts.ids, found) for j in range(len(ns))]
        stats = token_stats(texts.model, texts.tokenizer, flat, max_length=texts.scoring["max_length"],
                            truncation=texts.scoring["truncation"], names=names, description="neighbourhood: scoring",
                            vocabulary=False, together=[i for i, ns in enumerate(found) for _ in ns])
        losses = iter(-float(np.mean(st.logp)) for st in stats)
        reduce = {"mean": np.mean, "max": np.max}[spec["reduce"]]
        return np.array([reduce([next(losses) for _ in ns]) + float(np.mean(st.logp))
                         for ns, st in zip(found, texts.stats)])
