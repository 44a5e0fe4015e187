"""VeilProbe's key-token perturbation (CalibDCD's perturbed prompts).

VeilProbe ranks input tokens by their attribution to the target's output (optimal-transport
attribution over GPT-2 models) and replaces the top ones with a masked-LM's fill-ins. Without an
attribution model we rank tokens by their surprisal under a key-token language model (the least
predictable tokens carry the text-specific content: names, numbers, rare words) and replace each
chosen token by the same model's most likely *other* token at that position, a plausible
in-context substitute.

The key-token model and the target are separate model paths (the VeilProbe reference code loads
one path for both of its two models by mistake).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mialab.lm.loading import load_lm
from mialab.lm.logprobs import map_logprobs, picked


def key_token_perturb(model_path: str, texts: Sequence[str], *, ratio: float = 0.15, batch_size: int = 8,
                      device: str = "auto", dtype: str = "float32") -> list[str]:
    """Replace each text's key tokens: the ``max(1, round(ratio * n))`` most surprising of its ``n``
    scorable tokens, each by the model's most likely different, non-special token at that position.

    Deterministic (surprisal ties are broken by position); a text with no scorable token (one token
    and no BOS) is returned unchanged.
    """
    import torch

    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    model, tok = load_lm(model_path, device=device, dtype=dtype)
    special = sorted(set(tok.all_special_ids))

    def surprisal_and_substitute(logp, targets):
        surprisal = -picked(logp, targets)
        logp[:, special] = -torch.inf  # substitutes: neither special tokens nor the token itself
        return surprisal, logp.scatter_(-1, targets[:, None], -torch.inf).argmax(-1).cpu().numpy()

    rows = [tok(t, add_special_tokens=True)["input_ids"] for t in texts]
    out: list[str] = []
    for row, (surprisal, substitute) in zip(rows, map_logprobs(model, rows, surprisal_and_substitute,
                                                               pad_token_id=tok.pad_token_id, batch_size=batch_size,
                                                               description="key tokens")):
        positions = np.array([j for j in range(1, len(row)) if row[j] not in special], dtype=np.int64)
        new = list(row)
        if len(positions):
            k = max(1, round(ratio * len(positions)))
            for j in positions[np.argsort(-surprisal[positions - 1], kind="stable")[:k]]:
                new[j] = int(substitute[j - 1])
        out.append(tok.decode(new, skip_special_tokens=True))
    return out
