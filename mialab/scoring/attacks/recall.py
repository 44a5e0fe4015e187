"""ReCaLL (Xie et al. 2024; MIMIR ``mimir/attacks/recall.py``): the text's mean token log-likelihood after a
prefix of known non-members, divided by its mean log-likelihood alone. A non-member prefix lowers a member's
likelihood more than a non-member's, so the ratio (both means negative) is higher for members. MIMIR returns
minus this ratio (its own loss convention: higher = non-member).

The prefix: the first ``num_shots`` non-members of the dataset's pool, in pool order, that are in no seed's
split (so no evaluated candidate and no evaluation label; MIMIR takes the first non-members of the evaluated
set itself: docs/fidelity.md), each cut to its first ``shot_max_words`` words where set (null: whole, as MIMIR),
joined without separator as MIMIR does. As MIMIR's ``process_prefix``: the first shots are dropped while
prefix and an average text (the mean token count of the job's texts) exceed ``scoring.max_length``, and where
not even one shot fits, every shot is kept. The conditional likelihood reads prefix and text (each tokenized
alone, as MIMIR) in consecutive windows of ``scoring.max_length`` tokens, scoring the text's tokens only (a
text's tokens past the first window are read without the prefix, as in MIMIR); a prefix as long as a window is
an error. Settings ``scoring.recall``: ``num_shots``, ``shot_max_words``.
"""

from __future__ import annotations

import numpy as np

from mialab.core.progress import progress
from mialab.scoring.attacks import Attack, Texts, register


def fitted_shots(shots: list[str], tokenizer, avg_length: int, max_length: int) -> list[str]:
    """The last shots that fit beside ``avg_length`` tokens in ``max_length`` (all when they all fit, or when
    none does: MIMIR's ``prefix[-0:]``)."""
    counts = [len(tokenizer.encode(s)) for s in shots]
    if sum(counts) + avg_length <= max_length:
        return shots
    kept, used = 0, avg_length
    for c in counts:
        if used + c > max_length:
            break
        kept, used = kept + 1, used + c
    return shots[len(shots) - kept:] if kept else shots


def conditional_mean_logp(model, prefix: list[int], text: list[int], max_length: int) -> float:
    """Mean ``log p`` of ``text``'s tokens after ``prefix``, read in consecutive windows of ``max_length``."""
    import torch

    device = next(model.parameters()).device
    row = prefix + text
    total, count = 0.0, 0
    with torch.inference_mode():
        for begin in range(0, len(row), max_length):
            window = torch.tensor([row[begin:begin + max_length]], device=device)
            first = max(len(prefix) - begin, 1)  # the first scored target position in the window
            if first >= window.shape[1]:
                continue
            logp = torch.log_softmax(model(input_ids=window).logits[0, :-1].float(), dim=-1)
            picked = logp.gather(-1, window[0, 1:, None]).squeeze(-1)[first - 1:]
            total, count = total + float(picked.double().sum()), count + len(picked)
    if not count:
        raise ValueError("ReCaLL: a text has no token scored after the prefix")
    return total / count


@register
class ReCaLL(Attack):
    name = "recall"
    forwards = 1

    def inputs(self, plan, dataset: str) -> dict[str, str]:
        return {"pool": plan.pool(dataset).path("pool.parquet")}

    def prefix(self, texts: Texts) -> list[str]:
        """The known non-members (module doc), fitted to the context."""
        spec = texts.settings(self.name)
        shots = texts.known_nonmembers()["text"].iloc[:spec["num_shots"]].tolist()
        if spec["shot_max_words"]:
            shots = [" ".join(s.split()[:spec["shot_max_words"]]) for s in shots]
        if not shots:
            raise ValueError(f"scoring.recall: pool {texts.inputs['pool']} has no non-member outside the seeds' "
                             "splits to condition on; lower split.n_per_class or use fewer seeds")
        avg = int(np.mean([len(texts.tokenizer.encode(t)) for t in texts.texts]))
        return fitted_shots(shots, texts.tokenizer, avg, texts.scoring["max_length"])

    def score(self, texts: Texts) -> np.ndarray:
        prefix = texts.tokenizer("".join(self.prefix(texts)))["input_ids"]
        if len(prefix) >= texts.scoring["max_length"]:
            raise ValueError(f"scoring.recall: the prefix of {len(prefix)} tokens fills scoring.max_length = "
                             f"{texts.scoring['max_length']}; set scoring.recall.shot_max_words or fewer num_shots")
        out = np.empty(len(texts.texts))
        with progress() as prog:
            task = prog.add_task("recall", total=len(out))
            for i, (ids, st) in enumerate(zip(texts.rows, texts.stats)):
                out[i] = conditional_mean_logp(texts.model, prefix, ids, texts.scoring["max_length"]) \
                    / float(np.mean(st.logp))
                prog.advance(task)
        return out
