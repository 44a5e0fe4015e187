"""VeilProbe's key-token perturbation (CalibDCD's perturbed prompts), two ways.

``original`` (:func:`original_key_token_perturb`), as VeilProbe's code (``key_perturb/``): each input
token's attribution is the optimal-transport distance (IPOT, 1 - cosine of input embeddings) between
the attribution model's beam-weighted next-token distributions with and without that token; the top
tokens, aggregated over the attribution models, are filled by a masked LM's top-5 predictions.

``surprisal`` (:func:`key_token_perturb`), the earlier substitute: the least predictable tokens under
a key-token language model (names, numbers, rare words), each replaced by the same model's most
likely *other* token at that position.

The key-token model and the target are separate model paths (the VeilProbe reference code loads
one path for both of its two models by mistake).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

import numpy as np

from mialab.lm.loading import load_lm
from mialab.lm.logprobs import map_logprobs, picked

if TYPE_CHECKING:
    import torch


def key_token_perturb(model_path: str, texts: Sequence[str], *, ratio: float = 0.15, device: str = "auto",
                      dtype: str = "float32") -> list[str]:
    """Replace each text's key tokens: the ``max(1, round(ratio * n))`` most surprising of its ``n``
    scorable tokens, each by the model's most likely different, non-special, whole token at that position.

    Whole tokens only (:func:`whole_tokens`): a byte-level tokenizer splits a character of several bytes
    (Arabic, CJK, accented letters) over tokens, and swapping one of them for another token leaves bytes that
    decode to U+FFFD, each of which the target reads as several tokens (the tiny world's worst WikiMIA text grew
    from 214 to 256 tokens). So a scorable token is one that decodes to whole characters, and so is its
    substitute: the perturbed text holds only characters the text or the model's vocabulary spell.

    Deterministic (surprisal ties are broken by position); a text with no scorable token (one token
    and no BOS, or only pieces of characters) is returned unchanged.
    """
    import torch

    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    model, tok = load_lm(model_path, device=device, dtype=dtype)
    special = set(tok.all_special_ids)
    whole = whole_tokens(tok, model.config.vocab_size)
    whole[sorted(special)] = False
    barred = torch.from_numpy(~whole).to(model.device)

    def surprisal_and_substitute(logp, targets):
        surprisal = -picked(logp, targets)
        logp[:, barred] = -torch.inf  # substitutes: whole tokens, neither special nor the token itself
        return surprisal, logp.scatter_(-1, targets[:, None], -torch.inf).argmax(-1).cpu().numpy()

    rows = [tok(t, add_special_tokens=True)["input_ids"] for t in texts]
    out: list[str] = []
    for row, (surprisal, substitute) in zip(rows, map_logprobs(model, rows, surprisal_and_substitute,
                                                               description="key tokens")):
        positions = np.array([j for j in range(1, len(row)) if whole[row[j]]], dtype=np.int64)
        new = list(row)
        if len(positions):
            k = max(1, round(ratio * len(positions)))
            for j in positions[np.argsort(-surprisal[positions - 1], kind="stable")[:k]]:
                new[j] = int(substitute[j - 1])
        out.append(tok.decode(new, skip_special_tokens=True))
    return out


def whole_tokens(tokenizer, size: int) -> np.ndarray:
    """Which of the ids ``0..size-1`` decode to whole characters alone (no U+FFFD: not a piece of a character's
    bytes); ids past the tokenizer's vocabulary (a model's padded embedding rows) are not."""
    known = len(tokenizer)
    return np.array([i < known and "\ufffd" not in tokenizer.decode([i]) for i in range(size)], dtype=bool)


# --- the original: optimal-transport attribution (key_perturb/interpreter.py) and masked-LM fill -------------

#: float64 entries a batch of OT problems may hold per tensor (chunks of positions; 128 MiB)
OT_BUDGET = 2 ** 24


def topp_union(p: "torch.Tensor", q: "torch.Tensor", *, topp: float = 0.9999, topk: int = 1000):
    """``(p[u] / sum, q[u] / sum, u, valid)`` for each row of ``q`` (``(k, V)``): ``u``, the union of ``p``'s and
    that row's top-p tokens (at most ``topk`` each; ascending ids, padded to the longest union, ``valid`` its real
    entries), the support the code's OT compares (``_topp_intersection``)."""
    import torch

    def top(r):  # the first min(top-p count, topk) tokens of r's stable descending order
        values = torch.topk(r, min(topk, r.shape[-1]), dim=-1).values
        reached = torch.cumsum(values, -1) >= topp
        count = torch.where(reached.any(-1), reached.int().argmax(-1) + 1, values.shape[-1])[..., None]
        last = values.gather(-1, count - 1)
        above, tied = r > last, r == last
        return above | (tied & (torch.cumsum(tied, -1) <= count - above.sum(-1, keepdim=True)))

    members = top(p[None]) | top(q)
    rows, ids = members.nonzero(as_tuple=True)
    sizes = members.sum(-1)
    union = torch.zeros(len(q), int(sizes.max()), dtype=torch.long, device=q.device)
    union[rows, (torch.cumsum(members, -1) - 1)[rows, ids]] = ids
    valid = torch.arange(union.shape[1], device=q.device) < sizes[:, None]
    s1, s2 = (torch.where(valid, r, 0.0) for r in (p[union], q.gather(-1, union)))
    return s1 / s1.sum(-1, keepdim=True), s2 / s2.sum(-1, keepdim=True), union, valid


