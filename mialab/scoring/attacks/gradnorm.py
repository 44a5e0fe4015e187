"""GradNorm (Wang et al. 2024, arXiv:2402.17012; MIMIR ``mimir/attacks/gradnorm.py``): the text's mean token
loss backpropagated through the model, then the ``p``-norm of every parameter's gradient, averaged over the
parameters; the score is minus that mean (a member sits near a minimum: small gradients). MIMIR returns the
same value. Settings ``scoring.gradnorm``: ``p`` (1, 2 or inf, MIMIR's default inf).

The gradients are those of the model in ``scoring.dtype`` (a bf16 model has bf16 gradients); a text longer
than ``scoring.max_length`` backpropagates its scored tokens (``scoring.truncation``), its windows' losses
averaged as MIMIR's ``get_probabilities`` does.
"""

from __future__ import annotations

import numpy as np

from mialab.core.progress import progress
from mialab.lm.logprobs import sliding_windows
from mialab.scoring.attacks import Attack, Texts, register

NORMS = {1: 1, 2: 2, "inf": float("inf")}


def gradient_norm(model, ids: list[int], *, p: float, max_length: int) -> float:
    """Mean over the parameters of the ``p``-norm of d(mean token loss of ``ids``)/d(parameter)."""
    import torch

    device = next(model.parameters()).device
    model.zero_grad(set_to_none=True)
    picked = []
    for begin, end, keep in sliding_windows(len(ids), max_length):
        row = torch.tensor([ids[begin:end]], device=device)
        logp = torch.log_softmax(model(input_ids=row).logits[0, :-1].float(), dim=-1)
        picked.append(logp.gather(-1, row[0, 1:, None]).squeeze(-1)[-keep:])
    (-torch.cat(picked).mean()).backward()
    grads = [w.grad.detach() for w in model.parameters() if w.grad is not None]
    if p == float("inf"):   # max |g| from the gradient's own extremes: exact in any dtype, a tenth of norm(inf)'s time
        norms = torch.stack([torch.stack(torch.aminmax(g)).abs().max().float() for g in grads])
    else:
        norms = torch.stack([torch.linalg.vector_norm(g, p, dtype=torch.float32) for g in grads])
    model.zero_grad(set_to_none=True)
    return float(norms.mean())


@register
class GradNorm(Attack):
    name = "gradnorm"
    backward = True

    def score(self, texts: Texts) -> np.ndarray:
        import torch

        p = NORMS[texts.settings(self.name)["p"]]
        model, rows = texts.model, texts.rows
        for w in model.parameters():
            w.requires_grad_(True)
        out = np.empty(len(rows))
        with torch.enable_grad(), progress() as prog:
            task = prog.add_task("gradnorm", total=len(rows))
            for i, ids in enumerate(rows):
                out[i] = -gradient_norm(model, ids, p=p, max_length=texts.scoring["max_length"])
                prog.advance(task)
        return out