def ipot(a: "torch.Tensor", b: "torch.Tensor", cost: "torch.Tensor", *, beta: float = 2.0,
         iterations: int = 1000, valid: "torch.Tensor | None" = None) -> "torch.Tensor":
    """Transport cost ``sum(P * C)`` of the inexact proximal-point OT plan (IPOT, one Sinkhorn step per
    proximal step) as the code computes it: weights shifted by 1e-4 (not renormalised), float64. Leading
    dimensions are a batch of problems; ``valid`` marks the real entries of padded supports (a padded entry
    carries no mass and no cost, so each problem's cost is that of its real entries alone)."""
    import torch

    valid = torch.ones_like(a, dtype=torch.bool) if valid is None else valid
    a, b = (torch.where(valid, (x + 1e-4).to(torch.float64), 0.0) for x in (a, b))
    cost = cost.to(torch.float64)
    pairs = (valid[..., :, None] & valid[..., None, :]).to(torch.float64)
    n = valid.sum(-1).to(torch.float64)[..., None, None]
    u = v = valid.to(torch.float64)
    plan = pairs / n ** 2
    kernel = torch.exp(-cost / beta) * pairs
    for _ in range(iterations):
        q = kernel * plan
        u = torch.where(valid, a / (q * v[..., None, :]).sum(-1), 0.0)
        v = torch.where(valid, b / (q * u[..., :, None]).sum(-2), 0.0)
        plan = u[..., :, None] * q * v[..., None, :]
    return (plan * cost).sum((-2, -1))


def ot_distances(p: "torch.Tensor", q: "torch.Tensor", embeddings: "torch.Tensor", *, topk: int = 1000,
                 iterations: int = 1000) -> "torch.Tensor":
    """OT distance of next-token distribution ``p`` to each row of ``q`` on their top-p union (at most ``topk``
    tokens of each), the cost 1 - cosine of the tokens' input embeddings, ``iterations`` IPOT steps; the rows'
    problems are solved together, in chunks of :data:`OT_BUDGET`. A zero embedding (a tiny model's pad row) is
    at cosine 0 to every token (the code's cost is NaN there)."""
    import torch

    chunk = max(1, OT_BUDGET // (p.shape[-1] + min(2 * topk, p.shape[-1]) ** 2))
    out = []
    for rows in torch.split(q, chunk):
        s1, s2, union, valid = topp_union(p, rows, topk=topk)
        unit = torch.nn.functional.normalize(embeddings[union], dim=-1)
        out.append(ipot(s1, s2, 1 - unit @ unit.transpose(-1, -2), iterations=iterations, valid=valid))
    return torch.cat(out)


def _next_token_distributions(model, ids: "torch.Tensor", mask: "torch.Tensor", *, beams: int,
                              new_tokens: int) -> "torch.Tensor":
    """The code's ``p_j`` of each row: the next-token distribution after each of ``beams`` beam-search
    continuations, weighted by the continuation's probability (token id 0 counts as probability 1),
    normalised. The weights are taken in log space and shifted by their maximum: the same normalised
    mixture without underflow. Rows are searched in one batch (the code: one at a time), so a row whose
    beams all end early is padded to the batch's continuation length."""
    import torch

    gen = model.generate(input_ids=ids, attention_mask=mask, num_beams=beams, num_return_sequences=beams,
                         max_new_tokens=new_tokens, do_sample=False, early_stopping=False)
    new = gen[:, ids.shape[1]:]
    full = torch.cat([mask.repeat_interleave(beams, dim=0), torch.ones_like(new)], dim=1)
    logp = torch.log_softmax(model(input_ids=gen, attention_mask=full, logits_to_keep=new.shape[1] + 1)
                             .logits.double(), dim=-1)
    picked_logp = logp[:, :-1].gather(-1, new[..., None])[..., 0].masked_fill(new == 0, 0.0)
    weights = torch.softmax(picked_logp.sum(1).view(len(ids), beams), dim=1)
    return (weights[..., None] * logp[:, -1].exp().view(len(ids), beams, -1)).sum(1)


def ot_attributions(model, ids: Sequence[int], *, beams: int = 10, new_tokens: int = 10, topk: int = 1000,
                    iterations: int = 1000, batch_size: int = 8) -> np.ndarray:
    """Each input position's attribution: the OT distance (:func:`ot_distances`) between ``p_j`` of the input
    and of the input with that position masked (id 0, attention 0), as ``Interpreter.interpret_ours``; the
    masked inputs are searched ``batch_size`` at a time."""
    import torch

    device = next(model.parameters()).device
    embeddings = model.get_input_embeddings().weight.detach()
    row = torch.tensor([list(ids)], device=device)
    n = row.shape[1]
    masked, mask = row.repeat(n + 1, 1), torch.ones(n + 1, n, dtype=torch.long, device=device)
    positions = torch.arange(n, device=device)
    masked[positions + 1, positions], mask[positions + 1, positions] = 0, 0   # row 0: the input itself
    with torch.no_grad():
        p = torch.cat([_next_token_distributions(model, masked[i:i + batch_size], mask[i:i + batch_size],
                                                 beams=beams, new_tokens=new_tokens)
                       for i in range(0, n + 1, batch_size)])
    return ot_distances(p[0], p[1:], embeddings, topk=topk, iterations=iterations).cpu().numpy()


def key_positions(scores: Sequence[np.ndarray], tokens: Sequence[Sequence[str]], candidates: Sequence[int], *,
                  top_k: int = 26, keep: int = 13) -> list[int]:
    """The code's aggregation over attribution models: each model's ``top_k`` candidate positions (halved
    while more than the candidates), scores averaged per token string, the ``keep`` best strings, each at
    its most frequent position (ties: the first). Score ties keep position order."""
    entries: dict[str, list[tuple[float, int]]] = {}
    for score, toks in zip(scores, tokens, strict=True):
        k = top_k
        while k > len(candidates):
            k //= 2
        cand = np.asarray(candidates)
        for j in cand[np.argsort(-score[cand], kind="stable")[:k]]:
            entries.setdefault(toks[j], []).append((float(score[j]), int(j)))
    mean = {t: float(np.mean([s for s, _ in e])) for t, e in entries.items()}
    best = sorted(mean, key=lambda t: -mean[t])[:keep]
    positions = [[j for _, j in entries[t]] for t in best]
    return sorted(max(sorted(set(p)), key=p.count) for p in positions)


FILL_TOKEN = re.compile(r"[a-zA-Z0-9\-]+")


def mlm_fill(mlm, mlm_tok, text: str, spans: Sequence[tuple[int, int]], rng: np.random.Generator, *,
             top: int = 5) -> str:
    """``text`` with each character span replaced by a random one of the masked LM's ``top`` predictions
    for it (the span alone masked, its leading space kept), other than the span's word and made of
    letters, digits and hyphens only; a span without such a prediction stays (``perturb_sentence_with_mlm``).
    A text longer than the masked LM's positions is read in a window of them centred on the mask (the code's
    bert-base-cased has 512 for texts far shorter; a small fill model may have fewer)."""
    import torch

    device = next(mlm.parameters()).device
    limit = mlm.config.max_position_embeddings
    out, last = [], 0
    for start, end in spans:
        span = text[start:end]
        lead, word = span[:len(span) - len(span.lstrip())], span.strip()
        ids = mlm_tok(text[:start] + lead + mlm_tok.mask_token + text[end:], return_tensors="pt")["input_ids"][0]
        at = int((ids == mlm_tok.mask_token_id).nonzero()[0, 0])
        if len(ids) > limit:            # [CLS], the window's tokens, [SEP]
            body = limit - 2
            first = min(max(1, at - body // 2), len(ids) - 1 - body)
            ids, at = torch.cat([ids[:1], ids[first:first + body], ids[-1:]]), at - first + 1
        ids = ids[None].to(device)
        with torch.no_grad():
            logits = mlm(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, at]
        predictions = [mlm_tok.decode([i]).strip() for i in torch.topk(logits, top).indices.tolist()]
        keep = [t for t in predictions if t != word and FILL_TOKEN.fullmatch(t)]
        out += [text[last:start], lead + keep[int(rng.integers(len(keep)))] if keep else span]
        last = end
    return "".join(out + [text[last:]])


def original_key_token_perturb(attribution_models: Sequence[str], mlm_path: str, texts: Sequence[str], *,
                               beams: int = 10, new_tokens: int = 10, ot_topk: int = 1000, ot_iterations: int = 1000,
                               top_k: int = 26, keep: int = 13, seed: int = 0, first_index: int = 0, batch_size: int = 8,
                               device: str = "auto", dtype: str = "float32") -> list[str]:
    """VeilProbe's key-token perturbation (``keyperturb_agg.process_sentence``): key tokens by OT attribution
    (:func:`ot_attributions`) on each attribution model (the code: GPT-2, -medium, -large), aggregated
    (:func:`key_positions`) on their shared tokens, filled by the masked LM (:func:`mlm_fill`). Special
    tokens are never key tokens; the fill's random choice is seeded per text (``seed``, ``first_index`` +
    its index in ``texts``: a slice of a list perturbed alone is perturbed as in the whole): deterministic."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from mialab.lm.loading import load_pretrained, pinned, resolve_device

    models = [load_lm(path, device=device, dtype=dtype) for path in attribution_models]
    mlm_tok = AutoTokenizer.from_pretrained(pinned(mlm_path))
    mlm = load_pretrained(AutoModelForMaskedLM, mlm_path).to(resolve_device(device)).eval()
    out = []
    for i, text in enumerate(texts):
        encs = [tok(text, return_offsets_mapping=True, return_special_tokens_mask=True) for _, tok in models]
        first = encs[0]
        if any(enc["input_ids"] != first["input_ids"] for enc in encs):
            raise ValueError("VeilProbe's attribution models must share a tokenizer (the code: the GPT-2 family)")
        candidates = [j for j, s in enumerate(first["special_tokens_mask"]) if not s]
        if not candidates:
            out.append(text)
            continue
        scores = [ot_attributions(model, enc["input_ids"], beams=beams, new_tokens=new_tokens, topk=ot_topk,
                                  iterations=ot_iterations, batch_size=batch_size)
                  for (model, _), enc in zip(models, encs)]
        tokens = [tok.convert_ids_to_tokens(enc["input_ids"]) for (_, tok), enc in zip(models, encs)]
        chosen = key_positions(scores, tokens, candidates, top_k=top_k, keep=keep)
        spans = [tuple(first["offset_mapping"][j]) for j in chosen]
        out.append(mlm_fill(mlm, mlm_tok, text, spans, np.random.default_rng([seed, first_index + i])))
    return out
